"""Hash-chained prefix caching, vLLM v1 style: the exact tree's job done with one dict from block key to block.

:class:`HashedPrefixCache` names the states of a full block by its chain key
(:mod:`.block_hash`): the hash of its parent's key, its tokens and, for block 0, the request's
salt. It holds

* ``_block_of``: key -> the cached physical block serving that key (at most one per key);
* ``_key_of``: block id -> the key of the states it holds (``None``: partly filled or free uncached).

It answers the same calls as the exact tree (:class:`~.prefix_cache.PrefixCache`), so the
same :class:`~.pool.BlockPool` (ref counts, the LRU queue of cached free blocks, eviction
from its front) and the same :class:`~.manager.BlockManager` algorithm run on top of it:
:class:`HashedBlockManager` only swaps the cache. Everything else stays vLLM's rules:
only full blocks are cached; a prompt walks its keys from the first block and stops at the
first miss; the block of the last prompt token is never served from the cache; a finished
request's blocks go back tail first, so its last blocks are evicted first.

What the chain gives and what it costs, against the tree:

* **The same hits and evictions while keys do not collide.** A key stands for the whole
  prefix, so a block computed again after its parent was evicted finds the blocks cached below
  it, as the tree's surviving nodes do, with no node kept for that (``tests/test_hashed_prefix_cache.py``
  checks both over random traces).
* **Constant-size keys that travel**: a key is 8 or 32 bytes whatever the prefix length, and
  another machine or a CPU tier computes the same key from the same tokens.
* **Wrong hits on a collision**: two prefixes whose keys collide are served each other's
  states, silently (the tree compares tokens and cannot). See :func:`~.block_hash.collision_probability`.

Memory: one entry per cached block and one key per block: at most ``num_blocks`` of each.
"""
from __future__ import annotations

from collections.abc import Iterable

from .block_hash import BlockHashFn, chain_hashes, chain_keys, get_hash_fn
from .invariants import check_free_queue, check_tables, require
from .manager import BlockManager
from .pool import BlockPool


class HashedPrefixCache:
    """Chain keys of full blocks, and the one cached block per key."""

    def __init__(self, num_blocks: int, hash_fn: BlockHashFn):
        self.hash_fn = hash_fn
        self._block_of: dict = {}                                # key -> cached block
        self._key_of: list = [None] * num_blocks                 # block id -> key of its states
        self.on_evict = None  # called with a key as its block is evicted (a lower tier can keep a copy)

    def __len__(self) -> int:
        """Keys the cache serves (one cached block each)."""
        return len(self._block_of)

    # ---------------------------------------------------------------- what the block manager calls

    def longest_prefix(self, token_blocks: Iterable[tuple], salt) -> tuple[list[int], object]:
        """The cached blocks of a prompt's first full blocks, up to the first miss, and the last hit's key."""
        hits, parent = [], None
        for key in chain_keys(self.hash_fn, token_blocks, salt):
            block = self._block_of.get(key)
            if block is None:
                break
            hits.append(block)
            parent = key
        return hits, parent

    def register(self, parent, token_blocks: Iterable[tuple], salt, blocks: Iterable[int]) -> None:
        """Key freshly computed full blocks: ``blocks[i]`` holds ``token_blocks[i]`` after ``parent``'s prefix.

        A block whose key no block serves becomes that key's cached block; otherwise it is a
        duplicate and stays uncached, but it keeps its key so that the request's chain goes on.
        """
        for b, key in zip(blocks, chain_keys(self.hash_fn, token_blocks, salt, parent)):
            self.name_block(b, key)

    def cached_block(self, key) -> int | None:
        """The block cached under ``key``, or None (a lookup by any key: the hybrid manager's ``(group, key)``)."""
        return self._block_of.get(key)

    def name_block(self, block: int, key) -> None:
        """``block`` holds the states named ``key``; it becomes their cached block unless one is cached already."""
        self._key_of[block] = key
        if key not in self._block_of:
            self._block_of[key] = block

    def node_of(self, block: int):
        """The key of the states ``block`` holds (None: partly filled or free uncached): the tree's node."""
        return self._key_of[block]

    def is_cached(self, block: int) -> bool:
        """Whether ``block`` is the block its key serves to prompts."""
        key = self._key_of[block]
        return key is not None and self._block_of.get(key) == block

    def freed(self, block: int) -> bool:
        """``block`` is free now; return whether it stays cached (cached free). A duplicate forgets its key."""
        if self.is_cached(block):
            return True
        self._key_of[block] = None
        return False

    def evict(self, block: int) -> None:
        """Cached free ``block`` is reused for other tokens: its key no longer serves anything."""
        key = self._key_of[block]
        del self._block_of[key]
        self._key_of[block] = None
        if self.on_evict is not None:
            self.on_evict(key)

    # ---------------------------------------------------------------- read-only view (invariants, tests)

    def cached_items(self) -> list[tuple[object, int]]:
        """``(key, block)`` for every cached block (a new list)."""
        return list(self._block_of.items())


class HashedBlockManager(BlockManager):
    """:class:`~.manager.BlockManager` with the hash-chained prefix cache in place of the exact tree.

    ``hash_fn`` is a name from :data:`~.block_hash.HASH_FUNCTIONS` (``"sha256"`` by default,
    vLLM's choice for multi-tenant use) or a callable ``fn(parent, tokens, extra) -> key``
    such as :func:`~.block_hash.truncated_hash`.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True,
                 hash_fn: str | BlockHashFn = "sha256"):
        super().__init__(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching)
        self._cache = HashedPrefixCache(self.num_blocks, get_hash_fn(hash_fn))  # fresh: nothing is cached yet
        self._pool = BlockPool(self.num_blocks, self._cache)

    @property
    def prefix_cache(self) -> HashedPrefixCache:
        """The hashed prefix cache, for reading (:meth:`HashedPrefixCache.cached_items`, ``node_of``)."""
        return self._cache

    def check_invariants(self) -> None:
        """The tables and free-queue invariants of :mod:`.invariants`, then the key invariants below."""
        check_hashed_manager(self)


def check_hashed_manager(bm: HashedBlockManager) -> None:
    """Raise :class:`InvariantError` naming the first invariant ``bm`` breaks.

    * tables hold ``ceil(T / S)`` distinct blocks, ref counts count holders, a block is free
      exactly when none holds it and cached free exactly when its key serves it (shared checks);
    * ``_block_of`` and ``_key_of`` agree: the block cached under a key holds that key;
    * every full block of a live request holds the chain key of exactly its own prefix and
      salt (recomputed from its tokens), and its partly filled last block holds none.
    """
    holders, _ = check_tables(bm)
    check_free_queue(bm, holders)
    cache = bm.prefix_cache
    for key, b in cache.cached_items():
        require(cache.node_of(b) == key, f"block {b} is cached under a key it does not hold")
    for rid in bm.request_ids():
        keys = chain_hashes(bm.token_ids(rid), bm.block_size, salt=bm.salt(rid), hash_fn=cache.hash_fn)
        for i, b in enumerate(bm.block_table(rid)):
            if i >= len(keys) or not bm.enable_prefix_caching:
                require(cache.node_of(b) is None, f"block {b} of {rid!r} is partly filled but holds a key")
            else:
                require(cache.node_of(b) == keys[i],
                        f"full block {b} at index {i} of {rid!r} does not hold the chain key of its prefix")
