"""Faster CPU versions of the paged decode spec in :mod:`pagedkv_lib.attention.spec`, tested equal to it.

Same contracts, same checks and messages, same results to :data:`~pagedkv_lib.attention.spec.TOLERANCES`
(``tests/test_attention_fast.py`` checks each against the spec on random batches). What they
change is how torch touches memory; each trick is kept only while a same-process A/B run shows
it faster than the spec (``benchmarks/attention_variants.py``, figures in ``benchmarks/RESULTS.md``):

* **reused buffers**: a request's (or a step's) blocks are copied with ``index_select`` into one
  buffer allocated per call, instead of a fresh tensor per request, which costs page faults;
* **strided views instead of copies**: the matmuls read the gathered ``[T, H_kv, D]`` K and V
  through permuted views (``K.permute(1, 2, 0)`` is ``[H_kv, D, T]``), which BLAS multiplies in
  place; the spec's ``einsum`` may first make a permuted copy;
* **V read in place** (online walk, fp32 contiguous caches): ``embedding_bag`` sums a step's V
  rows, weighted by the softmax probabilities, straight out of the cache (on a quiet machine,
  0.88-0.90x of copy-then-matmul at one thread, a tie at two; the benchmark keeps the copy path
  as ``online_copy_v``, to rerun the A/B).
"""
from __future__ import annotations

import torch

from ..validation import check_int
from ..accounting import blocks_needed
from .validation import check_decode_inputs, check_scale

__all__ = ["paged_decode_gather_fast", "paged_decode_online_fast"]


