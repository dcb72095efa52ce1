"""The compiled half of :mod:`.contiguous_decode`: the fused decode program reading a contiguous cache.

It is :func:`.numba_kernel.decode_request` with one change: where that program finds token ``t``
through the block table (row ``t % S`` of block ``table[t // S]``), this one finds it at row
``starts[b] + t`` of one packed ``[sum(T), H_kv, D]`` array, request after request. Same steps of
``step_tokens`` tokens, same online softmax (:func:`.numba_kernel._online_softmax` itself), same
loops over KV heads and their query heads, same prefetches at the same points, same fp32 maths:
timing the two side by side on the same bytes shows what the table's indirection costs alone.

fp32 only, no bounds checks: :func:`.contiguous_decode.contiguous_decode_numba` checks first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .numba_kernel import _FASTMATH, _online_softmax
from .prefetch import LINE_BYTES, prefetch_token


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def decode_request_contiguous(b, q, keys, values, starts, seq_lens, scale, step_tokens, out):
    """One program: request ``b``'s output ``out[b]`` from its rows ``starts[b] .. starts[b] + T - 1``.

    ``q [B, H_q, D]`` fp32; ``keys``, ``values [sum(T), H_kv, D]`` fp32, each request's tokens in
    order and side by side; ``out [B, H_q, D]`` fp32, written once.
    """
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    T, first = seq_lens[b], starts[b]
    qs = q[b] * scale
    m = np.full(num_q_heads, -np.inf, dtype=np.float32)
    l = np.zeros(num_q_heads, dtype=np.float32)
    acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)
    p = np.empty((num_q_heads, step_tokens), dtype=np.float32)
    for t0 in range(0, T, step_tokens):                           # a step: tokens t0 .. t1 - 1
        t1 = min(t0 + step_tokens, T)
        _scores_rows(qs, keys, values, first, T, t0, t1, p)
        _online_softmax(p, t1 - t0, m, l, acc)
        _add_value_rows(p, values, keys, first, T, t0, t1, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit(cache=True, fastmath=_FASTMATH)
def _scores_rows(qs, keys, values, first, T, t0, t1, p):
    """``p[:, t - t0] = qs . k_t`` for tokens ``t0 .. t1 - 1``; asks for each V row and the next step's K rows."""
    num_kv_heads, head_dim = keys.shape[1], keys.shape[2]
    group = qs.shape[0] // num_kv_heads
    ahead = t1 - t0
    for t in range(t0, t1):
        prefetch_token(values, first + t, values.strides[0])
        if t + ahead < T:
            prefetch_token(keys, first + t + ahead, LINE_BYTES)
        k = keys[first + t]
        for h in range(num_kv_heads):
            for hq in range(h * group, (h + 1) * group):          # the G query heads of KV head h
                s = np.float32(0.0)
                for d in range(head_dim):
                    s += qs[hq, d] * k[h, d]
                p[hq, t - t0] = s


@njit(cache=True, fastmath=_FASTMATH)
def _add_value_rows(p, values, keys, first, T, t0, t1, acc):
    """``acc += p @ V`` over tokens ``t0 .. t1 - 1``; asks for the next step's K rows and its V rows' first line."""
    num_kv_heads, head_dim = values.shape[1], values.shape[2]
    group = acc.shape[0] // num_kv_heads
    ahead = t1 - t0
    for t in range(t0, t1):
        if t + ahead < T:
            prefetch_token(keys, first + t + ahead, keys.strides[0])
            prefetch_token(values, first + t + ahead, LINE_BYTES)
        v = values[first + t]
        for h in range(num_kv_heads):
            for hq in range(h * group, (h + 1) * group):
                w = p[hq, t - t0]
                for d in range(head_dim):
                    acc[hq, d] += w * v[h, d]
