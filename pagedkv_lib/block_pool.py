"""The physical block pool: ref counts, the free queue, and the prefix cache's hash map.

A pool owns ``num_blocks`` physical blocks of ``block_size`` token slots each. Every block is
in exactly one of three states:

* **used**: ``ref_cnt[b] >= 1``; that many block tables hold it;
* **free, uncached**: ``ref_cnt[b] == 0`` and ``b`` is on the free stack ``_free``;
* **free, cached**: ``ref_cnt[b] == 0``, the block still holds a full block of token states
  that the prefix cache can find by hash, and ``b`` is in the LRU queue ``_lru``.

Allocation takes uncached free blocks first; only when none is left does it evict the least
recently freed cached block (dropping its hash) and reuse it. A prefix-cache hit on a cached
free block takes it back out of the LRU queue.

The LRU queue is an ``OrderedDict`` keyed by block id: it is a hash map over a doubly linked
list (implemented in C), so removing a block from the middle on a hit, appending on free and
popping the oldest on eviction are all O(1) and never scan. vLLM's block pool gets the same
O(1) guarantees from an intrusive linked list through its block objects. Uncached free blocks
never need removal from the middle, so a plain list used as a stack is enough for them.

Hashes. A full block's hash is ``hash(key)`` with ``key = (parent_hash, token_ids, salt)``:
``parent_hash`` is the previous block's hash (``None`` for the first block), so the hash of
block ``i`` depends on every token before it. ``cached`` maps hash -> block id, and
``block_key[b]`` keeps the key itself: a lookup compares keys, so a block whose own hash merely
collides with the asked one is a miss. A wrong hit would need two different prefixes whose
chained 64-bit hashes collide. Python's built-in ``hash`` is fast but not collision-resistant
against an adversary; vLLM offers SHA-256 block hashes where tenants do not trust each other.
"""
from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """``num_blocks`` physical blocks with ref counts and a prefix cache.

    The pool never looks inside a block, so it does not know the block size; whether prefix
    caching is on is the manager's business too (with it off, the manager registers no hashes).

    The pool does not check its callers' arguments: :class:`pagedkv_lib.allocator.BlockManager`
    does, and it calls :meth:`take` only after checking that enough blocks are free, so that
    an allocation that cannot succeed changes nothing.
    """

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref_cnt: list[int] = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.block_key: list[tuple | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        # Reversed so that a fresh pool hands out blocks 0, 1, 2, ... (readable block tables).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0   # cached free blocks whose hash was dropped to reuse them
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

    def take(self, n: int) -> list[int]:
        """Hand out ``n`` blocks with ref count 1, uncached ones first, then evicting LRU cached ones.

        Precondition (the caller checks it): ``n <= self.num_free``.
        """
        free, ref = self._free, self.ref_cnt
        if n == 1:  # a decode step that crossed into a new block
            if free:
                b = free.pop()
            else:  # evict the least recently freed cached block, dropping its hash
                b = self._lru.popitem(last=False)[0]
                del self.cached[self.block_hash[b]]
                self.block_hash[b] = self.block_key[b] = None
                self.evictions += 1
            ref[b] = 1
            self.allocated += 1
            return [b]
        if n <= len(free):
            taken = free[:-n - 1:-1]  # the next n pops, in pop order
            del free[len(free) - n:]
        else:
            taken = free[::-1]
            free.clear()
            # Evict the least recently freed cached blocks (LRU first), dropping their hashes.
            lru_pop, cached, block_hash, block_key = self._lru.popitem, self.cached, self.block_hash, self.block_key
            evict = n - len(taken)
            for _ in range(evict):
                b = lru_pop(last=False)[0]
                del cached[block_hash[b]]
                block_hash[b] = block_key[b] = None
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

    def register(self, hashes: list[int], keys: list[tuple], blocks: list[int]) -> None:
        """Cache each full block ``blocks[i]`` under ``hashes[i]`` unless that hash already names a block.

        A duplicate (two requests computed the same block) stays uncached: the hash map holds
        one block per hash, and the duplicate goes back to the uncached free stack when freed.
        """
        cached, block_hash, block_key = self.cached, self.block_hash, self.block_key
        for h, key, b in zip(hashes, keys, blocks):
            if cached.setdefault(h, b) == b:
                block_hash[b] = h
                block_key[b] = key

    def release(self, blocks) -> int:
        """Drop one reference to each block, in the order given; return how many became free.

        Callers pass a request's table tail first, so its prefix blocks join the LRU queue
        last and are evicted last.
        """
        ref, free, lru, hashes = self.ref_cnt, self._free, self._lru, self.block_hash
        freed = 0
        for b in blocks:
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                freed += 1
                if hashes[b] is None:
                    free.append(b)
                else:
                    lru[b] = None
        self.freed += freed
        return freed

    def free_blocks(self) -> tuple[list[int], list[int]]:
        """(uncached free blocks, cached free blocks least recently freed first), as new lists."""
        return list(self._free), list(self._lru)
