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
    not change the weights); ``max_context`` is in tokens. A hybrid model (Gemma 3, gpt-oss)
    has ``num_sliding_layers`` of its ``num_layers`` attend only to the last ``sliding_window``
    tokens; the others are full attention (see :func:`hybrid_kv_bytes`). Integer fields are stored as Python
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
    sliding_window: int | None = None
    num_sliding_layers: int = 0

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
        store_int("num_sliding_layers", 0)
        store_int("sliding_window", 1, optional=True)
        if self.num_sliding_layers > self.num_layers:
            raise ValueError(f"num_sliding_layers must be at most num_layers={self.num_layers}, "
                             f"got {self.num_sliding_layers}")
        if (self.sliding_window is None) != (self.num_sliding_layers == 0):
            raise ValueError("a hybrid model needs both sliding_window and num_sliding_layers >= 1 (or neither), got "
                             f"sliding_window={self.sliding_window}, num_sliding_layers={self.num_sliding_layers}")

    @property
    def is_mla(self) -> bool:
        """True when the cache holds a compressed latent (MLA) rather than K and V per head."""
        return self.kv_lora_rank is not None

    @property
    def num_full_layers(self) -> int:
        """Layers with full attention (all of them unless the model is hybrid)."""
        return self.num_layers - self.num_sliding_layers

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

HYBRID_MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    # Sliding-window and full-attention layers, bf16 as published; each number's source in HYBRID_SOURCES.
    ModelSpec("Gemma-3-27B", 62, 16, 128, "bf16", 32, 27e9, 131072, weight_dtype="bf16",
              sliding_window=1024, num_sliding_layers=52),
    ModelSpec("gpt-oss-20b", 24, 8, 64, "bf16", 64, 20.9e9, 131072, weight_dtype="bf16",
              sliding_window=128, num_sliding_layers=12),
    ModelSpec("gpt-oss-120b", 36, 8, 64, "bf16", 64, 116.8e9, 131072, weight_dtype="bf16",
              sliding_window=128, num_sliding_layers=18),
]}
"""Hybrid presets (some layers attend to a sliding window only). ``get_model`` finds them too; ``MODELS``
keeps the full-attention models, whose ``bytes_per_token`` is the whole story."""


HYBRID_SOURCES = {
    # This machine cannot reach the Hugging Face Hub: the config.json fields were checked on 2026-12-03 against
    # public copies found through code search (model-inspector reports and model definitions that quote them).
    "Gemma-3-27B": "google/gemma-3-27b-it config.json (Hugging Face), text_config: num_hidden_layers 62, "
                   "num_key_value_heads 16, head_dim 128, num_attention_heads 32, sliding_window 1024, "
                   "sliding_window_pattern 6 (every 6th layer full: 10 full, 52 sliding), max_position_embeddings "
                   "131072; read 2026-12-03. 52 + 10 also in vLLM docs/design/hybrid_kv_cache_manager.md. "
                   "Parameters 27e9, as the name states (used only for weight bytes).",
    "gpt-oss-20b": "openai/gpt-oss-20b config.json (Hugging Face, last modified 2025-08-26): num_hidden_layers 24, "
                   "num_key_value_heads 8, head_dim 64, num_attention_heads 64, sliding_window 128, layer_types "
                   "alternating sliding_attention / full_attention (12 + 12), max_position_embeddings 131072; "
                   "read 2026-12-03. Parameters 20.9e9 (OpenAI's model card: 21B total). Expert weights ship in "
                   "MXFP4 (about 4.25 bits), so pass weight_bytes for deployment figures.",
    "gpt-oss-120b": "openai/gpt-oss-120b config.json (Hugging Face): num_hidden_layers 36, num_key_value_heads 8, "
                    "head_dim 64, num_attention_heads 64, sliding_window 128, alternating layer_types (18 + 18), "
                    "max_position_embeddings 131072; read 2026-12-03. Parameters 116.8e9 (model card: 117B). "
                    "Expert weights in MXFP4, as for gpt-oss-20b.",
}
"""Where each hybrid preset's numbers come from (HF ``config.json`` fields, by model repository, date read)."""


_PRESETS_BY_LOWER_NAME = {k.lower(): v for k, v in {**MODELS, **HYBRID_MODELS}.items()}
"""Every preset by its name in lower case, built once for :func:`get_model` (the presets never change)."""


def get_model(name: str | ModelSpec, dtype: str | None = None) -> ModelSpec:
    """A preset by name (case-insensitive), optionally with another cache ``dtype``.

    A ``ModelSpec`` passes through, so every function taking a model accepts either.
    """
    if isinstance(name, ModelSpec):
        spec = name
    elif isinstance(name, str) and name.lower() in _PRESETS_BY_LOWER_NAME:
        spec = _PRESETS_BY_LOWER_NAME[name.lower()]
    else:
        names = ", ".join([*MODELS, *HYBRID_MODELS])
        if not isinstance(name, str):
            raise TypeError(f"model must be a ModelSpec or a preset name ({names}); got {name!r}")
        raise ValueError(f"model must be a ModelSpec or one of {names}; got {name!r}")
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


# ---------------------------------------------------------------- hybrid models: sliding-window + full attention

def _layer_token_bytes(spec: ModelSpec) -> int:
    """Bytes one token occupies in one layer (K and V, or the MLA latent): ``C_tok / L``."""
    return bytes_per_token(spec) // spec.num_layers


def as_full_attention(model: str | ModelSpec) -> ModelSpec:
    """The same model with every layer full attention: the twin a hybrid model is compared with."""
    spec = get_model(model)
    return replace(spec, name=f"{spec.name} (all full attention)", sliding_window=None, num_sliding_layers=0)


