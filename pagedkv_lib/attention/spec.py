"""Paged attention in plain torch, written as the spec: what every faster version must equal.

Cache layout, per layer: ``k_cache`` and ``v_cache`` of shape ``[num_blocks, S, H_kv, D]``
(blocks, tokens per block, KV heads, head dim), the NHD layout of vLLM and FlashInfer. Token
position ``p`` of a request lives in physical block ``block_table[p // S]`` at offset ``p % S``,
i.e. at slot ``block_table[p // S] * S + p % S`` of the cache viewed as ``[num_blocks * S, H_kv, D]``.

Grouped-query attention: ``H_q`` query heads share ``H_kv`` KV heads, ``G = H_q / H_kv`` query
heads per KV head; query head ``h`` reads KV head ``h // G`` (the order ``repeat_interleave`` gives).

The invariant the course rests on: paging changes where K and V are stored, never the result.
:func:`paged_decode_reference` says it in code (gather each request's K/V, then dense attention);
:func:`paged_decode_gather` and :func:`paged_decode_online` compute the same thing one request,
or one step of blocks, at a time. Faster CPU versions sit beside these, in
:mod:`pagedkv_lib.attention.fast`, and are tested equal to them.

Each public function checks its arguments once (:mod:`pagedkv_lib.attention.validation`) and then
calls an unchecked core, the ``_``-prefixed function below it.

Precision: all functions compute in fp32 (fp16/bf16 inputs are upcast chunk by chunk, the way a
kernel accumulates in fp32) and round the output to the input dtype once. So a half-precision
result differs from the fp32 result on the same (already rounded) inputs by about one output
rounding: see :data:`TOLERANCES`.
"""
from __future__ import annotations

import torch

from ..validation import check_int
from ..accounting import blocks_needed
from .validation import (check_dense, check_decode_inputs, check_gather, check_prefill, check_scale,
                               check_write)

__all__ = ["PAD_BLOCK", "TOLERANCES", "check_decode_inputs", "check_scale", "write_kv", "gather_kv",
           "dense_attention", "paged_decode_reference", "paged_decode_gather", "paged_decode_online",
           "paged_prefill"]

PAD_BLOCK = -1
"""Block-table entry past a request's last block: "no block here". Never read."""

TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 8e-3)}
"""``(atol, rtol)`` between a paged result in a dtype and the fp32 dense result on the same inputs.

fp32: summation order only. fp16 (10-bit mantissa) and bf16 (7-bit): one rounding of an output
of magnitude about 1 costs up to 2**-11 = 4.9e-4 and 2**-8 = 3.9e-3; the bounds leave 2x room.
"""


# ---------------------------------------------------------------- writing and reading the cache

def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping) -> None:
    """Store ``N`` tokens' keys and values ``[N, H_kv, D]`` at their slots, in place.

    ``slot_mapping[i]`` is the flat slot (``block * S + offset``) of token ``i``; ``-1`` marks a
    padding token, which is skipped. Two tokens may not share a slot (the winner would be undefined).
    """
    slots = check_write(k_cache, v_cache, k, v, slot_mapping)
    keep = slots != -1
    for cache, new in ((k_cache, k), (v_cache, v)):
        cache.view(-1, *cache.shape[2:])[slots[keep]] = new[keep].to(cache.dtype)


def gather_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, block_table, num_tokens: int):
    """One request's logical K and V, ``[num_tokens, H_kv, D]`` each, copied out of its blocks."""
    table, num_tokens = check_gather(k_cache, v_cache, block_table, num_tokens)
    return _gather(k_cache, table, num_tokens), _gather(v_cache, table, num_tokens)


