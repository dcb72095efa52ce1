"""The compiled half of :mod:`.contiguous_decode`: the fused decode program reading a contiguous cache.

It is :func:`.numba_kernel.decode_request` with one change: where that program finds token ``t``
through the block table (row ``t % S`` of block ``table[t // S]``), this one finds it at row
``starts[b] + t`` of one packed ``[sum(T), H_kv, D]`` array, request after request. Same steps of
``step_tokens`` tokens, same online softmax (:func:`.softmax_step._online_softmax` itself), same
passes (four tokens and four query heads per pass over K rows, two rows per loop, and over V rows), the same
requests for rows ``ahead`` tokens later (:mod:`.prefetch`), same fp32 maths: timing the two side by side on
the same bytes shows what the table's indirection costs alone.

fp32 only, no bounds checks: :func:`.contiguous_decode.contiguous_decode_numba` checks first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .numba_kernel import _put2
from .prefetch import ask_for_head_part
from .softmax_step import _FASTMATH, _online_softmax


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def decode_request_contiguous(b, q, keys, values, starts, seq_lens, scale, step_tokens, ahead, out):
    """One program: request ``b``'s output ``out[b]`` from its rows ``starts[b] .. starts[b] + T - 1``.

    ``q [B, H_q, D]`` fp32; ``keys``, ``values [sum(T), H_kv, D]`` fp32, each request's tokens in
    order and side by side; ``out [B, H_q, D]`` fp32, written once; ``ahead`` as in
    :func:`.numba_kernel.decode_request`.
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
        _scores_rows(qs, keys, first, T, t0, t1, ahead, p)
        _online_softmax(p, t1 - t0, m, l, acc, two_k)
        _add_value_rows(p, values, first, T, t0, t1, ahead, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit(inline="always")
def _rows_ahead(rows, first, T, t, ahead):
    """The addresses of rows ``first + t .. first + t + 3`` of ``rows [N, H_kv, D]``: 0 for a token at or past
    ``T``, and for all four where ``ahead <= 0`` (:func:`.numba_kernel._rows_ahead`, without a table)."""
    return (_row(rows, first, T, t, ahead), _row(rows, first, T, t + 1, ahead),
            _row(rows, first, T, t + 2, ahead), _row(rows, first, T, t + 3, ahead))


@njit(inline="always")
def _row(rows, first, T, t, ahead):
    """The address of ``rows[first + t]``; 0 where ``t >= T`` or ``ahead <= 0``."""
    return 0 if ahead <= 0 or t >= T else rows.ctypes.data + (first + t) * rows.strides[0]


@njit(cache=True, fastmath=_FASTMATH)
def _scores_rows(qs, keys, first, T, t0, t1, ahead, p):
    """``p[:, t - t0] = qs . k_t`` for tokens ``t0 .. t1 - 1`` of ``T``: four tokens and four query heads per pass,
    two tokens per loop (as :func:`.numba_kernel._scores`)."""
    num_kv_heads, head_dim = keys.shape[1], keys.shape[2]
    group = qs.shape[0] // num_kv_heads
    t = t0
    while t + 4 <= t1:                                            # four tokens: t .. t + 3
        r, i = first + t, t - t0
        later = _rows_ahead(keys, first, T, t + ahead, ahead)
        for h in range(num_kv_heads):
            ask_for_head_part(later, keys, h)
            g0 = h * group                                        # the G query heads of KV head h
            g = 0
            while g + 4 <= group:
                # a0-a3: token t + u, b0-b3: token t + u + 1; 0-3: the four query heads
                for u in range(0, 4, 2):
                    zero = np.float32(0.0)
                    a0, a1, a2, a3 = zero, zero, zero, zero
                    b0, b1, b2, b3 = zero, zero, zero, zero
                    for d in range(head_dim):
                        ka = keys[r + u, h, d]
                        kb = keys[r + u + 1, h, d]
                        q0, q1, q2, q3 = qs[g0 + g, d], qs[g0 + g + 1, d], qs[g0 + g + 2, d], qs[g0 + g + 3, d]
                        a0, a1, a2, a3 = a0 + q0 * ka, a1 + q1 * ka, a2 + q2 * ka, a3 + q3 * ka
                        b0, b1, b2, b3 = b0 + q0 * kb, b1 + q1 * kb, b2 + q2 * kb, b3 + q3 * kb
                    _put2(p, g0 + g, i + u, a0, b0)
                    _put2(p, g0 + g + 1, i + u, a1, b1)
                    _put2(p, g0 + g + 2, i + u, a2, b2)
                    _put2(p, g0 + g + 3, i + u, a3, b3)
                g += 4
            while g < group:
                for u in range(4):
                    s = np.float32(0.0)
                    for d in range(head_dim):
                        s += qs[g0 + g, d] * keys[r + u, h, d]
                    p[g0 + g, i + u] = s
                g += 1
        t += 4
    while t < t1:                                                 # a step's last 1-3 tokens, one at a time
        r, i = first + t, t - t0
        for h in range(num_kv_heads):
            g0 = h * group
            g = 0
            while g + 4 <= group:
                s0 = np.float32(0.0)
                s1 = np.float32(0.0)
                s2 = np.float32(0.0)
                s3 = np.float32(0.0)
                for d in range(head_dim):
                    k = keys[r, h, d]
                    s0 += qs[g0 + g, d] * k
                    s1 += qs[g0 + g + 1, d] * k
                    s2 += qs[g0 + g + 2, d] * k
                    s3 += qs[g0 + g + 3, d] * k
                p[g0 + g, i] = s0
                p[g0 + g + 1, i] = s1
                p[g0 + g + 2, i] = s2
                p[g0 + g + 3, i] = s3
                g += 4
            while g < group:
                s = np.float32(0.0)
                for d in range(head_dim):
                    s += qs[g0 + g, d] * keys[r, h, d]
                p[g0 + g, i] = s
                g += 1
        t += 1


@njit(cache=True, fastmath=_FASTMATH)
def _add_value_rows(p, values, first, T, t0, t1, ahead, acc):
    """``acc += p @ V`` over tokens ``t0 .. t1 - 1`` of ``T``: four tokens (then two, then one) and four query heads
    per pass."""
    num_kv_heads, head_dim = values.shape[1], values.shape[2]
    group = acc.shape[0] // num_kv_heads
    t = t0
    while t < t1:
        width = 4 if t + 4 <= t1 else (2 if t + 2 <= t1 else 1)
        ra, c = first + t, t - t0
        rb, rc, rd = ra + min(1, width - 1), ra + min(2, width - 1), ra + min(3, width - 1)
        later = _rows_ahead(values, first, T, t + ahead, ahead if width == 4 else 0)
        for h in range(num_kv_heads):
            ask_for_head_part(later, values, h)
            g0 = h * group
            g = 0
            while g + 4 <= group:
                a0, a1, a2, a3 = acc[g0 + g], acc[g0 + g + 1], acc[g0 + g + 2], acc[g0 + g + 3]
                w0, w1, w2, w3 = p[g0 + g, c], p[g0 + g + 1, c], p[g0 + g + 2, c], p[g0 + g + 3, c]
                if width == 4:
                    x0, x1, x2, x3 = p[g0 + g, c + 1], p[g0 + g + 1, c + 1], p[g0 + g + 2, c + 1], p[g0 + g + 3, c + 1]
                    y0, y1, y2, y3 = p[g0 + g, c + 2], p[g0 + g + 1, c + 2], p[g0 + g + 2, c + 2], p[g0 + g + 3, c + 2]
                    z0, z1, z2, z3 = p[g0 + g, c + 3], p[g0 + g + 1, c + 3], p[g0 + g + 2, c + 3], p[g0 + g + 3, c + 3]
                    for d in range(head_dim):
                        va, vb, vc, vd = values[ra, h, d], values[rb, h, d], values[rc, h, d], values[rd, h, d]
                        a0[d] += w0 * va + x0 * vb + y0 * vc + z0 * vd
                        a1[d] += w1 * va + x1 * vb + y1 * vc + z1 * vd
                        a2[d] += w2 * va + x2 * vb + y2 * vc + z2 * vd
                        a3[d] += w3 * va + x3 * vb + y3 * vc + z3 * vd
                elif width == 2:
                    x0, x1, x2, x3 = p[g0 + g, c + 1], p[g0 + g + 1, c + 1], p[g0 + g + 2, c + 1], p[g0 + g + 3, c + 1]
                    for d in range(head_dim):
                        va, vb = values[ra, h, d], values[rb, h, d]
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
                g += 4
            while g < group:
                w = p[g0 + g, c]
                if width == 4:
                    x, y, z = p[g0 + g, c + 1], p[g0 + g, c + 2], p[g0 + g, c + 3]
                    for d in range(head_dim):
                        acc[g0 + g, d] += (w * values[ra, h, d] + x * values[rb, h, d]
                                           + y * values[rc, h, d] + z * values[rd, h, d])
                elif width == 2:
                    x = p[g0 + g, c + 1]
                    for d in range(head_dim):
                        acc[g0 + g, d] += w * values[ra, h, d] + x * values[rb, h, d]
                else:
                    for d in range(head_dim):
                        acc[g0 + g, d] += w * values[ra, h, d]
                g += 1
        t += width
