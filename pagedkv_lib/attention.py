"""Paged attention in plain torch: the spec the Triton kernel and the tiny model are checked against.

Cache layout, per layer: ``k_cache`` and ``v_cache`` of shape ``[num_blocks, S, H_kv, D]``
(blocks, tokens per block, KV heads, head dim), the NHD layout of vLLM and FlashInfer. Token
position ``p`` of a request lives in physical block ``block_table[p // S]`` at offset ``p % S``,
i.e. at slot ``block_table[p // S] * S + p % S`` of the cache viewed as ``[num_blocks * S, H_kv, D]``.

Grouped-query attention: ``H_q`` query heads share ``H_kv`` KV heads, ``G = H_q / H_kv`` query
heads per KV head; query head ``h`` reads KV head ``h // G`` (the order ``repeat_interleave`` gives).

The invariant the course rests on: paging changes where K and V are stored, never the result.
Every paged function here equals :func:`dense_attention` on the gathered K/V, to ``1e-5`` in fp32.

Precision: all functions compute in fp32 (fp16/bf16 inputs are upcast chunk by chunk, the way a
kernel accumulates in fp32) and round the output to the input dtype once. So a half-precision
result differs from the fp32 result on the same (already rounded) inputs by about one output
rounding: see :data:`TOLERANCES`.
"""
from __future__ import annotations

import math

import torch

from .csr import PAD_BLOCK, blocks_in_use, index_tensor
from ._checks import check_int, check_number

__all__ = ["TOLERANCES", "check_scale", "write_kv", "gather_kv", "dense_attention", "paged_decode_gather",
           "paged_decode_online", "paged_prefill", "PAD_BLOCK"]

TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 8e-3)}
"""``(atol, rtol)`` between a paged result in a dtype and the fp32 dense result on the same inputs.

fp32: summation order only. fp16 (10-bit mantissa) and bf16 (7-bit): one rounding of an output
of magnitude about 1 costs up to 2**-11 = 4.9e-4 and 2**-8 = 3.9e-3; the bounds leave 2x room.
"""

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------- argument checks

def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def _check_float(name: str, t, dims: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have shape {layout}, got shape {_shape(t)}")


def _check_cache(k_cache, v_cache) -> None:
    """Both caches ``[num_blocks, S, H_kv, D]``, equal shapes and dtypes."""
    layout = "[num_blocks, block_size, H_kv, D]"
    _check_float("k_cache", k_cache, 4, layout)
    _check_float("v_cache", v_cache, 4, layout)
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


def _check_same_dtype(q, k_cache) -> None:
    if q.dtype != k_cache.dtype:
        raise TypeError(f"q is {q.dtype} but the cache is {k_cache.dtype}: use one dtype")


def _check_tables(block_tables: torch.Tensor, seq_lens: torch.Tensor, k_cache: torch.Tensor) -> None:
    """Lengths fit their tables, and every block a length uses names a real physical block.

    Entries past a request's ``ceil(T / S)`` blocks are padding and are never read.
    """
    _, used = blocks_in_use(block_tables, seq_lens, k_cache.shape[1])
    _check_ids("block_tables", _shape(block_tables), block_tables[used], k_cache)


def _check_ids(name: str, shape: tuple, ids: torch.Tensor, k_cache: torch.Tensor) -> None:
    """The block ids a table's lengths use name blocks of the cache."""
    num_blocks = k_cache.shape[0]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
        bad = ids[(ids < 0) | (ids >= num_blocks)].tolist()
        raise ValueError(f"{name} {shape} names block ids {bad} outside the cache "
                         f"{_shape(k_cache)}, whose ids run 0..{num_blocks - 1}")


def check_scale(scale, head_dim: int) -> float:
    """The softmax scale as a float: ``1 / sqrt(head_dim)`` for ``None``, else a positive finite number.

    Public so that every attention function (the Triton kernel too) accepts and refuses the same
    scales with the same message: a NaN, infinite, zero or negative scale, or a non-number, raises.
    """
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    return check_number("scale", scale, low=0.0, high=math.inf, low_open=True, high_open=True)


def _check_capacity(what: str, total: int, table: torch.Tensor, block_size: int) -> None:
    """One request's ``total`` tokens fit its 1-D ``block_table``; ``what`` says where ``total`` came from."""
    capacity = table.shape[0] * block_size
    if total > capacity:
        raise ValueError(f"{what} exceed the capacity of block_table with shape {_shape(table)}: "
                         f"{table.shape[0]} blocks x {block_size} tokens = {capacity} tokens")


# ---------------------------------------------------------------- writing and reading the cache

def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping) -> None:
    """Store ``N`` tokens' keys and values ``[N, H_kv, D]`` at their slots, in place.

    ``slot_mapping[i]`` is the flat slot (``block * S + offset``) of token ``i``; ``-1`` marks a
    padding token, which is skipped. Two tokens may not share a slot (the winner would be undefined).
    """
    _check_cache(k_cache, v_cache)
    _check_float("k", k, 3, "[N, H_kv, D]")
    _check_float("v", v, 3, "[N, H_kv, D]")
    slots = index_tensor("slot_mapping", slot_mapping, 1)
    if k.shape != v.shape or k.shape[1:] != k_cache.shape[2:] or k.shape[0] != slots.shape[0]:
        raise ValueError(f"k {_shape(k)} and v {_shape(v)} must both be [N, H_kv, D] matching the cache "
                         f"{_shape(k_cache)} and slot_mapping {_shape(slots)} [N]")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous to be written in place by slot")
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    keep = slots != -1
    live = slots[keep]
    if live.numel() and (int(live.min()) < 0 or int(live.max()) >= num_slots):
        raise ValueError(f"slot_mapping {slots.tolist()} has slots outside [0, {num_slots}) of the cache "
                         f"{_shape(k_cache)} (-1 alone means padding)")
    if live.unique().numel() != live.numel():
        raise ValueError(f"slot_mapping {slots.tolist()} writes one slot twice")
    k_cache.view(num_slots, *k_cache.shape[2:])[live] = k[keep].to(k_cache.dtype)
    v_cache.view(num_slots, *v_cache.shape[2:])[live] = v[keep].to(v_cache.dtype)


