"""The compiled half of :mod:`.fused_decode`: one program of the fused paged decode, per request.

Everything here is compiled by numba, on arguments that :func:`.fused_decode.paged_decode_numba`
has checked and laid out (C-contiguous numpy arrays; q in fp32, tables and lengths in int64):
nothing here checks bounds. This module imports numba, so :mod:`.fused_decode` imports it only
when a kernel is first needed, and falls back to torch if that fails.

The program keeps the Triton kernel's shape: a loop over the request's blocks through its block
table and an online softmax (``m``, ``l``, ``acc``), every K/V row read where it lies in the cache.
One thing in it is for the CPU only: it asks for rows a pass before it reads them
(:func:`.prefetch.prefetch_row`), which measured worth keeping (``benchmarks/RESULTS.md``).
``nogil=True`` lets several Python threads run programs at once (:func:`.launch.on_threads`).

Fast math without ``nnan``/``ninf``: sums may be reordered (vectorised dot products), but NaN and
infinity keep their meaning. numba's disk cache ignores jit options, so every function here is
compiled with the same ones.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .prefetch import LINE_BYTES, prefetch_row

_FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}


def _block(cache, block, n, upcast, buf):
    """Physical ``block`` of a K or V cache as ``[S, H_kv, D]`` fp32, its first ``n`` rows valid.

    numba compiles one of two versions by the type of ``upcast`` (:func:`_block_versions`). An fp32
    cache (``upcast is None``) is read where it lies. numba has no float16, so a 16-bit cache
    comes as its bit patterns: its ``n`` rows are upcast into ``buf`` through ``upcast``, the fp32
    value of every one of the 65,536 patterns.
    """
    raise TypeError("_block runs only inside numba-compiled code")


@overload(_block, jit_options={"fastmath": _FASTMATH}, inline="always")
def _block_versions(cache, block, n, upcast, buf):
    """:func:`_block`'s version for the type of ``upcast``, chosen at compile time."""
    if isinstance(upcast, types.NoneType):
        return lambda cache, block, n, upcast, buf: cache[block]

    def upcast_block(cache, block, n, upcast, buf):
        for s in range(n):
            for h in range(cache.shape[2]):
                for d in range(cache.shape[3]):
                    buf[s, h, d] = upcast[cache[block, s, h, d]]
        return buf
    return upcast_block


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def decode_request(b, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, out):
    """One program: request ``b``'s output ``out[b]``, all its query heads served by each K/V row read.

    What program b touches, for T = seq_lens[b] tokens in N = ceil(T / S) blocks::

        q[b]                         [H_q, D], scaled once
        block_tables[b, 0:N]         one block id per block j:  [ 7 | 2 | 9 | junk.. ]
                                                                  |   |   |
        k_cache / v_cache  block 2   [ # # # # ]  j = 1  <--------+---'   |
                           block 7   [ # # # # ]  j = 0  <--------'       |
                           block 9   [ # # # . ]  j = 2  <----------------'
                                       each # is one token's [H_kv, D] row, read in place;
                                       slots with j*S + s >= T are never read
        out[b]                       [H_q, D], written once

    Every ``step_blocks`` blocks: the step's scores (each K row dotted with the G query heads of
    each KV head), then the running max ``m`` and sum ``l`` per query head (fp32), which rescale
    the accumulator when the max grows, then the step's V rows added in, weighted by their
    probabilities. The Triton kernel runs one program per (request, KV head); on a CPU one per
    request is faster, since one token's KV heads lie side by side (a 4 KiB row at 8 x 128 fp32).
    """
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    S, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    T = seq_lens[b]
    qs = q[b] * scale
    m = np.full(num_q_heads, -np.inf, dtype=np.float32)           # running max of scores
    l = np.zeros(num_q_heads, dtype=np.float32)                   # running sum of exp(score - m)
    acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)     # running sum of exp(..) * v
    p = np.empty((num_q_heads, step_blocks * S), dtype=np.float32)
    buf = np.empty((S, num_kv_heads, head_dim), dtype=np.float32)
    num_blocks = (T + S - 1) // S
    for j0 in range(0, num_blocks, step_blocks):                  # a step: blocks j0 .. j1 - 1
        j1 = min(j0 + step_blocks, num_blocks)
        n = _scores(qs, k_cache, v_cache, block_tables[b], T, j0, j1, upcast, buf, p)
        _online_softmax(p, n, m, l, acc)
        _add_values(p, v_cache, k_cache, block_tables[b], T, j0, j1, upcast, buf, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit(cache=True, fastmath=_FASTMATH)
def _scores(qs, k_cache, v_cache, table, T, j0, j1, upcast, buf, p):
    """``p[:, t] = qs . k_t`` for the tokens ``t`` of blocks ``j0 .. j1 - 1``; returns their count (>= 1).

    Asks for each token's V row, which :func:`_add_values` reads next, and for the first line of
    the next step's K rows (a 4 KiB row is one page here, and its first touch waits longest).
    """
    S, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = qs.shape[0] // num_kv_heads
    ahead = j1 - j0                                               # block j + ahead: same place, next step
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)                                     # slots past T are never read
        k = _block(k_cache, table[j], n, upcast, buf)
        for slot in range(n):
            prefetch_row(v_cache, table[j], slot, v_cache.strides[1])
            if (j + ahead) * S + slot < T:
                prefetch_row(k_cache, table[j + ahead], slot, LINE_BYTES)
            for h in range(num_kv_heads):
                for hq in range(h * group, (h + 1) * group):      # the G query heads of KV head h
                    s = np.float32(0.0)
                    for d in range(head_dim):
                        s += qs[hq, d] * k[slot, h, d]
                    p[hq, t + slot] = s
        t += n
    return t


@njit(cache=True, fastmath=_FASTMATH)
def _online_softmax(p, n, m, l, acc):
    """Fold ``n`` new scores per query head into ``m`` and ``l``, rescale ``acc``; scores become weights."""
    for hq in range(p.shape[0]):
        m_new = m[hq]
        for t in range(n):
            m_new = max(m_new, p[hq, t])
        alpha = np.exp(m[hq] - m_new)                             # 0 on the first step, where m = -inf
        total = np.float32(0.0)
        for t in range(n):
            p[hq, t] = np.exp(p[hq, t] - m_new)
            total += p[hq, t]
        l[hq] = l[hq] * alpha + total
        m[hq] = m_new
        for d in range(acc.shape[1]):
            acc[hq, d] *= alpha


@njit(cache=True, fastmath=_FASTMATH)
def _add_values(p, v_cache, k_cache, table, T, j0, j1, upcast, buf, acc):
    """``acc += p @ V`` over the tokens of blocks ``j0 .. j1 - 1``, each V row read in place.

    Asks for the next step's K rows, which :func:`_scores` reads next, and the first line of its V rows.
    """
    S, num_kv_heads, head_dim = v_cache.shape[1], v_cache.shape[2], v_cache.shape[3]
    group = acc.shape[0] // num_kv_heads
    ahead = j1 - j0
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)
        v = _block(v_cache, table[j], n, upcast, buf)
        for slot in range(n):
            if (j + ahead) * S + slot < T:
                prefetch_row(k_cache, table[j + ahead], slot, k_cache.strides[1])
                prefetch_row(v_cache, table[j + ahead], slot, LINE_BYTES)
            for h in range(num_kv_heads):
                for hq in range(h * group, (h + 1) * group):
                    w = p[hq, t + slot]
                    for d in range(head_dim):
                        acc[hq, d] += w * v[slot, h, d]
        t += n
