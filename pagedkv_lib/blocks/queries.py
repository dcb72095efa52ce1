"""What a :class:`~pagedkv_lib.blocks.manager.BlockManager` can be asked without changing it.

Block tables, token counts, ref counts, the free queue, slot mapping, the ledger figures and the
invariant check. Kept apart from :mod:`pagedkv_lib.blocks.manager`, so that module reads as the
algorithm alone (admit, append, fork, free); ``BlockManager`` inherits these methods.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..validation import check_int, check_int_array, unhashable_id_error
from ..accounting import blocks_needed
from .invariants import check_manager
from .stats import AllocatorStats
from .slot_mapping import padded_tables, table_slots


class BlockManagerQueries:
    """Read-only methods over a block manager's state (``_seqs``, ``_pool`` and its running totals)."""

    def __contains__(self, request_id) -> bool:
        try:
            return request_id in self._seqs
        except TypeError:
            raise unhashable_id_error("request_id", request_id) from None

    @property
    def num_requests(self) -> int:
        """Live requests (added or forked, not yet freed)."""
        return len(self._seqs)

    def request_ids(self) -> list[str]:
        """Ids of the live requests, in the order they were added or forked (a new list)."""
        return list(self._seqs)

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation could use now (free uncached plus cached free, which are evictable)."""
        return self._pool.num_free

    def block_table(self, request_id: str) -> list[int]:
        """The request's physical block ids in logical order (a copy)."""
        return list(self._seq(request_id).table)

    def num_tokens(self, request_id: str) -> int:
        """``T``: tokens the request holds (prompt plus appended)."""
        return len(self._seq(request_id).tokens)

    def ref_count(self, block_id: int) -> int:
        """How many block tables hold physical block ``block_id`` (0: it is free)."""
        return self._ref[check_int("block_id", block_id, minimum=0, maximum=self.num_blocks - 1)]

    def free_queue(self) -> tuple[list[int], list[int]]:
        """Free block ids in the order allocation will use them: ``(uncached, cached)``.

        Uncached free blocks go first; then cached free blocks, least recently freed first
        (each of those is evicted from the prefix cache when it is reused).
        """
        uncached, cached = self._pool.free_blocks()
        return uncached[::-1], cached

    def token_ids(self, request_id: str) -> list[int]:
        """The request's token ids so far (a copy)."""
        return list(self._seq(request_id).tokens)

    def can_append(self, request_id: str, num_tokens: int = 1) -> bool:
        """Whether appending ``num_tokens`` tokens would succeed now (copy-on-write included)."""
        seq = self._seq(request_id)
        n = check_int("num_tokens", num_tokens, minimum=0)
        T, S = len(seq.tokens), self.block_size
        # new blocks: the last one copied first when it is partly filled and shared (copy-on-write),
        # then ceil((T + n) / S) - len(table) more; _grow takes exactly these
        cow = n > 0 and T % S > 0 and self._ref[seq.table[-1]] > 1
        return cow + blocks_needed(T + n, S) - len(seq.table) <= self._pool.num_free

    def slot_mapping(self, request_id: str, positions) -> np.ndarray:
        """Flat cache slots (int64) of ``positions`` (token positions in ``[0, T)``) of one request."""
        seq = self._seq(request_id)
        pos = check_int_array("positions", positions)
        T = len(seq.tokens)
        if pos.size and (pos.min() < 0 or pos.max() >= T):
            bad = pos[(pos < 0) | (pos >= T)][0]
            raise ValueError(f"positions must lie in [0, {T - 1}] for request {request_id!r} "
                             f"({T} tokens), got {bad}")
        return table_slots(seq.table, pos, self.block_size)

    def padded_block_tables(self, request_ids: Sequence[str], pad: int = -1) -> np.ndarray:
        """Block tables of ``request_ids`` as one int64 array ``(len(request_ids), max blocks)``.

        Rows shorter than the longest are filled with ``pad``, which must be negative so that no
        real block id (``0 .. num_blocks - 1``) can be mistaken for padding; this is the layout
        :func:`slot_mapping_batch` and batched attention kernels read.
        """
        pad = check_int("pad", pad, maximum=-1)
        if isinstance(request_ids, (str, bytes)) or not isinstance(request_ids, Iterable):
            raise TypeError(f"request_ids must be a sequence of request ids (e.g. a list of str), got "
                            f"{request_ids!r} ({type(request_ids).__name__})")
        return padded_tables([self._seq(r).table for r in request_ids], pad)

    def stats(self) -> AllocatorStats:
        """Counts and ledger figures of the current state (O(1): kept as running totals)."""
        pool = self._pool
        used = self.num_blocks - pool.num_free
        reserved = used * self.block_size
        unique = self._logical - self._saved
        return AllocatorStats(
            num_blocks=self.num_blocks, block_size=self.block_size, num_requests=len(self._seqs),
            used_blocks=used, free_blocks=pool.num_free, cached_free_blocks=pool.num_cached_free,
            prefix_queries_tokens=self._queries, prefix_hit_tokens=self._hit_tokens,
            cow_copies=self._cow, evictions=pool.evictions, blocks_allocated=pool.allocated,
            blocks_freed=pool.freed, logical_tokens=self._logical,
            unique_tokens=unique, reserved_slots=reserved, slack=reserved - unique)

    def check_invariants(self) -> None:
        """Recompute everything from the block tables and raise ``InvariantError`` on a mismatch."""
        check_manager(self)