def gather_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, block_table, num_tokens: int):
    """One request's logical K and V, ``[num_tokens, H_kv, D]`` each, copied out of its blocks."""
    _check_cache(k_cache, v_cache)
    table = index_tensor("block_table", block_table, 1)
    num_tokens = check_int("num_tokens", num_tokens, minimum=1)
    _check_capacity(f"num_tokens={num_tokens}", num_tokens, table, k_cache.shape[1])
    ids = table[: -(-num_tokens // k_cache.shape[1])]
    _check_ids("block_table", _shape(table), ids, k_cache)
    return _gather(k_cache, ids, num_tokens), _gather(v_cache, ids, num_tokens)


def _gather(cache: torch.Tensor, ids: torch.Tensor, num_tokens: int, buf: torch.Tensor | None = None):
    """``cache[ids]`` as ``[num_tokens, H_kv, D]``, copied into ``buf`` (>= len(ids) blocks) if given.

    index_select copies whole blocks (rows of S * H_kv * D values); ``cache[ids]`` does the same
    work through the generic indexing path, about twice as slowly on a CPU. Reusing a buffer
    saves the page faults of a fresh allocation per request.
    """
    out = None if buf is None else buf[: ids.numel()]
    return torch.index_select(cache, 0, ids, out=out).flatten(0, 1)[:num_tokens]


# ---------------------------------------------------------------- dense reference

def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                    scale: float | None = None) -> torch.Tensor:
    """Softmax attention of ``q [T_q, H_q, D]`` over ``k, v [T_k, H_kv, D]``, returning ``[T_q, H_q, D]``.

    The reference: GQA by repeating each KV head ``G`` times, then textbook softmax(QK^T)V.
    ``causal`` aligns the last query with the last key: query ``i`` sits at position
    ``T_k - T_q + i`` and sees keys ``0 .. T_k - T_q + i`` (decode is ``T_q = 1``).
    """
    _check_float("q", q, 3, "[T_q, H_q, D]")
    _check_float("k", k, 3, "[T_k, H_kv, D]")
    _check_float("v", v, 3, "[T_k, H_kv, D]")
    if k.shape != v.shape:
        raise ValueError(f"k has shape {_shape(k)} but v has shape {_shape(v)}: they must match")
    group = _check_heads(_shape(q), _shape(k), "q", "k")
    _check_same_dtype(q, k)
    t_q, t_k = q.shape[0], k.shape[0]
    if t_k == 0 or (causal and t_q > t_k):
        raise ValueError(f"q has shape {_shape(q)} and k has shape {_shape(k)}: attention needs T_k >= 1, "
                         f"and causal attention T_q <= T_k, so that every query sees a key")
    kr = k.float().repeat_interleave(group, dim=1)                     # [T_k, H_q, D]
    vr = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kr) * check_scale(scale, q.shape[-1])
    if causal:
        future = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).triu(t_k - t_q + 1)
        scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, vr).to(q.dtype)