def paged_decode_gather_fast(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                             seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """:func:`~pagedkv_lib.attention.spec.paged_decode_gather`, with buffers sized for the longest request, reused."""
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    S = k_cache.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    longest = blocks_needed(int(lens.max()), S) if len(lens) else 0
    k_buf, v_buf = (cache.new_empty(longest, *cache.shape[1:]) for cache in (k_cache, v_cache))
    for b, num_tokens in enumerate(lens.tolist()):
        ids = tables[b, : blocks_needed(num_tokens, S)]
        k = _copy_blocks(k_cache, ids, num_tokens, k_buf)              # [T, H_kv, D]: the logical K
        v = _copy_blocks(v_cache, ids, num_tokens, v_buf)
        out[b] = _grouped_decode(q[b], k, v, scale)
    return out.to(q.dtype)


def paged_decode_online_fast(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                             seq_lens, *, scale: float | None = None, step_blocks: int = 64) -> torch.Tensor:
    """:func:`~pagedkv_lib.attention.spec.paged_decode_online`, each step's K copied into one reused buffer.

    V is read in place when the cache is fp32 and contiguous (:func:`_weighted_values`), else
    copied like K. Extra memory is ``step_blocks`` blocks of K (and of V when copied). The default
    (4 MiB at 8 KV heads x 128 x fp32 x 16 tokens) keeps a step inside a CPU's last-level cache,
    so the matmul rereads what the copy just wrote instead of going back to DRAM.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    step = check_int("step_blocks", step_blocks, minimum=1)
    k_buf = k_cache.new_empty(step, *k_cache.shape[1:])
    v_rows = _value_rows(v_cache, q.shape[1] // v_cache.shape[2])
    v_buf = v_cache.new_empty(step, *v_cache.shape[1:]) if v_rows is None else None
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        out[b] = _online_one(q[b], k_cache, v_cache, tables[b], num_tokens, scale, step, k_buf, v_buf, v_rows)
    return out.to(q.dtype)


def _copy_blocks(cache: torch.Tensor, ids: torch.Tensor, num_tokens: int, buf: torch.Tensor) -> torch.Tensor:
    """``cache[ids]`` as ``[num_tokens, H_kv, D]``, copied into ``buf`` (at least ``len(ids)`` blocks).

    index_select copies whole blocks (rows of S * H_kv * D values); ``cache[ids]`` does the same
    work through the generic indexing path, more slowly on a CPU.
    """
    return torch.index_select(cache, 0, ids, out=buf[: ids.numel()]).flatten(0, 1)[:num_tokens]


def _grouped_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One request's ``[H_q, D]`` from ``q [H_q, D]`` and its gathered ``k, v [T, H_kv, D]``, in fp32.

    ``k.permute(1, 2, 0)`` is a strided *view* ``[H_kv, D, T]`` (batch stride ``D``, row stride
    ``H_kv * D``) that BLAS multiplies in place; making it contiguous first would add a strided
    copy of the whole K, and the same holds for V.
    """
    h_q, d = q.shape
    h_kv = k.shape[1]
    qg = q.float().view(h_kv, h_q // h_kv, d) * scale                  # [H_kv, G, D]
    probs = torch.softmax(torch.bmm(qg, k.float().permute(1, 2, 0)), dim=-1)    # [H_kv, G, T]
    return torch.bmm(probs, v.float().transpose(0, 1)).view(h_q, d)


def _online_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table: torch.Tensor,
                num_tokens: int, scale: float, step_blocks: int, k_buf: torch.Tensor,
                v_buf: torch.Tensor | None, v_rows: tuple | None) -> torch.Tensor:
    """The spec's online walk for one request (``m``, ``l``, ``acc``), in place, K copied into ``k_buf``.

    V is read through ``v_rows`` (:func:`_value_rows`) when given, else copied into ``v_buf``.
    """
    h_q, d = q.shape
    S, h_kv = k_cache.shape[1], k_cache.shape[2]
    qg = q.float().view(h_kv, h_q // h_kv, d) * scale                  # [H_kv, G, D]
    m = torch.full((h_kv, h_q // h_kv, 1), float("-inf"), device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(qg)
    for first in range(0, num_tokens, step_blocks * S):
        tokens = min(num_tokens - first, step_blocks * S)
        ids = table[first // S : first // S + blocks_needed(tokens, S)]
        k = _copy_blocks(k_cache, ids, tokens, k_buf).float()          # [tokens, H_kv, D]
        s = torch.bmm(qg, k.permute(1, 2, 0))                          # [H_kv, G, tokens]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        rescale = torch.exp(m - m_new)
        p = s.sub_(m_new).exp_()
        l.mul_(rescale).add_(p.sum(-1, keepdim=True))
        acc.mul_(rescale).add_(_weighted_values(p, v_cache, ids, tokens, v_buf, v_rows))
        m = m_new
    return (acc / l).view(h_q, d)


def _value_rows(v_cache: torch.Tensor, group: int) -> tuple | None:
    """What :func:`_weighted_values` needs to read V in place, built once per call; ``None`` if it cannot.

    Seen as ``[num_blocks * S * H_kv, D]``, the cache holds token ``t`` of KV head ``h`` in row
    ``slot_t * H_kv + h``. Returns that view, the KV head of each query head ``[H_q, 1]`` and the
    offsets ``0 .. S-1`` of a block's slots. Half precision would round the fp32 weights, and a
    strided cache has no such rows: those return ``None`` and are copied instead.
    """
    if v_cache.dtype != torch.float32 or not v_cache.is_contiguous():
        return None
    S, h_kv, d = v_cache.shape[1:]
    heads = torch.arange(h_kv, device=v_cache.device).repeat_interleave(group)[:, None]
    return v_cache.view(-1, d), heads, torch.arange(S, device=v_cache.device)


def _weighted_values(probs: torch.Tensor, v_cache: torch.Tensor, ids: torch.Tensor, tokens: int,
                     v_buf: torch.Tensor | None, v_rows: tuple | None) -> torch.Tensor:
    """``probs [H_kv, G, tokens] @ V`` for one step's blocks ``ids``: ``[H_kv, G, D]`` in fp32.

    With ``v_rows``, ``embedding_bag`` computes the weighted sums straight from the cache: query
    head ``(h, g)`` is one bag of the step's ``tokens`` rows of KV head ``h``, weighted by
    ``probs[h, g]``. Without, the step's V is copied into ``v_buf``, upcast, and multiplied.
    """
    if v_rows is None:
        v = _copy_blocks(v_cache, ids, tokens, v_buf).float()          # [tokens, H_kv, D]
        return torch.bmm(probs, v.transpose(0, 1))
    rows_of, heads, offsets = v_rows
    h_kv = v_cache.shape[2]
    slots = (ids[:, None] * v_cache.shape[1] + offsets).flatten()[:tokens]
    sums = torch.nn.functional.embedding_bag(slots * h_kv + heads, rows_of, mode="sum",
                                             per_sample_weights=probs.view(-1, tokens))
    return sums.view(probs.shape[0], probs.shape[1], -1)
