"""KV-cache byte and block accounting: the course's Eq. 1 and 2 and what follows from them.

Symbols match the notebooks:

* ``C_tok`` bytes of K and V one token occupies across all layers (Eq. 1),
  ``C_tok = 2 * L * H_kv * d_head * b``;
* ``B_logical = sum_i T_i * C_tok`` bytes for a batch of token counts ``T_i`` (Eq. 2);
* ``N_i = ceil(T_i / S)`` blocks for a request of ``T_i`` tokens at block size ``S`` tokens;
* ``R = S * sum_i N_i`` reserved token slots, and ``W = R - sum_i T_i`` tail slack (slots).

Model presets come from the models' published ``config.json`` files (layers, KV heads,
head dimension, context length); parameter counts are the published totals, used only to
estimate weight bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from .validation import check_choice, check_int, check_ints, check_number

GiB = 1024**3
"""Bytes in a gibibyte. GPU "80 GB" cards hold 80 GiB of HBM."""

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per scalar ``b`` for each dtype name the library accepts."""

_DTYPE_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                  "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def dtype_bytes(dtype: str, name: str = "dtype") -> int:
    """Bytes per scalar for a dtype name such as ``"fp16"`` (aliases like ``"bfloat16"`` work)."""
    if not isinstance(dtype, str):
        raise TypeError(f"{name} must be a dtype name, one of {', '.join(DTYPE_BYTES)}; got {dtype!r}")
    dtype = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    return DTYPE_BYTES[check_choice(name, dtype, DTYPE_BYTES)]


@dataclass(frozen=True)
class ModelSpec:
    """The shape facts of a decoder that decide its KV-cache size.

    ``num_layers`` (L), ``num_kv_heads`` (H_kv) and ``head_dim`` (d_head) set Eq. 1;
    ``dtype`` sets b. ``num_query_heads`` is kept to show what grouped-query attention saves.
    For multi-head latent attention (MLA, DeepSeek-V2/V3) set ``kv_lora_rank`` and
    ``rope_head_dim``: such a model caches one compressed latent of
    ``kv_lora_rank + rope_head_dim`` scalars per layer and token instead of separate K and V.
    ``num_params`` (count) and ``weight_dtype`` estimate weight bytes (the cache ``dtype`` does
    not change the weights); ``max_context`` is in tokens. Integer fields are stored as Python
    ints, so numpy integers cannot overflow in the byte counts.
    """

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "fp16"
    num_query_heads: int | None = None
    num_params: float | None = None
    max_context: int | None = None
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None
    weight_dtype: str = "fp16"

    def __post_init__(self):
        def store_int(field: str, minimum: int, optional: bool = False) -> None:
            value = getattr(self, field)
            if not (optional and value is None):
                object.__setattr__(self, field, check_int(field, value, minimum=minimum))

        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        store_int("num_layers", 1)
        store_int("num_kv_heads", 1)
        store_int("head_dim", 1)
        dtype_bytes(self.dtype)
        dtype_bytes(self.weight_dtype, "weight_dtype")
        store_int("num_query_heads", 1, optional=True)
        if self.num_query_heads is not None and self.num_query_heads % self.num_kv_heads:
            raise ValueError(f"num_query_heads must be a multiple of num_kv_heads={self.num_kv_heads}, "
                             f"got {self.num_query_heads}")
        if self.num_params is not None:
            check_number("num_params", self.num_params, low=0.0, high=float("inf"), low_open=True, high_open=True)
        store_int("max_context", 1, optional=True)
        if (self.kv_lora_rank is None) != (self.rope_head_dim is None):
            raise ValueError("an MLA model needs both kv_lora_rank and rope_head_dim (or neither), "
                             f"got kv_lora_rank={self.kv_lora_rank}, rope_head_dim={self.rope_head_dim}")
        store_int("kv_lora_rank", 1, optional=True)
        store_int("rope_head_dim", 0, optional=True)

    @property
    def is_mla(self) -> bool:
        """True when the cache holds a compressed latent (MLA) rather than K and V per head."""
        return self.kv_lora_rank is not None

    @property
    def bytes_per_scalar(self) -> int:
        """``b`` in Eq. 1."""
        return dtype_bytes(self.dtype)

    @property
    def weight_bytes(self) -> int | None:
        """Estimated bytes of the weights (``num_params`` times bytes of ``weight_dtype``), if known."""
        return None if self.num_params is None else int(self.num_params * dtype_bytes(self.weight_dtype))

    def with_dtype(self, dtype: str) -> "ModelSpec":
        """The same model with a different KV-cache dtype (for example ``"fp8"``); weights unchanged."""
        return replace(self, dtype=dtype)


