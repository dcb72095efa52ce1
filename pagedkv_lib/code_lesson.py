"""Small helpers the Code lesson (``notebooks/03_code.ipynb``) needs and the library does not hold.

Everything the lesson *teaches* is library code it shows with ``inspect.getsource``; this module
only builds inputs and tabulates state, so that the notebook's cells stay a few lines long.

* :func:`page_batch_prompts`: token ids for the three requests A1-A3 (a 12-token prefix, tails
  3, 5 and 2), the batch :data:`pagedkv_lib.ledger.PAGE_BATCH` describes by counts only.
* :func:`online_softmax_states`: the running max ``m``, denominator ``l`` and numerator ``acc``
  of an online softmax after each block, computed from their definitions (not by the update
  rule), so that a lesson can print them beside the kernel that updates them.
"""
from __future__ import annotations

import torch

from .ledger import PAGE_BATCH, Request
from ._checks import check_int

__all__ = ["page_batch_prompts", "online_softmax_states"]

_PREFIX_FIRST_ID = 100  # prefix token ids 100, 101, ...; tails use ids below 100, so no tail
_TAIL_FIRST_ID = 1      # token can ever continue a prefix block by accident


def page_batch_prompts(requests: tuple[Request, ...] = PAGE_BATCH) -> dict[str, list[int]]:
    """Token ids per request: one prefix shared by all members, then distinct tail ids.

    ``{"A1": prefix + [1, 2, 3], "A2": prefix + [4, ..., 8], "A3": prefix + [9, 10]}`` for the
    default batch, with ``prefix = [100, ..., 111]`` (12 tokens). Prefix lengths must agree.
    """
    prefixes = {r.prefix for r in requests}
    if len(prefixes) != 1:
        raise ValueError(f"requests must share one prefix length, got prefix lengths {sorted(prefixes)}")
    prefix = list(range(_PREFIX_FIRST_ID, _PREFIX_FIRST_ID + prefixes.pop()))
    prompts, next_id = {}, _TAIL_FIRST_ID
    for r in requests:
        prompts[r.id] = prefix + list(range(next_id, next_id + r.tail))
        next_id += r.tail
    if next_id > _PREFIX_FIRST_ID:
        raise ValueError(f"tails hold {next_id - 1} tokens in all; at most {_PREFIX_FIRST_ID - 1} fit "
                         "below the prefix ids")
    return prompts


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
