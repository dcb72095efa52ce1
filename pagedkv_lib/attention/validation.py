"""Argument checks for the attention functions, kept out of the teaching module.

Every public function of :mod:`pagedkv_lib.attention.spec` (and of the faster and kernel versions
beside it) calls one ``check_*`` here first and then an unchecked core. Each message names the
argument, its shape or value, and what is allowed: learners read them.

The tensor helpers that turn a block table or a list of lengths into an int64 tensor
(:func:`index_tensor`) and find the table entries a batch's lengths use (:func:`blocks_in_use`)
live here too, since every check of a table starts with them.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..validation import check_int, check_number
from ..accounting import blocks_needed

__all__ = ["FLOATS", "index_tensor", "blocks_in_use", "check_scale", "check_cache", "check_float",
           "check_decode_tensors", "check_decode_inputs", "check_dense", "check_gather", "check_prefill", "check_write"]

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
"""The cache and query dtypes every attention function accepts."""


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def index_tensor(name: str, value, dims: int) -> torch.Tensor:
    """``value`` (block ids, lengths, slots) as an int64 tensor of ``dims`` dimensions.

    An empty list (or nested empty lists) holds no numbers of any type and becomes an empty int64
    tensor; an empty float *tensor* or *array* is still refused. Raises TypeError for non-integer
    dtypes and ValueError naming the shape for the wrong rank or a ragged nested list.
    """
    given = value
    try:
        value = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:  # ragged rows, strings, huge ints
        raise (TypeError if isinstance(exc, TypeError) else ValueError)(
            f"{name} must be a rectangular tensor of integers, got {given!r}") from exc
    if value.numel() == 0 and not isinstance(given, (torch.Tensor, np.ndarray)):
        value = value.to(torch.int64)  # torch.as_tensor([]) is float32, but [] is no float
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {value.dtype}")
    if value.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {tuple(value.shape)}")
    return value.to(torch.int64)


def blocks_in_use(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int):
    """``(N [B], used [B, max_blocks])``: blocks per request and the mask of table entries its length uses.

    ``block_tables [B, max_blocks]`` and ``seq_lens [B]`` are int64 tensors (see
    :func:`index_tensor`). Checks that the batch sizes agree, that every length is >= 1 token and
    that it fits its row (``N_i = ceil(T_i / S) <= max_blocks``); raises ``ValueError`` naming the
    shapes otherwise. Entries outside ``used`` are padding and are never read; boolean indexing
    ``block_tables[used]`` reads the used ones request after request.
    """
    S = block_size
    if block_tables.shape[0] != seq_lens.shape[0]:
        raise ValueError(f"block_tables has shape {tuple(block_tables.shape)} [B, max_blocks] but seq_lens "
                         f"has shape {tuple(seq_lens.shape)} [B]: batch sizes differ")
    capacity = block_tables.shape[1] * S
    if seq_lens.numel():
        if int(seq_lens.min()) < 1:
            raise ValueError(f"seq_lens must all be >= 1 token, got {seq_lens.tolist()}")
        if int(seq_lens.max()) > capacity:  # before dividing by S: a cache with 0-slot blocks lands here
            raise ValueError(f"seq_lens {seq_lens.tolist()} exceed the capacity of block_tables with shape "
                             f"{tuple(block_tables.shape)}: {block_tables.shape[1]} blocks x {S} tokens = "
                             f"{capacity} tokens")
    n_blocks = (seq_lens + S - 1) // max(S, 1)  # S == 0 only with no lengths: N is empty anyway
    used = torch.arange(block_tables.shape[1], device=block_tables.device) < n_blocks[:, None]
    return n_blocks, used


def check_scale(scale, head_dim: int) -> float:
    """The softmax scale as a float: ``1 / sqrt(head_dim)`` for ``None``, else a positive finite number.

    Public so that every attention function (the Triton kernel too) accepts and refuses the same
    scales with the same message: a NaN, infinite, zero or negative scale, or a non-number, raises.
    """
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    return check_number("scale", scale, low=0.0, high=math.inf, low_open=True, high_open=True)


def check_float(name: str, t, dims: int, layout: str) -> None:
    """``t`` is a float32/16/bf16 tensor of ``dims`` dimensions; ``layout`` names them in the message."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dtype not in FLOATS:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have shape {layout}, got shape {_shape(t)}")


