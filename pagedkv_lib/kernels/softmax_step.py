"""The online-softmax step shared by the fused CPU kernels (:mod:`.numba_kernel` and its contiguous twin,
:mod:`.contiguous_kernel`): fold a step's scores into the running max ``m``, sum ``l`` and numerator ``acc``.

Compiled by numba with the fast-math flags every function of these kernels uses (:data:`_FASTMATH`: numba's
disk cache ignores jit options, so they must agree): sums may be reordered, but NaN and infinity keep their
meaning (no ``nnan``/``ninf``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

_FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}


@njit(fastmath=_FASTMATH, inline="always")
def _exp_shifted(x, n, shift, two_k):
    """``x[:n] = exp(x[:n] - shift)`` (``x <= shift``), vectorised; returns their sum.

    ``e**y = 2**k * e**r`` with ``k = round(y / ln 2)``, ``|r| <= ln(2) / 2``, ``e**r`` by its Taylor
    series to ``r**7`` (relative error under 1e-8, below fp32's rounding) and ``2**k`` built from its
    fp32 bits in ``two_k``. ``y`` is held above -87, where fp32 still has ``2**k``; NaN stays NaN.
    """
    for t in range(n):
        y = x[t] - shift
        y = np.float32(-87.0) if y < np.float32(-87.0) else y
        k = np.floor(y * np.float32(1.442695) + np.float32(0.5))
        r = y - k * np.float32(0.6931472)
        x[t] = np.float32(1.0) + r * (np.float32(1.0) + r * (np.float32(1 / 2) + r * (np.float32(1 / 6) + r * (
            np.float32(1 / 24) + r * (np.float32(1 / 120) + r * (np.float32(1 / 720) + r * np.float32(1 / 5040)))))))
        two_k[t] = (np.int32(k) + np.int32(127)) << np.int32(23)      # the fp32 bits of 2**k
    total = np.float32(0.0)
    powers = two_k.view(np.float32)
    for t in range(n):
        x[t] *= powers[t]
        total += x[t]
    return total


@njit(cache=True, fastmath=_FASTMATH)
def _online_softmax(p, n, m, l, acc, two_k):
    """Fold ``n`` new scores per query head into ``m`` and ``l``, rescale ``acc``; scores become weights."""
    for hq in range(p.shape[0]):
        m_new = m[hq]
        for t in range(n):
            m_new = max(m_new, p[hq, t])
        alpha = np.exp(m[hq] - m_new)                             # 0 on the first step, where m = -inf
        l[hq] = l[hq] * alpha + _exp_shifted(p[hq], n, m_new, two_k)
        m[hq] = m_new
        for d in range(acc.shape[1]):
            acc[hq, d] *= alpha