def _spec(name, L, H_kv, d, H_q, params, ctx, **mla) -> ModelSpec:
    # DeepSeek-V3 publishes bf16 activations/cache and fp8 weights; the others fp16 throughout.
    if mla:
        return ModelSpec(name, L, H_kv, d, "bf16", H_q, params, ctx, weight_dtype="fp8", **mla)
    return ModelSpec(name, L, H_kv, d, "fp16", H_q, params, ctx)


MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    # name            L   H_kv  d   H_q  params   context
    _spec("OPT-13B", 40, 40, 128, 40, 12.85e9, 2048),
    _spec("Llama-2-7B", 32, 32, 128, 32, 6.74e9, 4096),
    _spec("Llama-2-13B", 40, 40, 128, 40, 13.0e9, 4096),
    _spec("Llama-3-8B", 32, 8, 128, 32, 8.03e9, 8192),
    _spec("Llama-3-70B", 80, 8, 128, 64, 70.6e9, 8192),
    _spec("Mistral-7B", 32, 8, 128, 32, 7.24e9, 32768),
    _spec("Qwen2.5-7B", 28, 4, 128, 28, 7.62e9, 32768),
    # MLA: one latent of kv_lora_rank + rope_head_dim scalars per layer and token.
    _spec("DeepSeek-V3", 61, 1, 576, 128, 671e9, 163840, kv_lora_rank=512, rope_head_dim=64),
]}
"""Presets from the models' published configs. ``get_model`` looks them up by name."""


def get_model(name: str | ModelSpec, dtype: str | None = None) -> ModelSpec:
    """A preset by name (case-insensitive), optionally with another cache ``dtype``.

    A ``ModelSpec`` passes through, so every function taking a model accepts either.
    """
    if isinstance(name, ModelSpec):
        spec = name
    else:
        by_lower = {k.lower(): v for k, v in MODELS.items()}
        if not isinstance(name, str):
            raise TypeError(f"model must be a ModelSpec or a preset name ({', '.join(MODELS)}); got {name!r}")
        if name.lower() not in by_lower:
            raise ValueError(f"model must be a ModelSpec or one of {', '.join(MODELS)}; got {name!r}")
        spec = by_lower[name.lower()]
    return spec if dtype is None else spec.with_dtype(dtype)


def bytes_per_token(model: str | ModelSpec, dtype: str | None = None) -> int:
    """Eq. 1: ``C_tok``, the bytes of KV cache one token occupies across all layers.

    ``2 * L * H_kv * d_head * b`` for multi-head and grouped-query attention (the 2 is K and V);
    ``L * (kv_lora_rank + rope_head_dim) * b`` for an MLA model, which caches no separate K and V.
    """
    spec = get_model(model, dtype)
    b = spec.bytes_per_scalar
    if spec.is_mla:
        return spec.num_layers * (spec.kv_lora_rank + spec.rope_head_dim) * b
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * b


def _token_counts(name: str, lengths: Iterable[int]) -> list[int]:
    return check_ints(name, lengths, minimum=0, what="token counts")


