"""One builder of random paged batches, for the tests, the benchmarks and the Code lesson.

A :class:`PagedBatch` holds the same logical K/V twice over: per request as contiguous tensors
(the spec's view), and scattered into a paged cache through shuffled physical block ids (the
kernel's view). Slots nobody owns (spare blocks, the tail of each last block) hold ``garbage``, so
a kernel that reads past a request's length shows it in the output. :meth:`PagedBatch.slots_read`
finds, by experiment, the slots a decode function's result depends on, and :meth:`PagedBatch.draw`
draws them over the cache.

    physical cache  [num_blocks, S, H_kv, D]       block table of request b
    block 0  |g g g g|   spare: garbage            [ 5, 2, -1 ]  (pad = -1)
    block 2  |k k g g|   b's 2nd block: 2 tokens,  T_b = S + 2
    block 5  |k k k k|   b's 1st block             slot of p = table[p // S] * S + p % S
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import torch

from ..accounting import blocks_needed

__all__ = ["PagedBatch", "random_paged_batch", "boundary_lengths"]


@dataclass
class PagedBatch:
    """A decode batch: one query token per request over a paged K/V cache.

    ``q [B, H_q, D]``; ``k_cache``, ``v_cache [num_blocks, S, H_kv, D]``; ``block_tables
    [B, max_blocks]`` padded with ``pad``; ``seq_lens [B]`` (tokens, int64); ``keys[b]``,
    ``values[b] [T_b, H_kv, D]``: request ``b``'s logical K/V, in the cache's dtype.
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    keys: list
    values: list

    @property
    def block_size(self) -> int:
        """Tokens per block, S."""
        return self.k_cache.shape[1]

    def args(self) -> tuple:
        """``(q, k_cache, v_cache, block_tables, seq_lens)``, the paged decode functions' arguments."""
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens

    def owned_blocks(self) -> list[list[int]]:
        """Physical block ids request ``b`` owns, in logical order (its first ⌈T_b / S⌉ table entries)."""
        S = self.block_size
        return [self.block_tables[b, : blocks_needed(int(t), S)].tolist() for b, t in enumerate(self.seq_lens)]

    def slot_owner(self) -> torch.Tensor:
        """``[num_blocks, S]`` int64: the request whose token each slot holds, ``-1`` where it holds garbage."""
        S = self.block_size
        owner = torch.full(self.k_cache.shape[:2], -1, dtype=torch.int64)
        for b, (ids, t) in enumerate(zip(self.owned_blocks(), self.seq_lens.tolist())):
            for j, block in enumerate(ids):
                owner[block, : min(S, t - j * S)] = b
        return owner

    def owned_slots(self) -> torch.Tensor:
        """``[num_blocks, S]`` bool: True where a slot holds some request's token (the rest is garbage)."""
        return self.slot_owner() >= 0

    def slots_read(self, decode: Callable, **kwargs) -> torch.Tensor:
        """``[B, num_blocks, S]`` bool: the slots whose K/V request ``b``'s output of ``decode`` depends on.

        Found by experiment, one slot at a time: change its K and V, rerun ``decode(*self.args(),
        **kwargs)``, restore it, and see whose output moved (NaN counts as a value). So it costs
        ``num_blocks * S`` calls: meant for small batches. A correct decode reads exactly
        ``slot_owner() == b`` for request ``b``; garbage it read and masked away leaves no trace.
        """
        base = decode(*self.args(), **kwargs)
        read = torch.zeros(len(self.seq_lens), *self.k_cache.shape[:2], dtype=torch.bool)
        for block, s in itertools.product(range(self.k_cache.shape[0]), range(self.block_size)):
            saved = [cache[block, s].clone() for cache in (self.k_cache, self.v_cache)]
            for cache in (self.k_cache, self.v_cache):
                cache[block, s] = torch.where(torch.isfinite(cache[block, s]), cache[block, s] + 1, 0.5)
            out = decode(*self.args(), **kwargs)
            for cache, old in zip((self.k_cache, self.v_cache), saved):
                cache[block, s] = old
            same = (out == base) | (torch.isnan(out) & torch.isnan(base))
            read[:, block, s] = ~same.flatten(1).all(1).cpu()
        return read

    def draw(self, read: torch.Tensor | None = None) -> str:
        """A text picture of the cache: one line per physical block, one letter per slot.

        Request ``b`` is letter ``b`` of the alphabet (``a`` for request 0); ``.`` is garbage. Given
        ``read`` (from :meth:`slots_read`), a slot its owner read is upper case (``A``), a slot its
        owner did not read stays lower case, and a slot read by a request that does not own it is ``!``.
        """
        owner = self.slot_owner()
        lines = [f"{_letter(b)}: T={t}, blocks {ids}"
                 for b, (t, ids) in enumerate(zip(self.seq_lens.tolist(), self.owned_blocks()))]
        for block in range(owner.shape[0]):
            cells = [_cell(int(owner[block, s]), None if read is None else read[:, block, s])
                     for s in range(owner.shape[1])]
            lines.append(f"block {block:3d} |{' '.join(cells)}|")
        return "\n".join(lines)