def check_cache(k_cache, v_cache) -> None:
    """Both caches ``[num_blocks, S, H_kv, D]``, equal shapes and dtypes."""
    layout = "[num_blocks, block_size, H_kv, D]"
    check_float("k_cache", k_cache, 4, layout)
    check_float("v_cache", v_cache, 4, layout)
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache {_shape(k_cache)} {k_cache.dtype} and v_cache {_shape(v_cache)} "
                         f"{v_cache.dtype} must have the same shape and dtype")


def _check_heads(q_shape: tuple, kv_shape: tuple, q_name: str, kv_name: str) -> int:
    """Return ``G = H_q / H_kv`` after checking head dims and divisibility (last two dims: heads, D)."""
    (h_q, d_q), (h_kv, d_kv) = q_shape[-2:], kv_shape[-2:]
    if d_q != d_kv:
        raise ValueError(f"{q_name} has shape {q_shape} and {kv_name} has shape {kv_shape}: "
                         f"head dims differ ({d_q} vs {d_kv})")
    if h_kv == 0 or h_q % h_kv:
        raise ValueError(f"{q_name} has shape {q_shape} and {kv_name} has shape {kv_shape}: "
                         f"query heads {h_q} are not a multiple of KV heads {h_kv}")
    return h_q // h_kv


def _check_query(q, k_cache, layout: str) -> None:
    """``q`` has the cache's dtype and head dim, and whole groups of query heads per KV head."""
    check_float("q", q, 3, layout)
    _check_heads(_shape(q), _shape(k_cache), "q", "k_cache")
    _check_same_dtype(q, k_cache)


def _check_same_dtype(q, k_cache) -> None:
    if q.dtype != k_cache.dtype:
        raise TypeError(f"q is {q.dtype} but the cache is {k_cache.dtype}: use one dtype")


def _check_ids(name: str, shape: tuple, ids: torch.Tensor, k_cache: torch.Tensor, used=None) -> None:
    """The block ids a table's lengths use name blocks of the cache: all of ``ids``, or those where ``used``.

    With a mask the check is elementwise work and one reduction: boolean indexing (``ids[used]``)
    would start a parallel region on the CPU, and torch's OpenMP workers then spin for several
    milliseconds, competing with whatever runs next (the numba kernel's threads, on a small machine).
    """
    num_blocks = k_cache.shape[0]
    outside = (ids < 0) | (ids >= num_blocks)
    if used is not None:
        outside &= used
    if bool(outside.any()):
        raise ValueError(f"{name} {shape} names block ids {ids[outside].tolist()} outside the cache "
                         f"{_shape(k_cache)}, whose ids run 0..{num_blocks - 1}")


def _check_capacity(what: str, total: int, table: torch.Tensor, block_size: int) -> None:
    """One request's ``total`` tokens fit its 1-D ``block_table``; ``what`` says where ``total`` came from."""
    capacity = table.shape[0] * block_size
    if total > capacity:
        raise ValueError(f"{what} exceed the capacity of block_table with shape {_shape(table)}: "
                         f"{table.shape[0]} blocks x {block_size} tokens = {capacity} tokens")


def check_decode_tensors(q, k_cache, v_cache) -> None:
    """The first half of :func:`check_decode_inputs`: ``q [B, H_q, D]`` and both caches ``[num_blocks, S, H_kv, D]``
    agree in dtype, head dim and heads (Python checks of shapes and dtypes only, no tensor operation)."""
    check_cache(k_cache, v_cache)
    _check_query(q, k_cache, "[B, H_q, D]")


def check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens):
    """Checked ``(block_tables, seq_lens)`` as int64 for a decode batch ``q [B, H_q, D]``.

    Public so that other decode implementations (the Triton and numba kernels) reject bad input
    with the same messages; raises ``TypeError``/``ValueError`` naming the shapes. Table entries
    past a request's ``ceil(T / S)`` blocks are padding: they are not checked and never read.
    """
    check_decode_tensors(q, k_cache, v_cache)
    tables = index_tensor("block_tables", block_tables, 2)
    lens = index_tensor("seq_lens", seq_lens, 1)
    if tables.shape[0] != q.shape[0]:
        raise ValueError(f"q has shape {_shape(q)} [B, H_q, D] but block_tables has shape "
                         f"{_shape(tables)} [B, max_blocks]: batch sizes differ")
    _, used = blocks_in_use(tables, lens, k_cache.shape[1])
    _check_ids("block_tables", _shape(tables), tables, k_cache, used)
    return tables, lens