def logical_bytes(lengths: Sequence[int], model: str | ModelSpec, dtype: str | None = None) -> int:
    """Eq. 2: ``B_logical = sum_i T_i * C_tok`` for a batch with ``T_i`` tokens per request."""
    return sum(_token_counts("lengths", lengths)) * bytes_per_token(model, dtype)


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """``N_i = ceil(T_i / S)``: blocks for one request of ``num_tokens`` tokens (0 tokens, 0 blocks)."""
    if not (type(num_tokens) is int and type(block_size) is int and num_tokens >= 0 and block_size >= 1):
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)  # converts, or raises naming the argument
        block_size = check_int("block_size", block_size, minimum=1)
    return -(-num_tokens // block_size)


def reserved_slots(lengths: Sequence[int], block_size: int) -> int:
    """``R = S * sum_i N_i``: token slots the allocator reserves for a batch, with no sharing."""
    S = check_int("block_size", block_size, minimum=1)
    return S * sum(blocks_needed(T, S) for T in _token_counts("lengths", lengths))


def tail_slack(lengths: Sequence[int], block_size: int) -> int:
    """``W = R - sum_i T_i``: reserved slots holding no token (each request's last-block tail)."""
    return reserved_slots(lengths, block_size) - sum(_token_counts("lengths", lengths))


def expected_slack_per_request(block_size: int) -> float:
    """Mean tail slack per request, ``(S - 1) / 2`` slots, when ``T mod S`` is uniform on 0..S-1.

    That holds approximately whenever request lengths spread over many blocks.
    """
    S = check_int("block_size", block_size, minimum=1)
    return (S - 1) / 2


@dataclass(frozen=True)
class KVCapacity:
    """How much KV cache fits on a GPU: bytes left for the cache, and that budget in tokens and blocks."""

    kv_bytes: int
    bytes_per_token: int
    block_size: int
    tokens: int
    blocks: int

    @property
    def block_bytes(self) -> int:
        """Bytes of one physical block (``S * C_tok``)."""
        return self.block_size * self.bytes_per_token


def kv_capacity(model: str | ModelSpec, gpu_memory_bytes: int, *, weight_bytes: int | None = None,
                other_bytes: int = 0, utilization: float = 0.9, block_size: int = 16,
                dtype: str | None = None) -> KVCapacity:
    """The KV cache a GPU can hold after the weights, in bytes, tokens and whole blocks.

    ``kv_bytes = utilization * gpu_memory_bytes - weight_bytes - other_bytes``, the way vLLM
    sizes its cache (``other_bytes`` stands for activations and workspace). ``weight_bytes``
    defaults to the preset's estimate (``num_params`` at ``weight_dtype``; the cache ``dtype`` does
    not change it). ``blocks = kv_bytes // (S * C_tok)`` and
    ``tokens = blocks * S``: a request longer than ``tokens`` cannot be served at all, which is
    the question behind serving errors such as "max seq len is larger than the KV cache".
    """
    spec = get_model(model, dtype)
    gpu = check_int("gpu_memory_bytes", gpu_memory_bytes, minimum=1)
    frac = check_number("utilization", utilization, low=0.0, high=1.0, low_open=True)
    S = check_int("block_size", block_size, minimum=1)
    other = check_int("other_bytes", other_bytes, minimum=0)
    if weight_bytes is None:
        if spec.weight_bytes is None:
            raise ValueError(f"weight_bytes is required: model {spec.name!r} has no num_params to estimate it")
        weight_bytes = spec.weight_bytes
    weights = check_int("weight_bytes", weight_bytes, minimum=0)
    budget = int(frac * gpu) - weights - other
    if budget <= 0:
        raise ValueError(f"no memory left for the KV cache: utilization*gpu_memory_bytes = {int(frac * gpu):,} "
                         f"bytes but weight_bytes + other_bytes = {weights + other:,} bytes")
    c_tok = bytes_per_token(spec)
    blocks = budget // (S * c_tok)
    return KVCapacity(kv_bytes=budget, bytes_per_token=c_tok, block_size=S, tokens=blocks * S, blocks=blocks)
