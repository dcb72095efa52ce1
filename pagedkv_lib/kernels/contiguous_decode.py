"""Decode attention over a contiguous cache by the fused kernel's twin: the control for paging's cost.

:func:`contiguous_decode_numba` runs :func:`.contiguous_kernel.decode_request_contiguous`, the
fused paged kernel's program with the block table taken out: every request's K and V lie in one
piece, request after request, in a packed ``[sum(T), H_kv, D]`` array (the layout of
FlashAttention's variable-length kernels). Given the same logical K/V, it reads the same bytes as
:func:`.fused_decode.paged_decode_numba`, on the same threads, with the same arithmetic; only the
way it finds each row differs. Where numba is missing or cannot compile it, one warning line says
why and torch's ``scaled_dot_product_attention`` computes the same result, one request at a time.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from ..attention.validation import check_float, check_scale, index_tensor
from .fused_decode import STEP_TOKENS
from .launch import as_array, compiled_or_why_not, on_threads

__all__ = ["contiguous_decode_numba", "contiguous_kernel_unavailable", "packed_kv"]


def contiguous_decode_numba(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, seq_lens, *,
                            scale: float | None = None) -> torch.Tensor:
    """Decode attention of ``q [B, H_q, D]`` over packed contiguous ``keys``, ``values [sum(T), H_kv, D]``.

    Request ``b``'s ``T_b = seq_lens[b]`` tokens are rows ``sum(T_<b) .. sum(T_<=b) - 1``, in
    order (:func:`packed_kv` builds them from a list). fp32, on the CPU. Returns ``[B, H_q, D]``
    fp32, equal to dense attention over each request's K/V to float rounding. Bad arguments raise
    TypeError/ValueError naming the argument and what is allowed.
    """
    lens = _check(q, keys, values, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    if contiguous_kernel_unavailable():
        return _sdpa_per_request(q, keys, values, lens, scale)
    return _launch(q, keys, values, lens, scale)


def packed_kv(per_request: list) -> torch.Tensor:
    """``[sum(T), H_kv, D]``: each request's ``[T_b, H_kv, D]`` K (or V), request after request."""
    return torch.cat([t.contiguous() for t in per_request])


def contiguous_kernel_unavailable() -> str | None:
    """None when the compiled contiguous kernel is ready; else the one line (warned once) that says why not."""
    return _ready()


@functools.cache
def _ready() -> str | None:
    """Compile (or load from numba's disk cache) by running it on a tiny batch; None, or why it failed."""
    gen = torch.Generator().manual_seed(0)
    q, kv = torch.randn(2, 2, 4, generator=gen), torch.randn(4, 1, 4, generator=gen)

    def run_tiny():
        from . import contiguous_kernel   # noqa: F401  (imports numba)
        _launch(q, kv, kv, torch.tensor([3, 1]), 0.5)
    return compiled_or_why_not("contiguous kernel", run_tiny,
                               "torch's scaled_dot_product_attention per request")


def _check(q, keys, values, seq_lens) -> torch.Tensor:
    """Checked arguments; returns ``seq_lens`` as int64. Each error names the argument and what is allowed."""
    layout = "[sum(seq_lens), H_kv, D]"
    check_float("q", q, 3, "[B, H_q, D]")
    check_float("keys", keys, 3, layout)
    check_float("values", values, 3, layout)
    for name, t in (("q", q), ("keys", keys), ("values", values)):
        if t.dtype != torch.float32:
            raise TypeError(f"contiguous_decode_numba reads fp32 only: {name} is {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"contiguous_decode_numba runs on the CPU, but {name} is on {t.device}")
    if keys.shape != values.shape:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must have the same shape")
    (h_q, d_q), (h_kv, d_kv) = q.shape[1:], keys.shape[1:]
    if d_q != d_kv or h_kv == 0 or h_q % h_kv:
        raise ValueError(f"q has shape {tuple(q.shape)} and keys {tuple(keys.shape)}: head dims must be "
                         f"equal and query heads a multiple of KV heads")
    lens = index_tensor("seq_lens", seq_lens, 1)
    if lens.shape[0] != q.shape[0]:
        raise ValueError(f"seq_lens has {lens.shape[0]} lengths but q has {q.shape[0]} requests")
    if lens.numel() and int(lens.min()) < 1:
        raise ValueError(f"seq_lens must all be >= 1 token, got {lens.tolist()}")
    if int(lens.sum()) != keys.shape[0]:
        raise ValueError(f"seq_lens sum to {int(lens.sum())} tokens but keys holds {keys.shape[0]} rows: "
                         "pack every request's tokens, request after request (packed_kv)")
    return lens


def _launch(q, keys, values, seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The kernel on checked arguments, every request's program on ``torch.get_num_threads()`` threads."""
    from .contiguous_kernel import decode_request_contiguous
    from .prefetch import PREFETCH_TOKENS
    out = np.empty(q.shape, dtype=np.float32)
    lens = as_array(seq_lens)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    args = (as_array(q), as_array(keys), as_array(values), starts, lens, np.float32(scale), STEP_TOKENS,
            PREFETCH_TOKENS, out)
    longest_first = np.argsort(-lens, kind="stable").tolist()
    on_threads(lambda b: decode_request_contiguous(b, *args), longest_first, torch.get_num_threads())
    return torch.from_numpy(out)


def _sdpa_per_request(q, keys, values, seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The torch fallback: ``scaled_dot_product_attention`` over each request's rows."""
    _, h_q, d = q.shape
    outs, start = [], 0
    for b, t in enumerate(seq_lens.tolist()):
        k, v = (x[start : start + t].transpose(0, 1)[None] for x in (keys, values))     # [1, H_kv, T, D]
        outs.append(F.scaled_dot_product_attention(q[b].view(1, h_q, 1, d), k, v, scale=scale, enable_gqa=True))
        start += t
    return torch.cat(outs).view(q.shape) if outs else q.new_empty(q.shape)