def _gather(cache: torch.Tensor, table: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Tokens ``0 .. num_tokens - 1`` of the request whose blocks ``table`` lists: ``[num_tokens, H_kv, D]``."""
    ids = table[: blocks_needed(num_tokens, cache.shape[1])]           # the N = ceil(T / S) blocks in use
    return cache[ids].flatten(0, 1)[:num_tokens]                       # [N, S, H_kv, D] -> [T, H_kv, D]


# ---------------------------------------------------------------- dense reference

def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                    scale: float | None = None) -> torch.Tensor:
    """Softmax attention of ``q [T_q, H_q, D]`` over ``k, v [T_k, H_kv, D]``, returning ``[T_q, H_q, D]``.

    The reference: GQA by repeating each KV head ``G`` times, then textbook softmax(QK^T)V.
    ``causal`` aligns the last query with the last key: query ``i`` sits at position
    ``T_k - T_q + i`` and sees keys ``0 .. T_k - T_q + i`` (decode is ``T_q = 1``).
    """
    check_dense(q, k, v, causal)
    return _dense(q, k, v, causal, check_scale(scale, q.shape[-1])).to(q.dtype)


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """:func:`dense_attention` on checked inputs, in fp32."""
    t_q, t_k, group = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    kr = k.float().repeat_interleave(group, dim=1)                     # [T_k, H_q, D]
    vr = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kr) * scale       # [H_q, T_q, T_k]
    if causal:
        future = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).triu(t_k - t_q + 1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vr)


# ---------------------------------------------------------------- paged decode

def paged_decode_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                           seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """The definition of paged decode: gather each request's K/V through its table, then dense attention.

    ``q [B, H_q, D]`` holds one new token per request (its K/V already written); request ``b``
    sees ``seq_lens[b]`` tokens through row ``b`` of ``block_tables [B, max_blocks]``. Returns
    ``[B, H_q, D]``.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        k, v = _gather(k_cache, tables[b], num_tokens), _gather(v_cache, tables[b], num_tokens)
        out[b] = _dense(q[b : b + 1], k, v, False, scale)[0]
    return out.to(q.dtype)


def paged_decode_gather(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                        seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """Decode one request at a time: copy its K/V out of its blocks, then attend, group by group.

    Same contract as :func:`paged_decode_reference`. Where the reference repeats each KV head
    ``G`` times, this version views the ``H_q`` query heads as ``[H_kv, G]``, so that the ``G``
    query heads of a group read their one KV head together: nothing is repeated. It still costs a
    full copy of each request's K and V.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    batch, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        k = _gather(k_cache, tables[b], num_tokens).float()            # [T, H_kv, D]: the logical K
        v = _gather(v_cache, tables[b], num_tokens).float()
        qg = q[b].float().view(h_kv, h_q // h_kv, d) * scale           # [H_kv, G, D]
        probs = torch.softmax(torch.einsum("hgd,thd->hgt", qg, k), dim=-1)
        out[b] = torch.einsum("hgt,thd->hgd", probs, v).reshape(h_q, d)
    return out.to(q.dtype)


def paged_decode_online(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                        seq_lens, *, scale: float | None = None, step_blocks: int = 64) -> torch.Tensor:
    """Decode with an online softmax: walk each request's blocks, ``step_blocks`` at a time.

    Same contract as :func:`paged_decode_reference`, but no request's whole K/V is ever copied:
    extra memory is one step of blocks, whatever the context length. See :func:`_online_one`.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    step = check_int("step_blocks", step_blocks, minimum=1)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        out[b] = _online_one(q[b], k_cache, v_cache, tables[b], num_tokens, scale, step)
    return out.to(q.dtype)


def _online_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table: torch.Tensor,
                num_tokens: int, scale: float, step_blocks: int) -> torch.Tensor:
    """One request's ``[H_q, D]`` output, read one step of blocks at a time, in fp32.

    Per query head it keeps three running values over the tokens seen so far:
    ``m`` the largest score, ``l`` the softmax denominator ``sum exp(s - m)`` and ``acc`` the
    numerator ``sum exp(s - m) * v``. When a step raises the max from ``m`` to ``m_new``, the
    old sums are rescaled by ``exp(m - m_new)``. After the last step the output is ``acc / l``,
    exactly ``softmax(s) @ V``.
    """
    h_q, d = q.shape
    S, h_kv = k_cache.shape[1], k_cache.shape[2]
    qg = q.float().view(h_kv, h_q // h_kv, d) * scale                  # [H_kv, G, D]
    m = torch.full(qg.shape[:2], float("-inf"), device=q.device)      # [H_kv, G]
    l = torch.zeros(qg.shape[:2], device=q.device)
    acc = torch.zeros(qg.shape, device=q.device)                       # [H_kv, G, D]
    for first in range(0, num_tokens, step_blocks * S):                # first token of this step
        blocks = table[first // S : first // S + step_blocks]
        tokens = min(num_tokens - first, step_blocks * S)
        k = _gather(k_cache, blocks, tokens).float()                   # [tokens, H_kv, D]
        v = _gather(v_cache, blocks, tokens).float()
        s = torch.einsum("hgd,thd->hgt", qg, k)                        # this step's scores
        m_new = torch.maximum(m, s.amax(dim=-1))                       # finite: a step has >= 1 token
        p = torch.exp(s - m_new[..., None])
        rescale = torch.exp(m - m_new)                                 # 0 on the first step (m = -inf)
        l = l * rescale + p.sum(dim=-1)
        acc = acc * rescale[..., None] + torch.einsum("hgt,thd->hgd", p, v)
        m = m_new
    return (acc / l[..., None]).reshape(h_q, d)


# ---------------------------------------------------------------- prefill on a cached prefix

def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table,
                  num_cached: int, *, scale: float | None = None) -> torch.Tensor:
    """Prefill ``T_new`` new tokens of one request on top of ``num_cached`` tokens already in its blocks.

    ``q [T_new, H_q, D]``; the new tokens' K/V must already be written at positions
    ``num_cached .. num_cached + T_new - 1``. New token ``i`` attends to the cached prefix and to
    new tokens ``0 .. i`` (what prefix caching needs: the prefix is read, never recomputed).
    Returns ``[T_new, H_q, D]``.
    """
    table, cached = check_prefill(q, k_cache, v_cache, block_table, num_cached)
    scale = check_scale(scale, q.shape[-1])
    total = cached + q.shape[0]
    k, v = _gather(k_cache, table, total), _gather(v_cache, table, total)
    return _dense(q, k, v, True, scale).to(q.dtype)
