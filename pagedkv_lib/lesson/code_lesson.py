"""What the Code lesson (``notebooks/03_code.ipynb``) prints beside the library code it shows.

The lesson shows the library's own definitions with ``inspect.getsource``; this module holds no
second copy of them. :func:`online_softmax_states` gives the running max ``m``, denominator
``l`` and numerator ``acc`` of an online softmax after each block, computed from their
*definitions* rather than by the update rule, so that a learner can hold them against the
update rule in :func:`pagedkv_lib.attention.spec.paged_decode_online` (and the Triton and numba
kernels), and see ``acc / l`` equal the kernel's output. :func:`opening_lines` cuts a long kernel
loop to the lines where it finds its rows, for the lesson to show two such loops side by side.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

import torch

from ..validation import check_int

__all__ = ["online_softmax_states", "opening_lines"]


REMARK_COLUMNS = 96
"""The widest a line :func:`opening_lines` adds may be (characters): a little under what JupyterLab's code area
shows at 1280 pixels, about 100 (the kernels' excerpts in lesson 03 have source lines of up to 98, seen to fit);
a longer line scrolls sideways."""


def opening_lines(function, through: str, rest: str) -> str:
    """``function``'s source (a numba kernel's ``py_func`` or any Python function) without its docstring, from
    its ``def`` line through the first line that holds ``through``, then ``...`` and a comment saying what
    follows (``rest``; none when it is empty), wrapped between words at :data:`REMARK_COLUMNS`, or 20 columns
    past the indentation where that is deeper. Raises ValueError naming ``through`` when no line holds it."""
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    node = ast.parse("\n".join(lines)).body[0]
    first = node.body[1] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body[0]
    shown = lines[:node.body[0].lineno - 1]                     # decorators and the def line(s)
    shown = [line for line in shown if not line.lstrip().startswith("@")]
    for line in lines[first.lineno - 1:]:
        shown.append(line)
        if through in line:
            indent = line[:len(line) - len(line.lstrip())]
            remark = textwrap.wrap(rest, max(20, REMARK_COLUMNS - len(indent) - 2), break_long_words=False,
                                   break_on_hyphens=False)
            return "\n".join(shown + [f"{indent}..."] + [f"{indent}# {part}" for part in remark]) + "\n"
    raise ValueError(f"through={through!r}: no line of {function.__qualname__} holds it")


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
