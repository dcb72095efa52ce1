"""The physical block pool: ref counts, the free queue, and the prefix cache it evicts from.

A pool owns ``num_blocks`` physical blocks of ``block_size`` token slots each. Every block is
in exactly one of three states:

* **used**: ``ref_cnt[b] >= 1``; that many block tables hold it;
* **free, uncached**: ``ref_cnt[b] == 0`` and ``b`` is on the free stack ``_free``;
* **free, cached**: ``ref_cnt[b] == 0``, the block still holds a full block of token states
  that the prefix cache (:mod:`pagedkv_lib.blocks.prefix_cache`) can find, and ``b`` is in the LRU
  queue ``_lru``.

Allocation takes uncached free blocks first; only when none is left does it evict the least
recently freed cached block (dropping it from the prefix cache) and reuse it. A prefix-cache
hit on a cached free block takes it back out of the LRU queue.

The LRU queue is an ``OrderedDict`` keyed by block id: it is a hash map over a doubly linked
list (implemented in C), so removing a block from the middle on a hit, appending on free and
popping the oldest on eviction are all O(1) and never scan. vLLM's block pool gets the same
O(1) guarantees from an intrusive linked list through its block objects. Uncached free blocks
never need removal from the middle, so a plain list used as a stack is enough for them.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from .prefix_cache import PrefixCache


class BlockPool:
    """``num_blocks`` physical blocks with ref counts, a free queue and a prefix cache.

    The pool never looks inside a block, so it does not know the block size; whether prefix
    caching is on is the manager's business too (with it off, the manager registers nothing).

    The pool does not check its callers' arguments: :class:`pagedkv_lib.blocks.manager.BlockManager`
    does, and it calls :meth:`take` only after checking that enough blocks are free, so that
    an allocation that cannot succeed changes nothing.
    """

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref_cnt: list[int] = [0] * num_blocks
        self.cache = PrefixCache(num_blocks)
        # Reversed so that a fresh pool hands out blocks 0, 1, 2, ... (readable block tables).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0   # cached free blocks dropped from the prefix cache to reuse them
        self.allocated = 0   # blocks taken out of the free queue (by take() or a hit), ever
        self.freed = 0       # blocks whose ref count dropped to 0, ever

    @property
    def num_free(self) -> int:
        """Blocks an allocation can use now: uncached free plus cached free (evictable)."""
        return len(self._free) + len(self._lru)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still hold cached token states (evicted last, LRU first)."""
        return len(self._lru)

    def count_free(self, blocks: list[int]) -> int:
        """How many of ``blocks`` are free now (cached free blocks that a prefix hit would revive)."""
        ref = self.ref_cnt
        return [ref[b] for b in blocks].count(0)

    def take(self, n: int) -> list[int]:
        """Hand out ``n`` blocks with ref count 1, uncached ones first, then evicting LRU cached ones.

        Precondition (the caller checks it): ``n <= self.num_free``.
        """
        free, ref = self._free, self.ref_cnt
        # Slices, not a pop per block: that cost admission ~10% (benchmarks/allocator.py).
        if n <= len(free):
            taken = free[:-n - 1:-1]  # the top n of the uncached stack, in pop order
            del free[len(free) - n:]
        else:  # every uncached block, then evict the least recently freed cached ones
            taken = free[::-1]
            free.clear()
            evict, pop, forget = n - len(taken), self._lru.popitem, self.cache.forget
            for _ in range(evict):
                b = pop(last=False)[0]
                forget(b)  # its token states are about to be overwritten
                taken.append(b)
            self.evictions += evict
        for b in taken:
            ref[b] = 1
        self.allocated += n
        return taken

    def hit(self, blocks: list[int]) -> None:
        """A request maps cached ``blocks``: take free ones out of the free queue, bump every ref count."""
        ref, lru = self.ref_cnt, self._lru
        for b in blocks:
            if ref[b] == 0:
                del lru[b]
                self.allocated += 1
            ref[b] += 1

    def release(self, blocks: Iterable[int]) -> int:
        """Drop one reference to each block, in the order given; return how many became free.

        Callers pass a request's table tail first, so its prefix blocks join the LRU queue
        last and are evicted last. A block that became free joins the LRU queue if the prefix
        cache holds it, else the free stack.
        """
        ref, free, lru, key = self.ref_cnt, self._free, self._lru, self.cache.key
        freed = 0
        for b in blocks:
            remaining = ref[b] - 1
            ref[b] = remaining
            if remaining == 0:
                freed += 1
                if key[b] is None:
                    free.append(b)
                else:
                    lru[b] = None
        self.freed += freed
        return freed

    def free_blocks(self) -> tuple[list[int], list[int]]:
        """(uncached free blocks, cached free blocks least recently freed first), as new lists."""
        return list(self._free), list(self._lru)
