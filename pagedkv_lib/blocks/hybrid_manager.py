"""A block manager for hybrid models: one block table per KV-cache group, one pool, one page size.

Hybrid models (Gemma 3, gpt-oss) mix full-attention layers, which read every earlier token,
with sliding-window layers, which read only the last ``W``. vLLM's hybrid KV cache manager
(``docs/design/hybrid_kv_cache_manager.md``) groups the layers so that every group has the
same number of layers (:func:`~pagedkv_lib.accounting.kv_cache_groups`) and so blocks of one
size; then

* **one block table per group.** A request of ``T`` tokens holds ``ceil(T / S)`` blocks in a
  full-attention group. A sliding-window group holds only the blocks the next token's window
  reaches (``None`` stands for a block it no longer holds, vLLM's null block):
  :func:`~pagedkv_lib.accounting.window_blocks`;
* **blocks that fall out of the window are freed**, at the end of the call that wrote the
  tokens (a prompt's prefill writes every block, then frees those behind the window); a freed
  full block stays cached, in the one LRU queue every group shares (:class:`~.pool.BlockPool`);
* **prefix caching per group.** A full block is cached under ``(group, chain key)``
  (:mod:`.block_hash`), so the same tokens are cached and evicted in each group on its own.
  A prompt's hit is the longest prefix that is a hit in every group: full attention scanned
  left to right, sliding window right to left, then intersected (:mod:`.hybrid_prefix_hits`);
  the block of the last prompt token is always computed.

Not here (the plain :class:`~.manager.BlockManager` has them): fork and copy-on-write.
Failing calls raise before changing anything, as there.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..accounting import blocks_needed, get_model, kv_cache_groups
from ..errors import OutOfBlocksError
from ..validation import check_int, check_token_ids
from .block_hash import BlockHashFn, chain_hashes, get_hash_fn
from .hashed_prefix_cache import HashedPrefixCache
from .hybrid_prefix_hits import full_attention_hit, longest_common_hit, sliding_window_hit
from .invariants import check_free_queue, require
from .manager import BlockManager
from .pool import BlockPool
from .request_arguments import check_flag, check_prompt


class _HybridRequest:
    """One live request: its tokens, the chain keys of its full blocks, and one table per group."""

    __slots__ = ("tokens", "keys", "tables", "salt")

    def __init__(self, tokens: list[int], keys: list, tables: list[list[int | None]], salt):
        self.tokens, self.keys, self.tables, self.salt = tokens, keys, tables, salt


class HybridBlockManager:
    """``num_blocks`` blocks of ``block_size`` tokens shared by KV-cache groups; ``windows[g]`` is group
    ``g``'s sliding window in tokens, or ``None`` for full attention (at least one group must be full)."""

    def __init__(self, num_blocks: int, block_size: int, windows: Sequence[int | None], *,
                 enable_prefix_caching: bool = True, hash_fn: str | BlockHashFn = "sha256"):
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        if isinstance(windows, (str, bytes)) or not isinstance(windows, Sequence):
            raise TypeError(f"windows must be a sequence with one entry per group (a window in tokens, or None "
                            f"for full attention), got {windows!r}")
        self.windows = tuple(None if w is None else check_int(f"windows[{g}]", w, minimum=1)
                             for g, w in enumerate(windows))
        if None not in self.windows:
            raise ValueError(f"windows must name at least one full-attention group (None), got {list(windows)!r}")
        self.enable_prefix_caching = check_flag("enable_prefix_caching", enable_prefix_caching)
        self._cache = HashedPrefixCache(self.num_blocks, get_hash_fn(hash_fn))
        self._pool = BlockPool(self.num_blocks, self._cache)
        self._requests: dict[str, _HybridRequest] = {}

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int = 16, **kwargs) -> HybridBlockManager:
        """A manager with ``model``'s groups (:func:`~pagedkv_lib.accounting.kv_cache_groups`): full ones first."""
        spec, groups = get_model(model), kv_cache_groups(model)
        windows = [None] * groups.full_groups + [spec.sliding_window] * groups.sliding_groups
        return cls(num_blocks, block_size, windows, **kwargs)

    # ----------------------------------------------------------------- the algorithm

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], *, salt=None) -> int:
        """Prefill a prompt in every group; return the prompt tokens served from the cache (a multiple of S)."""
        tokens = check_prompt(request_id, prompt_token_ids, salt, self._requests)
        S, T = self.block_size, len(tokens)
        keys = chain_hashes(tokens, S, salt=salt, hash_fn=self._cache.hash_fn) if self.enable_prefix_caching else []
        h = self._longest_hit(keys[:(T - 1) // S])
        hit_tables = [[self._cache.cached_block((g, keys[i])) if i >= self._first_kept(g, h * S) else None
                       for i in range(h)] for g in range(len(self.windows))]
        hits = [b for table in hit_tables for b in table if b is not None]
        need = len(self.windows) * (blocks_needed(T, S) - h)
        free = self._pool.num_free - [self._pool.ref_count(b) for b in hits].count(0)
        if need > free:
            raise OutOfBlocksError(f"request {request_id!r} needs {need} new blocks of {S} token slots in "
                                   f"{len(self.windows)} groups for its {T}-token prompt ({h} blocks from the "
                                   f"prefix cache), but only {free} of {self.num_blocks} blocks are free")
        self._pool.share(hits)  # first, so that take() cannot evict a block this prompt hits
        req = _HybridRequest(tokens, keys, [t + self._pool.take(blocks_needed(T, S) - h) for t in hit_tables], salt)
        self._name_full_blocks(req, h)
        self._drop_out_of_window(req)
        self._requests[request_id] = req
        return h * S

    def append_tokens(self, request_id: str, token_ids: Sequence[int]) -> None:
        """Write generated tokens in every group: new blocks as needed, full ones cached, old ones out of window freed."""
        req = self._request(request_id)
        new = check_token_ids("token_ids", token_ids)
        S, T = self.block_size, len(req.tokens)
        grow = blocks_needed(T + len(new), S) - blocks_needed(T, S)
        if grow * len(self.windows) > self._pool.num_free:
            raise OutOfBlocksError(f"request {request_id!r} needs {grow * len(self.windows)} new blocks to append "
                                   f"{len(new)} tokens to its {T}, but only {self._pool.num_free} are free")
        full = len(req.keys)
        req.tokens += new
        for table in req.tables:
            table += self._pool.take(grow)
        if self.enable_prefix_caching:
            req.keys += chain_hashes(req.tokens, S, salt=req.salt, hash_fn=self._cache.hash_fn, start=full,
                                     parent=req.keys[-1] if full else None)
        self._name_full_blocks(req, full)
        self._drop_out_of_window(req)

    def free(self, request_id: str) -> None:
        """Release every group's blocks, group by group, each table tail first."""
        req = self._request(request_id)
        del self._requests[request_id]
        for table in req.tables:
            self._pool.release([b for b in reversed(table) if b is not None])

    def _longest_hit(self, keys: list) -> int:
        """Blocks of the longest prefix cached in every group (full attention first, then each window)."""
        scans, cached = [], self._cache.cached_block
        for w in dict.fromkeys(self.windows):  # one scan per attention type, full (None) first
            groups = [g for g, gw in enumerate(self.windows) if gw == w]
            hit = lambda i, groups=groups: all(cached((g, keys[i])) is not None for g in groups)  # noqa: E731
            if w is None:
                scans.append(lambda limit, hit=hit: full_attention_hit(hit, limit))
            else:
                scans.append(lambda limit, hit=hit, w=w: sliding_window_hit(hit, limit, w, self.block_size))
        return longest_common_hit(scans, len(keys))

    def _first_kept(self, group: int, num_tokens: int) -> int:
        """The first block group ``group`` holds for a request of ``num_tokens`` tokens (0 for full attention)."""
        w = self.windows[group]
        return 0 if w is None else max(0, num_tokens - w + 1) // self.block_size

    def _name_full_blocks(self, req: _HybridRequest, start: int) -> None:
        """Cache blocks ``start ..`` that are full, in every group that still holds them."""
        for g, table in enumerate(req.tables):
            for i in range(start, len(req.keys)):
                if table[i] is not None:
                    self._cache.name_block(table[i], (g, req.keys[i]))

    def _drop_out_of_window(self, req: _HybridRequest) -> None:
        """Free, tail first, the blocks a sliding-window group holds behind the next token's window."""
        for g, table in enumerate(req.tables):
            stop = self._first_kept(g, len(req.tokens))
            dropped = [table[i] for i in range(stop - 1, -1, -1) if table[i] is not None]
            for i in range(stop):
                table[i] = None
            self._pool.release(dropped)

    # ----------------------------------------------------------------- queries (change nothing)

    # The plain manager's lookup and queries, shared as they are: they read only the pool, the request
    # map and each request's tokens and salt, so both managers answer (and refuse) alike.
    _request = BlockManager._request
    __contains__ = BlockManager.__contains__
    num_requests = BlockManager.num_requests
    num_free_blocks = BlockManager.num_free_blocks
    request_ids = BlockManager.request_ids
    token_ids = BlockManager.token_ids
    num_tokens = BlockManager.num_tokens
    salt = BlockManager.salt
    ref_count = BlockManager.ref_count
    free_queue = BlockManager.free_queue

    @property
    def prefix_cache(self) -> HashedPrefixCache:
        """The prefix cache every group shares, keyed by ``(group, chain key)``, for reading."""
        return self._cache

    def block_tables(self, request_id: str) -> list[list[int | None]]:
        """One table per group (copies); ``None`` where a sliding-window group holds no block."""
        return [list(t) for t in self._request(request_id).tables]

    def check_invariants(self) -> None:
        """Raise :class:`InvariantError` naming the first broken invariant (:func:`check_hybrid_manager`)."""
        check_hybrid_manager(self)


def check_hybrid_manager(bm: HybridBlockManager) -> None:
    """Raise :class:`InvariantError` naming the first invariant ``bm`` breaks (recomputed from scratch).

    * every group's table has ``ceil(T / S)`` entries; a full-attention group holds a block in
      each, a sliding-window group exactly from the first block the next token's window reaches;
    * no table holds a block twice, and only full (named) blocks are shared, through prefix hits;
    * a held full block is named by ``(group, chain key of its prefix)``, a partial one by nothing;
    * ref counts count the tables holding a block, which is free exactly when none does; a cached
      free block is one the cache serves (the plain manager's free-queue checks, :mod:`.invariants`).
    """
    S, cache, holders = bm.block_size, bm.prefix_cache, [0] * bm.num_blocks
    for rid, req in bm._requests.items():
        keys = chain_hashes(req.tokens, S, salt=req.salt, hash_fn=cache.hash_fn)
        mine: set[int] = set()
        for g, table in enumerate(req.tables):
            require(len(table) == blocks_needed(len(req.tokens), S), f"group {g} of {rid!r}: ceil(T/S) entries")
            first = bm._first_kept(g, len(req.tokens))
            for i, b in enumerate(table):
                require((b is None) == (i < first), f"group {g} of {rid!r} holds the wrong blocks of its window")
                if b is None:
                    continue
                require(b not in mine, f"block {b} is held twice by {rid!r}")
                name = cache.node_of(b)
                require(holders[b] == 0 or name is not None, f"partial block {b} is shared")
                mine.add(b)
                holders[b] += 1
                want = (g, keys[i]) if bm.enable_prefix_caching and i < len(keys) else None
                require(name == want, f"block {b} (group {g}, index {i} of {rid!r}) is named wrongly")
    check_free_queue(bm, holders)