def check_write(k_cache, v_cache, k, v, slot_mapping) -> torch.Tensor:
    """Checked ``slot_mapping`` (int64 ``[N]``, ``-1`` = padding) for writing ``k, v [N, H_kv, D]``."""
    check_cache(k_cache, v_cache)
    check_float("k", k, 3, "[N, H_kv, D]")
    check_float("v", v, 3, "[N, H_kv, D]")
    slots = index_tensor("slot_mapping", slot_mapping, 1)
    if k.shape != v.shape or k.shape[1:] != k_cache.shape[2:] or k.shape[0] != slots.shape[0]:
        raise ValueError(f"k {_shape(k)} and v {_shape(v)} must both be [N, H_kv, D] matching the cache "
                         f"{_shape(k_cache)} and slot_mapping {_shape(slots)} [N]")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous to be written in place by slot")
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    live = slots[slots != -1]
    if live.numel() and (int(live.min()) < 0 or int(live.max()) >= num_slots):
        raise ValueError(f"slot_mapping {slots.tolist()} has slots outside [0, {num_slots}) of the cache "
                         f"{_shape(k_cache)} (-1 alone means padding)")
    if live.unique().numel() != live.numel():
        raise ValueError(f"slot_mapping {slots.tolist()} writes one slot twice")
    return slots


def check_gather(k_cache, v_cache, block_table, num_tokens) -> tuple[torch.Tensor, int]:
    """Checked ``(block_table as int64 [max_blocks], num_tokens)`` for reading one request's K/V."""
    check_cache(k_cache, v_cache)
    table = index_tensor("block_table", block_table, 1)
    num_tokens = check_int("num_tokens", num_tokens, minimum=1)
    S = k_cache.shape[1]
    _check_capacity(f"num_tokens={num_tokens}", num_tokens, table, S)
    _check_ids("block_table", _shape(table), table[: blocks_needed(num_tokens, S)], k_cache)
    return table, num_tokens


def check_dense(q, k, v, causal: bool) -> None:
    """``q [T_q, H_q, D]`` can attend over ``k, v [T_k, H_kv, D]``: every query sees a key."""
    check_float("q", q, 3, "[T_q, H_q, D]")
    check_float("k", k, 3, "[T_k, H_kv, D]")
    check_float("v", v, 3, "[T_k, H_kv, D]")
    if k.shape != v.shape:
        raise ValueError(f"k has shape {_shape(k)} but v has shape {_shape(v)}: they must match")
    _check_heads(_shape(q), _shape(k), "q", "k")
    _check_same_dtype(q, k)
    t_q, t_k = q.shape[0], k.shape[0]
    if t_k == 0 or (causal and t_q > t_k):
        raise ValueError(f"q has shape {_shape(q)} and k has shape {_shape(k)}: attention needs T_k >= 1, "
                         f"and causal attention T_q <= T_k, so that every query sees a key")


def check_prefill(q, k_cache, v_cache, block_table, num_cached) -> tuple[torch.Tensor, int]:
    """Checked ``(block_table as int64, num_cached)`` for prefilling ``q [T_new, H_q, D]``."""
    check_cache(k_cache, v_cache)
    _check_query(q, k_cache, "[T_new, H_q, D]")
    cached = check_int("num_cached", num_cached, minimum=0)
    if q.shape[0] < 1:
        raise ValueError(f"q has shape {_shape(q)}: prefill needs at least one new token")
    table = index_tensor("block_table", block_table, 1)
    total = cached + q.shape[0]
    _check_capacity(f"num_cached={cached} + {q.shape[0]} new tokens (q {_shape(q)}) = {total} tokens",
                    total, table, k_cache.shape[1])
    _check_ids("block_table", _shape(table), table[: blocks_needed(total, k_cache.shape[1])], k_cache)
    return table, cached