def _grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       scale: float) -> torch.Tensor:
    """:func:`dense_attention` without repeating K/V: fp32 ``[T_q, H_q, D]`` from checked inputs.

    Layout decides speed here. ``k.permute(1, 2, 0)`` is a strided *view* ``[H_kv, D, T_k]``
    (batch stride ``D``, row stride ``H_kv * D``) that BLAS multiplies in place. Making it
    contiguous first adds a strided copy of the whole K and V, which cost more than the attention
    itself on a 2-core CPU (``naive_gather`` vs ``paged_gather`` in ``benchmarks/attention.py``).
    """
    t_q, h_q, d = q.shape
    t_k, h_kv, _ = k.shape
    group = h_q // h_kv
    # [T_q, H_kv, G, D] -> [H_kv, G * T_q, D]: each KV head multiplies all of its query heads at once.
    qg = (q.float() * scale).view(t_q, h_kv, group, d).permute(1, 2, 0, 3).reshape(h_kv, group * t_q, d)
    scores = torch.bmm(qg, k.float().permute(1, 2, 0))                 # [H_kv, G * T_q, T_k]
    if causal and t_q > 1:
        future = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).triu(t_k - t_q + 1)
        scores = scores.view(h_kv, group, t_q, t_k).masked_fill(future, float("-inf")).view_as(scores)
    out = torch.bmm(torch.softmax(scores, dim=-1), v.float().transpose(0, 1))   # [H_kv, G * T_q, D]
    return out.view(h_kv, group, t_q, d).permute(2, 0, 1, 3).reshape(t_q, h_q, d)


# ---------------------------------------------------------------- paged attention

def check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens):
    """Checked ``(block_tables, seq_lens)`` as int64 for a decode batch ``q [B, H_q, D]``.

    Public so that other decode implementations (the Triton kernel) reject bad input with the same
    messages; raises ``TypeError``/``ValueError`` naming the shapes.
    """
    _check_cache(k_cache, v_cache)
    _check_float("q", q, 3, "[B, H_q, D]")
    _check_heads(_shape(q), _shape(k_cache), "q", "k_cache")
    _check_same_dtype(q, k_cache)
    tables = index_tensor("block_tables", block_tables, 2)
    lens = index_tensor("seq_lens", seq_lens, 1)
    if tables.shape[0] != q.shape[0]:
        raise ValueError(f"q has shape {_shape(q)} [B, H_q, D] but block_tables has shape "
                         f"{_shape(tables)} [B, max_blocks]: batch sizes differ")
    _check_tables(tables, lens, k_cache)
    return tables, lens


def paged_decode_gather(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                        seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """Decode attention, readable version: gather each request's K/V through its table, then attend.

    ``q [B, H_q, D]`` holds one new token per request (its K/V already written), request ``b``
    sees ``seq_lens[b]`` tokens; returns ``[B, H_q, D]``. Costs a full copy of each request's K/V,
    into buffers sized for the longest request and reused.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    S = k_cache.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    longest = -(-int(lens.max()) // S) if len(lens) else 0
    k_buf, v_buf = k_cache.new_empty(longest, *k_cache.shape[1:]), v_cache.new_empty(longest, *v_cache.shape[1:])
    for b, num_tokens in enumerate(lens.tolist()):
        ids = tables[b, : -(-num_tokens // S)]
        k = _gather(k_cache, ids, num_tokens, k_buf)                    # [T_b, H_kv, D]: the logical K
        v = _gather(v_cache, ids, num_tokens, v_buf)
        out[b] = _grouped_attention(q[b : b + 1], k, v, False, scale)[0]
    return out.to(q.dtype)


def paged_decode_online(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                        seq_lens, *, scale: float | None = None, step_blocks: int = 64) -> torch.Tensor:
    """Decode attention, memory-lean version: walk each request's blocks with an online softmax.

    Same contract as :func:`paged_decode_gather`. A request's blocks are read ``step_blocks`` at a
    time; each step is folded into a running max ``m``, running denominator ``l`` and running
    numerator ``acc`` (both rescaled by ``exp(m_old - m_new)`` when the max grows), and the result
    is ``acc / l``. A step's K is copied into one reused buffer (a matmul needs one strided tensor);
    its V is not copied at all when the cache is fp32 (see :func:`_weighted_values`). Extra memory
    is ``step_blocks`` blocks of K, whatever the context length. The default (4 MiB at 8 KV heads x
    128 x fp32 x 16 tokens) keeps a step inside a CPU's last-level cache, so the matmul rereads
    what the copy just wrote instead of going back to DRAM.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    step = check_int("step_blocks", step_blocks, minimum=1)
    batch, h_q, d = q.shape
    S, h_kv = k_cache.shape[1], k_cache.shape[2]
    group = h_q // h_kv
    scale = check_scale(scale, d)
    k_buf = k_cache.new_empty(step, *k_cache.shape[1:])                # reused by every step
    v_buf = None if _rows_in_place(v_cache) else v_cache.new_empty(step, *v_cache.shape[1:])
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        qg = (q[b].float() * scale).view(h_kv, group, d)
        m = torch.full((h_kv, group, 1), float("-inf"), device=q.device)
        denom = torch.zeros(h_kv, group, 1, device=q.device)
        acc = torch.zeros(h_kv, group, d, device=q.device)
        for first in range(0, num_tokens, step * S):                   # first token of this step
            tokens = min(num_tokens - first, step * S)
            ids = tables[b, first // S : first // S + -(-tokens // S)]
            k = _gather(k_cache, ids, tokens, k_buf).float()           # [tokens, H_kv, D]
            scores = torch.bmm(qg, k.permute(1, 2, 0))                 # [H_kv, G, tokens], K not copied
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))    # finite: the step has >= 1 token
            rescale = torch.exp(m - m_new)
            probs = scores.sub_(m_new).exp_()
            denom.mul_(rescale).add_(probs.sum(-1, keepdim=True))
            acc.mul_(rescale).add_(_weighted_values(probs, v_cache, ids, tokens, v_buf))
            m = m_new
        out[b] = (acc / denom).view(h_q, d)
    return out.to(q.dtype)


