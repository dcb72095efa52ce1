"""What the Code lesson (``notebooks/03_code.ipynb``) prints beside the library code it shows.

The lesson shows the library's own definitions with ``inspect.getsource``; this module holds no
second copy of them. :func:`online_softmax_states` gives the running max ``m``, denominator
``l`` and numerator ``acc`` of an online softmax after each block, computed from their
*definitions* rather than by the update rule, so that a learner can hold them against the
update rule in :func:`pagedkv_lib.attention.spec.paged_decode_online` (and the Triton and numba
kernels), and see ``acc / l`` equal the kernel's output.
"""
from __future__ import annotations

import torch

from ..validation import check_int

__all__ = ["online_softmax_states"]


def online_softmax_states(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int,
                          scale: float) -> list[dict]:
    """``m``, ``l`` and ``acc`` after each block of one query head over one KV head.

    ``q [D]``, ``k`` and ``v [T, D]`` (one head's logical keys and values), scores
    ``s_t = scale * q . k_t``. After the tokens of blocks ``0..j`` (``n = min(T, (j+1) S)``):
    ``m = max_t s_t``, ``l = sum_t exp(s_t - m)``, ``acc = sum_t exp(s_t - m) v_t`` over
    ``t < n``, so ``acc / l`` is attention over those ``n`` tokens. Returns one dict per block
    with keys ``block``, ``tokens`` (n), ``m`` (float), ``l`` (float) and ``acc`` (fp32 ``[D]``).
    """
    S = check_int("block_size", block_size, minimum=1)
    if q.dim() != 1 or k.dim() != 2 or k.shape != v.shape or k.shape[1] != q.shape[0]:
        raise ValueError(f"need q [D] and k, v [T, D] with the same D, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    scores = scale * (k.float() @ q.float())                          # [T]
    states = []
    for block, first in enumerate(range(0, k.shape[0], S)):
        n = min(k.shape[0], first + S)
        m = scores[:n].max()
        weights = torch.exp(scores[:n] - m)                           # [n], each in (0, 1]
        states.append({"block": block, "tokens": n, "m": float(m), "l": float(weights.sum()),
                       "acc": weights @ v[:n].float()})
    return states
