"""Faster CPU versions of the paged decode spec in :mod:`pagedkv_lib.attention`, tested equal to it.

Same contracts, same checks and messages, same results to :data:`~pagedkv_lib.attention.TOLERANCES`
(``tests/test_attention_fast.py`` checks each against the spec on random batches). What they
change is how torch touches memory; each trick is kept only while a same-process A/B run shows
it faster than the spec (``benchmarks/attention_variants.py``, figures in ``benchmarks/RESULTS.md``):

* **reused buffers**: a request's (or a step's) blocks are copied with ``index_select`` into one
  buffer allocated per call, instead of a fresh tensor per request, which costs page faults;
* **strided views instead of copies**: the matmuls read the gathered ``[T, H_kv, D]`` K and V
  through permuted views (``K.permute(1, 2, 0)`` is ``[H_kv, D, T]``), which BLAS multiplies in
  place; the spec's ``einsum`` may first make a permuted copy.

Tried and dropped, for want of a clear gain: reading V in place with ``embedding_bag`` in the
online walk (the benchmark keeps it as ``online_bag``, to rerun the A/B).
"""
from __future__ import annotations

import torch

from ._checks import check_int
from .accounting import blocks_needed
from .attention_checks import check_decode_inputs, check_scale

__all__ = ["paged_decode_gather_fast", "paged_decode_online_fast"]


def paged_decode_gather_fast(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                             seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """:func:`~pagedkv_lib.attention.paged_decode_gather`, with buffers sized for the longest request, reused."""
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
    """:func:`~pagedkv_lib.attention.paged_decode_online`, each step copied into one reused buffer.

    Extra memory is ``step_blocks`` blocks of K and of V. The default (4 MiB each at 8 KV heads x
    128 x fp32 x 16 tokens) keeps a step inside a CPU's last-level cache, so the matmuls reread
    what the copy just wrote instead of going back to DRAM.
    """
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    step = check_int("step_blocks", step_blocks, minimum=1)
    k_buf, v_buf = (cache.new_empty(step, *cache.shape[1:]) for cache in (k_cache, v_cache))
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, num_tokens in enumerate(lens.tolist()):
        out[b] = _online_one(q[b], k_cache, v_cache, tables[b], num_tokens, scale, step, k_buf, v_buf)
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
                v_buf: torch.Tensor) -> torch.Tensor:
    """The spec's online walk for one request (``m``, ``l``, ``acc``), with in-place updates and buffers."""
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
        v = _copy_blocks(v_cache, ids, tokens, v_buf).float()
        s = torch.bmm(qg, k.permute(1, 2, 0))                          # [H_kv, G, tokens]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        rescale = torch.exp(m - m_new)
        p = s.sub_(m_new).exp_()
        l.mul_(rescale).add_(p.sum(-1, keepdim=True))
        acc.mul_(rescale).add_(torch.bmm(p, v.transpose(0, 1)))
        m = m_new
    return (acc / l).view(h_q, d)
