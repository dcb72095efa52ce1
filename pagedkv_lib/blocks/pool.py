"""The physical block pool: ref counts and the free queue, evicting from the prefix cache on demand.

The pool owns ``num_blocks`` physical blocks. It alone changes ref counts. Every block is in
exactly one of three states:

* **used**: ``_ref_cnt[b] >= 1``, the number of block tables that hold it;
* **free, uncached**: ``_ref_cnt[b] == 0`` and ``b`` is on the stack ``_free``;
* **free, cached**: ``_ref_cnt[b] == 0``, the block still holds states the prefix cache can
  serve, and ``b`` is in the LRU queue ``_lru``, least recently freed first.

Allocation takes uncached free blocks first; only when none is left does it evict the front
of the LRU queue. A prefix hit on a cached free block takes it back out of the queue.

The LRU queue is an ``OrderedDict`` (a hash map over a doubly linked list, in C): removing a
block from the middle on a hit, appending on free and popping the front on eviction are O(1)
and never scan, the guarantees vLLM's block pool gets from an intrusive linked list.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from .prefix_cache import PrefixCache


class BlockPool:
    """Ref counts and the free queue of ``num_blocks`` blocks; ``cache`` says which free blocks stay cached.

    It never looks inside a block, so it does not know the block size. It does not check its
    callers' arguments: :class:`~pagedkv_lib.blocks.manager.BlockManager` does, and it calls
    :meth:`take` only after checking that enough blocks are free, so that a call that cannot
    succeed changes nothing.
    """

    def __init__(self, num_blocks: int, cache: PrefixCache):
        self.num_blocks = num_blocks
        self._cache = cache
        self._ref_cnt: list[int] = [0] * num_blocks                # block id -> block tables holding it
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # a stack: a fresh pool hands out 0, 1, 2, ...
        self._lru: OrderedDict[int, None] = OrderedDict()          # cached free blocks, front evicted first
        self.evictions = 0  # cached free blocks evicted from the prefix cache to be reused, ever
        self.allocated = 0  # blocks taken out of the free queue (by take() or by a prefix hit), ever
        self.freed = 0      # blocks whose ref count dropped to 0, ever

    @property
    def num_free(self) -> int:
        """Blocks an allocation can use now: uncached free plus cached free (evictable)."""
        return len(self._free) + len(self._lru)

    @property
    def num_cached_free(self) -> int:
        """Free blocks whose states the prefix cache still serves."""
        return len(self._lru)

    def ref_count(self, block: int) -> int:
        """Block tables holding ``block`` (0: it is free)."""
        return self._ref_cnt[block]

    def free_blocks(self) -> tuple[list[int], list[int]]:
        """``(uncached, cached)`` free blocks, each in the order allocation uses them (new lists)."""
        return self._free[::-1], list(self._lru)

    def take(self, n: int) -> list[int]:
        """Hand out ``n`` blocks with ref count 1: uncached free ones, then evicted cached ones (LRU first).

        Precondition (the caller checks it): ``n <= num_free``.
        """
        free, ref_cnt, taken = self._free, self._ref_cnt, []
        for _ in range(n):
            if free:
                b = free.pop()
            else:
                b = self._lru.popitem(last=False)[0]
                self._cache.evict(b)  # its states are about to be overwritten
                self.evictions += 1
            ref_cnt[b] = 1
            taken.append(b)
        self.allocated += n
        return taken

    def share(self, blocks: Iterable[int]) -> None:
        """One more block table holds each of ``blocks``; a cached free one leaves the free queue (a hit)."""
        for b in blocks:
            if self._ref_cnt[b] == 0:
                del self._lru[b]
                self.allocated += 1
            self._ref_cnt[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """One block table fewer holds each of ``blocks``, in the order given; unheld blocks become free.

        A block that became free joins the LRU queue if the prefix cache still serves it, else
        the free stack. The manager passes a table tail first, so its first blocks, the ones
        other prompts are most likely to hit, join the queue last and are evicted last.
        """
        ref_cnt = self._ref_cnt
        for b in blocks:
            ref_cnt[b] -= 1
            if ref_cnt[b] == 0:
                self.freed += 1
                if self._cache.freed(b):
                    self._lru[b] = None
                else:
                    self._free.append(b)
