"""The compiled half of :mod:`.fused_decode`: one program of the fused paged decode, per request.

Everything here is compiled by numba, on arguments that :func:`.fused_decode.paged_decode_numba`
has checked and laid out (C-contiguous numpy arrays; q in fp32, tables and lengths in int64):
nothing here checks bounds. This module imports numba, so :mod:`.fused_decode` imports it only
when a kernel is first needed, and falls back to torch if that fails.

The program keeps the Triton kernel's shape: a loop over the request's blocks through its block
table and an online softmax (``m``, ``l``, ``acc``), every K/V row read where it lies in the cache.
What makes it fast on a CPU (each kept for a same-process A/B, ``benchmarks/RESULTS.md``, issue 39):

* the G query heads of a KV head go four at a time through its part of four K rows, two rows per loop
  (four dot products per load of a key, two per load of a query value: eight running sums, which fit in
  AVX2's 16 vector registers, where sixteen spilled to the stack; :func:`_scores`), and of four V rows
  (four accumulator rows per load of a value, one load and store of ``acc`` per four tokens);
* ``exp`` by a polynomial that LLVM vectorises (:func:`.softmax_step._exp_shifted`), not one libm call per score;
* no array views of the shared caches in the loops (a view's reference count is an atomic that
  every thread shares);
* in each pass over four rows, a request to memory for the same KV head's part of the rows ``ahead``
  tokens later (:func:`_rows_ahead`, into L2): the rows of the next block lie anywhere, and the CPU's
  own prefetcher cannot know where (:mod:`.prefetch`).

``nogil=True`` lets several Python threads run programs at once (:func:`.launch.on_threads`).
Fast math without ``nnan``/``ninf``: sums may be reordered (vectorised dot products), but NaN and
infinity keep their meaning. numba's disk cache ignores jit options, so every function here is
compiled with the same ones.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .prefetch import ask_for_head_part
from .softmax_step import _FASTMATH, _online_softmax


def _value(cache, block, slot, h, d, upcast):
    """``cache[block, slot, h, d]`` as fp32.

    numba compiles one of two versions by the type of ``upcast`` (:func:`_value_versions`). An
    fp32 cache (``upcast is None``) is read as it is. numba has no float16, so a 16-bit cache comes
    as its bit patterns, looked up in ``upcast``, the fp32 value of every one of the 65,536 patterns.
    """
    raise TypeError("_value runs only inside numba-compiled code")


@overload(_value, jit_options={"fastmath": _FASTMATH}, inline="always")
def _value_versions(cache, block, slot, h, d, upcast):
    """:func:`_value`'s version for the type of ``upcast``, chosen at compile time."""
    if isinstance(upcast, types.NoneType):
        return lambda cache, block, slot, h, d, upcast: cache[block, slot, h, d]
    return lambda cache, block, slot, h, d, upcast: upcast[cache[block, slot, h, d]]