def hybrid_kv_bytes(model: str | ModelSpec, num_tokens: int, dtype: str | None = None) -> int:
    """Bytes of KV cache one request of ``T`` tokens needs, with no block rounding.

    A full-attention layer keeps all ``T`` tokens; a sliding-window layer only the last
    ``min(T, W)``: ``(C_tok / L) * (L_full * T + L_sliding * min(T, W))``. For a model without
    sliding layers this is ``T * C_tok`` (Eq. 1 times ``T``).
    """
    spec = get_model(model, dtype)
    T = check_int("num_tokens", num_tokens, minimum=0)
    kept = spec.num_full_layers * T + spec.num_sliding_layers * min(T, spec.sliding_window or 0)
    return _layer_token_bytes(spec) * kept


def mean_bytes_per_token(model: str | ModelSpec, num_tokens: int, dtype: str | None = None) -> float:
    """``hybrid_kv_bytes / T``: what one token of a ``T``-token request costs on average (bytes).

    Equal to ``C_tok`` while ``T <= W``; it falls toward ``C_tok * L_full / L`` as ``T`` grows.
    """
    T = check_int("num_tokens", num_tokens, minimum=1)
    return hybrid_kv_bytes(model, T, dtype) / T


@dataclass(frozen=True)
class KVCacheGroups:
    """vLLM's KV-cache groups for a model: every group has ``group_layers`` layers (padding included)
    of one attention type, so that every block (page) of the one pool has the same size."""

    group_layers: int
    full_groups: int
    sliding_groups: int
    padding_layers: int

    @property
    def num_groups(self) -> int:
        return self.full_groups + self.sliding_groups


def kv_cache_groups(model: str | ModelSpec) -> KVCacheGroups:
    """Group layers as vLLM's hybrid manager does (``docs/design/hybrid_kv_cache_manager.md``, case 3).

    A group holds ``min(L_full, L_sliding)`` layers; the last group of a type is padded up to
    that size. Gemma 3 27B: groups of 10, one full and six sliding, 8 padding layers. A model
    without sliding layers is one group of all ``L`` layers.
    """
    spec = get_model(model)
    full, sliding = spec.num_full_layers, spec.num_sliding_layers
    if sliding == 0 or full == 0:
        return KVCacheGroups(spec.num_layers, int(full > 0), int(sliding > 0), 0)
    g = min(full, sliding)
    fg, sg = -(-full // g), -(-sliding // g)
    return KVCacheGroups(g, fg, sg, (fg + sg) * g - full - sliding)


def window_blocks(num_tokens: int, window: int, block_size: int) -> int:
    """Blocks a sliding-window layer holds for a request of ``T`` tokens once their step is done.

    The next token (position ``T``) attends to positions ``T - W + 1 .. T``, so blocks wholly
    before position ``max(0, T - W + 1)`` are freed: ``ceil(T / S) - max(0, T - W + 1) // S``.
    """
    T = check_int("num_tokens", num_tokens, minimum=0)
    W = check_int("window", window, minimum=1)
    S = check_int("block_size", block_size, minimum=1)
    return blocks_needed(T, S) - max(0, T - W + 1) // S if T else 0


def hybrid_blocks_per_request(model: str | ModelSpec, num_tokens: int, block_size: int = 16) -> int:
    """Blocks (pages) one request of ``T`` tokens holds in the shared pool: every full group
    ``ceil(T / S)``, every sliding group :func:`window_blocks`."""
    spec, groups = get_model(model), kv_cache_groups(model)
    T = check_int("num_tokens", num_tokens, minimum=0)
    S = check_int("block_size", block_size, minimum=1)
    sliding = window_blocks(T, spec.sliding_window, S) if groups.sliding_groups else 0
    return groups.full_groups * blocks_needed(T, S) + groups.sliding_groups * sliding


@dataclass(frozen=True)
class HybridCapacity:
    """How many requests of one length fit a GPU's KV cache, with vLLM's grouping into equal pages."""

    kv_bytes: int
    page_bytes: int
    pages: int
    blocks_per_request: int
    requests: int
    padding_layers: int


def hybrid_kv_capacity(model: str | ModelSpec, gpu_memory_bytes: int, request_tokens: int, *,
                       weight_bytes: int | None = None, other_bytes: int = 0, utilization: float = 0.9,
                       block_size: int = 16, dtype: str | None = None) -> HybridCapacity:
    """Requests of ``request_tokens`` tokens each that fit at once, for a hybrid model or any other.

    The budget is :func:`kv_capacity`'s ``kv_bytes``. A page holds ``S`` tokens of one group's
    ``group_layers`` layers: ``page_bytes = group_layers * S * C_tok / L``; ``pages = kv_bytes //
    page_bytes`` and ``requests = pages // hybrid_blocks_per_request``. For a model without
    sliding layers, ``pages`` equals :func:`kv_capacity`'s ``blocks``. Compare a hybrid model with
    :func:`as_full_attention` of it, passing the same ``weight_bytes``.
    """
    spec = get_model(model, dtype)
    T = check_int("request_tokens", request_tokens, minimum=1)
    flat = kv_capacity(spec, gpu_memory_bytes, weight_bytes=weight_bytes, other_bytes=other_bytes,
                       utilization=utilization, block_size=block_size)
    groups = kv_cache_groups(spec)
    page = groups.group_layers * flat.block_size * _layer_token_bytes(spec)
    pages = flat.kv_bytes // page
    per_request = hybrid_blocks_per_request(spec, T, flat.block_size)
    return HybridCapacity(kv_bytes=flat.kv_bytes, page_bytes=page, pages=pages, blocks_per_request=per_request,
                          requests=pages // per_request, padding_layers=groups.padding_layers)