def _rows_in_place(cache: torch.Tensor) -> bool:
    """Whether :func:`_weighted_values` can read ``cache`` in place: fp32 and contiguous."""
    return cache.dtype == torch.float32 and cache.is_contiguous()


def _weighted_values(probs: torch.Tensor, v_cache: torch.Tensor, ids: torch.Tensor, tokens: int,
                     v_buf: torch.Tensor | None) -> torch.Tensor:
    """``probs [H_kv, G, tokens] @ V`` for one step's blocks ``ids``: ``[H_kv, G, D]`` in fp32.

    On an fp32 contiguous cache, ``embedding_bag`` computes the weighted sum straight from the
    cache: seen as ``[num_blocks * S * H_kv, D]``, token ``t`` of KV head ``h`` is row
    ``slot_t * H_kv + h``, and query head ``(h, g)`` is one bag of ``tokens`` rows weighted by
    ``probs[h, g]``. No copy of V is made; on a 2-core CPU this made the 4k decode batch 7-10%
    faster than copy-then-matmul (``benchmarks/RESULTS.md``). Otherwise (half precision, whose weights would have to be rounded,
    or a strided cache) the step's V is copied into ``v_buf``, upcast, and multiplied.
    """
    h_kv, group, _ = probs.shape
    if v_buf is not None:
        v = _gather(v_cache, ids, tokens, v_buf).float()               # [tokens, H_kv, D]
        return torch.bmm(probs, v.transpose(0, 1))
    S, d = v_cache.shape[1], v_cache.shape[3]
    slots = (ids[:, None] * S + torch.arange(S, device=ids.device)).flatten()[:tokens]
    heads = torch.arange(h_kv, device=ids.device).repeat_interleave(group)         # KV head of each query head
    rows = slots * h_kv + heads[:, None]                                # [H_q, tokens]
    sums = torch.nn.functional.embedding_bag(rows, v_cache.view(-1, d), mode="sum",
                                             per_sample_weights=probs.view(h_kv * group, tokens))
    return sums.view(h_kv, group, d)


def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table,
                  num_cached: int, *, scale: float | None = None) -> torch.Tensor:
    """Prefill ``T_new`` new tokens of one request on top of ``num_cached`` tokens already in its blocks.

    ``q [T_new, H_q, D]``; the new tokens' K/V must already be written at positions
    ``num_cached .. num_cached + T_new - 1``. New token ``i`` attends to the cached prefix and to
    new tokens ``0 .. i`` (what prefix caching needs: the prefix is read, never recomputed).
    Returns ``[T_new, H_q, D]``.
    """
    _check_cache(k_cache, v_cache)
    _check_float("q", q, 3, "[T_new, H_q, D]")
    _check_heads(_shape(q), _shape(k_cache), "q", "k_cache")
    _check_same_dtype(q, k_cache)
    cached = check_int("num_cached", num_cached, minimum=0)
    if q.shape[0] < 1:
        raise ValueError(f"q has shape {_shape(q)}: prefill needs at least one new token")
    scale = check_scale(scale, q.shape[-1])
    table = index_tensor("block_table", block_table, 1)
    total = cached + q.shape[0]
    _check_capacity(f"num_cached={cached} + {q.shape[0]} new tokens (q {_shape(q)}) = {total} tokens",
                    total, table, k_cache.shape[1])
    k, v = gather_kv(k_cache, v_cache, table, total)
    return _grouped_attention(q, k, v, True, scale).to(q.dtype)
