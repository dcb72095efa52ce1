"""What a preemption costs: swap the KV cache to host memory and back, or recompute it.

The PagedAttention paper (section 4.5) offers both when GPU blocks run out. For a request
holding ``T`` tokens of KV cache:

* **swap** moves ``B(T)`` bytes out over the host link and later back in:
  ``swap_seconds = 2 * B(T) / link_bytes_per_s``, with ``B(T) = T * C_tok`` for a full-attention
  model (:func:`~pagedkv_lib.accounting.hybrid_kv_bytes` for a hybrid one);
* **recompute** drops the blocks and prefills the ``T`` tokens again: ``2 * P`` FLOPs per token
  for the weights plus causal attention, ``2 * L * H_q * d_head * T**2`` FLOPs in all (the
  ``QK^T`` and ``AV`` products over the lower triangle), at ``flops_per_s`` effective FLOP/s;
  or, given a measured ``prefill_tokens_per_s``, ``T / prefill_tokens_per_s`` plus the attention term.

Both grow with ``T``, but recompute's attention term grows as ``T**2``, so when recompute is
cheaper per token (a slow link, a model with a large ``C_tok``) it wins below a crossover length
and swap wins above it (:func:`crossover_tokens`). The model is deliberately simple: transfers
and compute do not overlap, and a swap pays full price both ways.

The constants below each name their source in their own docstring: the host links
(:data:`PCIE4_X16_BYTES_PER_S`, :data:`PCIE5_X16_BYTES_PER_S`, one direction), the GPU
(:data:`H100_SXM_BF16_DENSE_FLOPS`, :data:`H100_SXM_HBM_BYTES_PER_S`), and :data:`DEFAULT_MFU`, which is an
assumption, not a published figure.
"""
from __future__ import annotations

from ..accounting import ModelSpec, get_model, hybrid_kv_bytes
from ..validation import check_int, check_number

PCIE4_X16_BYTES_PER_S = 31.5e9
"""PCIe 4.0 x16, one direction: 16 GT/s per lane x 16 lanes x 128b/130b encoding / 8 bits (PCI-SIG
specification figure; about 32 GB/s)."""

PCIE5_X16_BYTES_PER_S = 64e9
"""PCIe 5.0 x16, one direction: NVIDIA's H100 and H200 datasheets list "PCIe Gen5: 128GB/s" for both
directions together, so 64 GB/s each way."""

H100_SXM_BF16_DENSE_FLOPS = 989e12
"""NVIDIA H100 SXM datasheet: 1,979 TFLOPS BF16 Tensor Core *with sparsity*, so about 989 TFLOPS dense."""

H100_SXM_HBM_BYTES_PER_S = 3.35e12
"""NVIDIA H100 SXM datasheet: 3.35 TB/s of HBM3 bandwidth (a decode step reads every weight once)."""

DEFAULT_MFU = 0.5
"""Model FLOPs utilization assumed for prefill: our assumption, not a measured figure (a parameter)."""

DEFAULT_FLOPS_PER_S = H100_SXM_BF16_DENSE_FLOPS * DEFAULT_MFU
"""Effective prefill FLOP/s by default: an H100's dense BF16 peak at :data:`DEFAULT_MFU`."""

MAX_CROSSOVER_TOKENS = 1 << 24
"""How far :func:`crossover_tokens` searches by default (tokens); it returns this when recompute still wins there."""


def swap_seconds(num_tokens: int, model: str | ModelSpec = "OPT-13B", *,
                 link_bytes_per_s: float = PCIE4_X16_BYTES_PER_S) -> float:
    """Seconds to move a request's KV cache (``num_tokens`` tokens) to host memory and back."""
    T = check_int("num_tokens", num_tokens, minimum=0)
    link = check_number("link_bytes_per_s", link_bytes_per_s, low=0.0, high=float("inf"), low_open=True,
                        high_open=True)
    return 2 * hybrid_kv_bytes(model, T) / link


def recompute_seconds(num_tokens: int, model: str | ModelSpec = "OPT-13B", *,
                      flops_per_s: float = DEFAULT_FLOPS_PER_S, prefill_tokens_per_s: float | None = None) -> float:
    """Seconds to prefill ``num_tokens`` tokens again: weights (linear) plus causal attention (quadratic).

    The weights' part is ``2 * P * T / flops_per_s``, or ``T / prefill_tokens_per_s`` if that is
    given (a throughput measured on short prompts); attention adds ``2 * L * H_q * d * T**2 / flops_per_s``.
    """
    spec = get_model(model)
    T = check_int("num_tokens", num_tokens, minimum=0)
    flops = check_number("flops_per_s", flops_per_s, low=0.0, high=float("inf"), low_open=True, high_open=True)
    return weights_seconds_per_token(spec, prefill_tokens_per_s, flops) * T + _attention_s(spec, flops) * T * T


def crossover_tokens(model: str | ModelSpec = "OPT-13B", *, link_bytes_per_s: float = PCIE4_X16_BYTES_PER_S,
                     flops_per_s: float = DEFAULT_FLOPS_PER_S, prefill_tokens_per_s: float | None = None,
                     max_tokens: int = MAX_CROSSOVER_TOKENS) -> int:
    """The fewest tokens at which swapping is cheaper than recomputing (0: swap always wins).

    Recompute wins for every shorter request. Found by bisection, since a hybrid model's swap
    bytes are not linear in ``T``; returns ``max_tokens`` if recompute still wins there.
    """
    def swap_wins(T: int) -> bool:
        return swap_seconds(T, model, link_bytes_per_s=link_bytes_per_s) < recompute_seconds(
            T, model, flops_per_s=flops_per_s, prefill_tokens_per_s=prefill_tokens_per_s)

    hi = check_int("max_tokens", max_tokens, minimum=1)
    if swap_wins(1):
        return 0
    if not swap_wins(hi):
        return hi
    lo = 1  # recompute wins at lo, swap at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if swap_wins(mid) else (mid, hi)
    return hi


def cheaper_preemption(num_tokens: int, model: str | ModelSpec = "OPT-13B", **costs) -> str:
    """``"swap"`` or ``"recompute"``, whichever costs fewer seconds for a request of ``num_tokens`` tokens
    (ties go to recompute, which needs no host memory). ``costs``: ``link_bytes_per_s``, ``flops_per_s``,
    ``prefill_tokens_per_s``."""
    link = {k: v for k, v in costs.items() if k == "link_bytes_per_s"}
    compute = {k: v for k, v in costs.items() if k != "link_bytes_per_s"}
    swap = swap_seconds(num_tokens, model, **link)
    return "swap" if swap < recompute_seconds(num_tokens, model, **compute) else "recompute"


def weights_seconds_per_token(spec: ModelSpec, prefill_tokens_per_s: float | None, flops: float) -> float:
    """Seconds per token for the weights' part of a prefill."""
    if prefill_tokens_per_s is not None:
        return 1.0 / check_number("prefill_tokens_per_s", prefill_tokens_per_s, low=0.0, high=float("inf"),
                                  low_open=True, high_open=True)
    if spec.num_params is None:
        raise ValueError(f"model {spec.name!r} has no num_params: pass prefill_tokens_per_s")
    return 2.0 * spec.num_params / flops


def _attention_s(spec: ModelSpec, flops: float) -> float:
    """Seconds per ``T**2`` of causal attention in a prefill: ``2 * L * H_q * d_head / flops``."""
    heads = spec.num_query_heads or spec.num_kv_heads
    return 2.0 * spec.num_layers * heads * spec.head_dim / flops