def _block(cache, block, n, upcast, buf):
    """Physical ``block`` of a K or V cache as ``[S, H_kv, D]`` fp32, its first ``n`` rows valid (the
    program before issue 39 read whole blocks through it; ``benchmarks/kernel_pieces.py`` still rebuilds
    that program). An fp32 cache is read where it lies; a 16-bit one is upcast into ``buf``."""
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
def decode_request(b, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, ahead, out):
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
    ``ahead``: how many tokens ahead rows are asked for (:data:`.prefetch.PREFETCH_TOKENS`; 0: none).
    """
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    S = k_cache.shape[1]
    T = seq_lens[b]
    qs = q[b] * scale
    m = np.full(num_q_heads, -np.inf, dtype=np.float32)           # running max of scores
    l = np.zeros(num_q_heads, dtype=np.float32)                   # running sum of exp(score - m)
    acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)     # running sum of exp(..) * v
    p = np.empty((num_q_heads, step_blocks * S), dtype=np.float32)
    two_k = np.empty(step_blocks * S, dtype=np.int32)
    table = block_tables[b]
    num_blocks = (T + S - 1) // S
    for j0 in range(0, num_blocks, step_blocks):                  # a step: blocks j0 .. j1 - 1
        j1 = min(j0 + step_blocks, num_blocks)
        n = _scores(qs, k_cache, table, T, j0, j1, upcast, ahead, p)
        _online_softmax(p, n, m, l, acc, two_k)
        _add_values(p, v_cache, table, T, j0, j1, upcast, ahead, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit(cache=True, fastmath=_FASTMATH)
def _scores(qs, k_cache, table, T, j0, j1, upcast, ahead, p):
    """``p[:, t] = qs . k_t`` for the tokens ``t`` of blocks ``j0 .. j1 - 1``; returns their count (>= 1).

    Four tokens and four query heads per pass through a KV head's part of four K rows (passes of four
    rows were faster from memory than passes of two, ``benchmarks/RESULTS.md``), as two loops over two
    rows each: one load of each key value serves four dot products, one load of each query value two.
    Eight running sums stay in registers. One loop over all four rows needed sixteen, and on a CPU with
    16 vector registers (AVX2, Zen 3) LLVM kept six on the stack; that loop was 3-5% slower, and over 1.2x
    slower at six of the 256 offsets that the stack can take in its page, one drawn at random per process
    (``benchmarks/stack_offset.py``). With 32 registers (AVX-512) it did not spill; the two loops have not
    been timed there. Meanwhile the same part of the rows ``ahead`` tokens later is asked for
    (:func:`_rows_ahead`).
    """
    S, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = qs.shape[0] // num_kv_heads
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)                                     # slots past T are never read
        block = table[j]
        slot = 0
        while slot + 4 <= n:                                      # four tokens: slot .. slot + 3
            later = _rows_ahead(k_cache, table, T, j * S + slot + ahead, ahead)
            for h in range(num_kv_heads):
                ask_for_head_part(later, k_cache, h)
                g0 = h * group
                g = 0
                while g + 4 <= group:
                    # a0-a3: token slot + u, b0-b3: token slot + u + 1; 0-3: the four query heads
                    for u in range(0, 4, 2):
                        zero = np.float32(0.0)
                        a0, a1, a2, a3 = zero, zero, zero, zero
                        b0, b1, b2, b3 = zero, zero, zero, zero
                        for d in range(head_dim):
                            ka = _value(k_cache, block, slot + u, h, d, upcast)
                            kb = _value(k_cache, block, slot + u + 1, h, d, upcast)
                            q0, q1, q2, q3 = qs[g0 + g, d], qs[g0 + g + 1, d], qs[g0 + g + 2, d], qs[g0 + g + 3, d]
                            a0, a1, a2, a3 = a0 + q0 * ka, a1 + q1 * ka, a2 + q2 * ka, a3 + q3 * ka
                            b0, b1, b2, b3 = b0 + q0 * kb, b1 + q1 * kb, b2 + q2 * kb, b3 + q3 * kb
                        _put2(p, g0 + g, t + slot + u, a0, b0)
                        _put2(p, g0 + g + 1, t + slot + u, a1, b1)
                        _put2(p, g0 + g + 2, t + slot + u, a2, b2)
                        _put2(p, g0 + g + 3, t + slot + u, a3, b3)
                    g += 4
                while g < group:
                    for u in range(4):
                        s = np.float32(0.0)
                        for d in range(head_dim):
                            s += qs[g0 + g, d] * _value(k_cache, block, slot + u, h, d, upcast)
                        p[g0 + g, t + slot + u] = s
                    g += 1
            slot += 4
        while slot < n:                                           # a block's last 1-3 tokens, one at a time
            for h in range(num_kv_heads):
                g0 = h * group                                    # the G query heads of KV head h
                g = 0
                while g + 4 <= group:
                    s0 = np.float32(0.0)
                    s1 = np.float32(0.0)
                    s2 = np.float32(0.0)
                    s3 = np.float32(0.0)
                    for d in range(head_dim):
                        k = _value(k_cache, block, slot, h, d, upcast)
                        s0 += qs[g0 + g, d] * k
                        s1 += qs[g0 + g + 1, d] * k
                        s2 += qs[g0 + g + 2, d] * k
                        s3 += qs[g0 + g + 3, d] * k
                    p[g0 + g, t + slot] = s0
                    p[g0 + g + 1, t + slot] = s1
                    p[g0 + g + 2, t + slot] = s2
                    p[g0 + g + 3, t + slot] = s3
                    g += 4
                while g < group:
                    s = np.float32(0.0)
                    for d in range(head_dim):
                        s += qs[g0 + g, d] * _value(k_cache, block, slot, h, d, upcast)
                    p[g0 + g, t + slot] = s
                    g += 1
            slot += 1
        t += n
    return t


@njit(inline="always")
def _rows_ahead(cache, table, T, t, ahead):
    """The addresses of the rows of tokens ``t .. t + 3`` in ``cache``, found through ``table``: 0 for a token
    at or past ``T``, and for all four where ``ahead <= 0`` (no prefetching)."""
    return (_row(cache, table, T, t, ahead), _row(cache, table, T, t + 1, ahead),
            _row(cache, table, T, t + 2, ahead), _row(cache, table, T, t + 3, ahead))


@njit(inline="always")
def _row(cache, table, T, t, ahead):
    """The address of token ``t``'s row, ``cache[table[t // S], t % S]``; 0 where ``t >= T`` or ``ahead <= 0``."""
    if ahead <= 0 or t >= T:
        return 0
    S = cache.shape[1]
    return cache.ctypes.data + table[t // S] * cache.strides[0] + (t % S) * cache.strides[1]


@njit(fastmath=_FASTMATH, inline="always")
def _put2(p, row, col, x0, x1):
    """``p[row, col], p[row, col + 1] = x0, x1``: one query head's scores of two tokens."""
    p[row, col] = x0
    p[row, col + 1] = x1


@njit(cache=True, fastmath=_FASTMATH)
def _add_values(p, v_cache, table, T, j0, j1, upcast, ahead, acc):
    """``acc += p @ V`` over the tokens of blocks ``j0 .. j1 - 1``, each V row read in place.

    Tokens go four at a time (one load and store of ``acc`` for four; then two, then one, at a
    block's end) and query heads four at a time through each KV head's part of a V row (one load of
    each value for four accumulator rows); the same part of the rows ``ahead`` tokens later is asked for.
    """
    S, num_kv_heads, head_dim = v_cache.shape[1], v_cache.shape[2], v_cache.shape[3]
    group = acc.shape[0] // num_kv_heads
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)
        block = table[j]
        slot = 0
        while slot + 4 <= n:                                      # four tokens: slot .. slot + 3
            c = t + slot
            later = _rows_ahead(v_cache, table, T, j * S + slot + ahead, ahead)
            for h in range(num_kv_heads):
                ask_for_head_part(later, v_cache, h)
                g0 = h * group
                g = 0
                while g + 4 <= group:
                    a0, a1, a2, a3 = acc[g0 + g], acc[g0 + g + 1], acc[g0 + g + 2], acc[g0 + g + 3]
                    w0, w1, w2, w3 = p[g0 + g, c], p[g0 + g + 1, c], p[g0 + g + 2, c], p[g0 + g + 3, c]
                    x0, x1, x2, x3 = p[g0 + g, c + 1], p[g0 + g + 1, c + 1], p[g0 + g + 2, c + 1], p[g0 + g + 3, c + 1]
                    y0, y1, y2, y3 = p[g0 + g, c + 2], p[g0 + g + 1, c + 2], p[g0 + g + 2, c + 2], p[g0 + g + 3, c + 2]
                    z0, z1, z2, z3 = p[g0 + g, c + 3], p[g0 + g + 1, c + 3], p[g0 + g + 2, c + 3], p[g0 + g + 3, c + 3]
                    for d in range(head_dim):
                        va = _value(v_cache, block, slot, h, d, upcast)
                        vb = _value(v_cache, block, slot + 1, h, d, upcast)
                        vc = _value(v_cache, block, slot + 2, h, d, upcast)
                        vd = _value(v_cache, block, slot + 3, h, d, upcast)
                        a0[d] += w0 * va + x0 * vb + y0 * vc + z0 * vd
                        a1[d] += w1 * va + x1 * vb + y1 * vc + z1 * vd
                        a2[d] += w2 * va + x2 * vb + y2 * vc + z2 * vd
                        a3[d] += w3 * va + x3 * vb + y3 * vc + z3 * vd
                    g += 4
                while g < group:
                    w, x, y, z = p[g0 + g, c], p[g0 + g, c + 1], p[g0 + g, c + 2], p[g0 + g, c + 3]
                    for d in range(head_dim):
                        acc[g0 + g, d] += (w * _value(v_cache, block, slot, h, d, upcast)
                                           + x * _value(v_cache, block, slot + 1, h, d, upcast)
                                           + y * _value(v_cache, block, slot + 2, h, d, upcast)
                                           + z * _value(v_cache, block, slot + 3, h, d, upcast))
                    g += 1
            slot += 4
        if slot + 2 <= n:                                         # two tokens: slot and slot + 1
            for h in range(num_kv_heads):
                g0 = h * group
                g = 0
                while g + 4 <= group:
                    a0, a1, a2, a3 = acc[g0 + g], acc[g0 + g + 1], acc[g0 + g + 2], acc[g0 + g + 3]
                    w0, w1, w2, w3 = (p[g0 + g, t + slot], p[g0 + g + 1, t + slot], p[g0 + g + 2, t + slot],
                                      p[g0 + g + 3, t + slot])
                    x0, x1, x2, x3 = (p[g0 + g, t + slot + 1], p[g0 + g + 1, t + slot + 1],
                                      p[g0 + g + 2, t + slot + 1], p[g0 + g + 3, t + slot + 1])
                    for d in range(head_dim):
                        va = _value(v_cache, block, slot, h, d, upcast)
                        vb = _value(v_cache, block, slot + 1, h, d, upcast)
                        a0[d] += w0 * va + x0 * vb
                        a1[d] += w1 * va + x1 * vb
                        a2[d] += w2 * va + x2 * vb
                        a3[d] += w3 * va + x3 * vb
                    g += 4
                while g < group:
                    w, x = p[g0 + g, t + slot], p[g0 + g, t + slot + 1]
                    for d in range(head_dim):
                        acc[g0 + g, d] += (w * _value(v_cache, block, slot, h, d, upcast)
                                           + x * _value(v_cache, block, slot + 1, h, d, upcast))
                    g += 1
            slot += 2
        if slot < n:                                              # an odd block's last token
            for h in range(num_kv_heads):
                g0 = h * group
                g = 0
                while g + 4 <= group:
                    a0, a1, a2, a3 = acc[g0 + g], acc[g0 + g + 1], acc[g0 + g + 2], acc[g0 + g + 3]
                    w0, w1, w2, w3 = (p[g0 + g, t + slot], p[g0 + g + 1, t + slot], p[g0 + g + 2, t + slot],
                                      p[g0 + g + 3, t + slot])
                    for d in range(head_dim):
                        va = _value(v_cache, block, slot, h, d, upcast)
                        a0[d] += w0 * va
                        a1[d] += w1 * va
                        a2[d] += w2 * va
                        a3[d] += w3 * va
                    g += 4
                while g < group:
                    w = p[g0 + g, t + slot]
                    for d in range(head_dim):
                        acc[g0 + g, d] += w * _value(v_cache, block, slot, h, d, upcast)
                    g += 1
        t += n
