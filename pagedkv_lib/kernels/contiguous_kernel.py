"""The compiled half of :mod:`.contiguous_decode`: the fused decode program reading a contiguous cache.

It is :func:`.numba_kernel.decode_request` with one change: where that program finds token ``t``
through the block table (row ``t % S`` of block ``table[t // S]``), this one finds it at row
``starts[b] + t`` of one packed ``[sum(T), H_kv, D]`` array, request after request. Same steps of
``step_tokens`` tokens, same online softmax (:func:`.numba_kernel._online_softmax` itself), same
passes (four query heads per pass over a K row, two tokens and four query heads per pass over V
rows), no prefetches either, same fp32 maths: timing the two side by side on the
same bytes shows what the table's indirection costs alone.

fp32 only, no bounds checks: :func:`.contiguous_decode.contiguous_decode_numba` checks first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .numba_kernel import _FASTMATH, _online_softmax


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
    two_k = np.empty(step_tokens, dtype=np.int32)
    for t0 in range(0, T, step_tokens):                           # a step: tokens t0 .. t1 - 1
        t1 = min(t0 + step_tokens, T)
        _scores_rows(qs, keys, first, t0, t1, p)
        _online_softmax(p, t1 - t0, m, l, acc, two_k)
        _add_value_rows(p, values, first, t0, t1, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit(cache=True, fastmath=_FASTMATH)
def _scores_rows(qs, keys, first, t0, t1, p):
    """``p[:, t - t0] = qs . k_t`` for tokens ``t0 .. t1 - 1``, four query heads per pass over a K row."""
    num_kv_heads, head_dim = keys.shape[1], keys.shape[2]
    group = qs.shape[0] // num_kv_heads
    for t in range(t0, t1):
        r = first + t
        for h in range(num_kv_heads):
            g0, g1 = h * group, (h + 1) * group                   # the G query heads of KV head h
            hq = g0
            while hq + 4 <= g1:
                s0 = np.float32(0.0)
                s1 = np.float32(0.0)
                s2 = np.float32(0.0)
                s3 = np.float32(0.0)
                for d in range(head_dim):
                    k = keys[r, h, d]
                    s0 += qs[hq, d] * k
                    s1 += qs[hq + 1, d] * k
                    s2 += qs[hq + 2, d] * k
                    s3 += qs[hq + 3, d] * k
                p[hq, t - t0] = s0
                p[hq + 1, t - t0] = s1
                p[hq + 2, t - t0] = s2
                p[hq + 3, t - t0] = s3
                hq += 4
            while hq < g1:
                s = np.float32(0.0)
                for d in range(head_dim):
                    s += qs[hq, d] * keys[r, h, d]
                p[hq, t - t0] = s
                hq += 1


@njit(cache=True, fastmath=_FASTMATH)
def _add_value_rows(p, values, first, t0, t1, acc):
    """``acc += p @ V`` over tokens ``t0 .. t1 - 1``, two tokens and four query heads per pass over V rows."""
    num_kv_heads, head_dim = values.shape[1], values.shape[2]
    group = acc.shape[0] // num_kv_heads
    for t in range(t0, t1, 2):
        pair = t + 1 < t1
        ra = first + t
        rb = ra + 1 if pair else ra
        i, u = t - t0, (t + 1 - t0 if pair else t - t0)
        for h in range(num_kv_heads):
            g0, g1 = h * group, (h + 1) * group
            hq = g0
            while hq + 4 <= g1:
                a0, a1, a2, a3 = acc[hq], acc[hq + 1], acc[hq + 2], acc[hq + 3]
                w0, w1, w2, w3 = p[hq, i], p[hq + 1, i], p[hq + 2, i], p[hq + 3, i]
                if pair:
                    x0, x1, x2, x3 = p[hq, u], p[hq + 1, u], p[hq + 2, u], p[hq + 3, u]
                    for d in range(head_dim):
                        va = values[ra, h, d]
                        vb = values[rb, h, d]
                        a0[d] += w0 * va + x0 * vb
                        a1[d] += w1 * va + x1 * vb
                        a2[d] += w2 * va + x2 * vb
                        a3[d] += w3 * va + x3 * vb
                else:
                    for d in range(head_dim):
                        va = values[ra, h, d]
                        a0[d] += w0 * va
                        a1[d] += w1 * va
                        a2[d] += w2 * va
                        a3[d] += w3 * va
                hq += 4
            while hq < g1:
                w = p[hq, i]
                if pair:
                    x = p[hq, u]
                    for d in range(head_dim):
                        acc[hq, d] += w * values[ra, h, d] + x * values[rb, h, d]
                else:
                    for d in range(head_dim):
                        acc[hq, d] += w * values[ra, h, d]
                hq += 1