def _letter(owner: int) -> str:
    """Request ``owner``'s letter in :meth:`PagedBatch.draw` (``a`` for 0, ``#`` past 25); ``.`` for none."""
    return "." if owner < 0 else chr(97 + owner) if owner < 26 else "#"


def _cell(owner: int, readers: torch.Tensor | None) -> str:
    """One slot of :meth:`PagedBatch.draw`: its owner's letter, upper case if the owner read it."""
    letter = _letter(owner)
    if readers is None:
        return letter
    strangers = readers.clone()
    if owner >= 0:
        strangers[owner] = False
    if strangers.any():
        return "!"
    return letter.upper() if owner >= 0 and bool(readers[owner]) else letter


def boundary_lengths(block_size: int) -> list[int]:
    """Lengths where off-by-one bugs live: T = 1 and T mod S = 0, 1 and S - 1 (tokens)."""
    S = block_size
    return sorted({1, S, S + 1, 2 * S - 1, 3 * S, 5 * S + 1, 7 * S - 1} - {0})


def random_paged_batch(lens, *, block_size: int = 16, num_kv_heads: int = 2, group: int = 2,
                       head_dim: int = 16, dtype: torch.dtype = torch.float32, device: str = "cpu",
                       spare_blocks: int = 3, extra_columns: int = 1, shuffle: bool = True,
                       garbage: float = float("nan"), table_dtype: torch.dtype = torch.int64,
                       pad: int = -1, seed: int = 0) -> PagedBatch:
    """A random decode batch with ``lens[b]`` tokens per request, paged into blocks of ``block_size``.

    Physical ids are a random permutation (``shuffle=False`` lays requests' blocks out in order,
    to measure what paging itself costs); ``spare_blocks`` blocks belong to nobody; each table
    row has ``extra_columns`` padding entries past its longest request. Every unowned slot holds
    ``garbage`` (NaN by default; pass ``0.0`` for a clean cache). ``group`` query heads share each
    of the ``num_kv_heads`` KV heads.
    """
    gen = torch.Generator().manual_seed(seed)
    lens = [int(t) for t in lens]
    S = block_size
    need = [blocks_needed(t, S) for t in lens]
    num_blocks = sum(need) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen) if shuffle else torch.arange(num_blocks)
    tables = torch.full((len(lens), max(need, default=0) + extra_columns), pad, dtype=table_dtype)
    shape = (num_blocks, S, num_kv_heads, head_dim)
    k_cache = torch.full(shape, garbage, dtype=dtype)
    v_cache = torch.full(shape, garbage, dtype=dtype)
    keys, values, start = [], [], 0
    for b, (t, n) in enumerate(zip(lens, need)):
        tables[b, :n] = order[start : start + n].to(table_dtype)
        start += n
        k = torch.randn(t, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(t, num_kv_heads, head_dim, generator=gen).to(dtype)
        pos = torch.arange(t)
        slots = tables[b, pos // S].long() * S + pos % S
        k_cache.view(-1, num_kv_heads, head_dim)[slots] = k
        v_cache.view(-1, num_kv_heads, head_dim)[slots] = v
        keys.append(k.to(device))
        values.append(v.to(device))
    q = torch.randn(len(lens), num_kv_heads * group, head_dim, generator=gen).to(dtype)
    return PagedBatch(q.to(device), k_cache.to(device), v_cache.to(device), tables.to(device),
                      torch.tensor(lens, dtype=torch.int64, device=device), keys, values)
