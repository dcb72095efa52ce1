"""A paged block manager: block tables, prefix caching, fork with copy-on-write, slot mapping.

Each request (a sequence of token ids) owns a *block table*: the physical blocks that hold its
K/V states in logical order. Position ``p`` lives in slot ``p % S`` of block ``table[p // S]``,
flat slot ``table[p // S] * S + p % S`` of the cache (``S`` = block size in tokens). A request
of ``T`` tokens holds exactly ``ceil(T / S)`` blocks; only the last one can be partly filled.

Semantics follow vLLM's v1 KV cache manager:

* **Prefix caching.** Every *full* block is named in the prefix cache by its whole prefix and
  the request's ``salt`` (:mod:`.prefix_cache`), so a hit is exact. A new prompt walks its full
  blocks from the first and reuses cached ones up to the first miss. The last prompt token is
  never served from the cache (the model must compute its logits): a prompt of ``T`` tokens
  reuses at most ``(T - 1) // S`` blocks.
* **Fork** (parallel sampling, beam search): the child maps every block of the parent,
  the partly filled last one too.
* **Copy-on-write.** Appending into a partly filled last block that another table also holds
  first moves the request onto a fresh copy. :meth:`BlockManager.append_tokens` returns the
  copies as ``(src, dst)`` pairs, so that the attention layer copies the K/V states of ``src``
  into ``dst`` before it writes. Full blocks are never written again, so sharing them is safe.
* **Free** releases a table tail first, so that prefix blocks are evicted last; a freed block
  the prefix cache serves stays *cached free* until allocation needs it (:mod:`.pool`).
* **Atomic failure.** A call that needs more blocks than are free (cached free blocks count:
  they are evicted on demand) raises :class:`~pagedkv_lib.errors.OutOfBlocksError`, and a bad
  argument ``TypeError``/``ValueError``, before anything changes.

Public methods check their arguments once, at the top; the rest of the class trusts them.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..accounting import blocks_needed
from ..errors import OutOfBlocksError, UnknownRequestError
from ..validation import check_int, check_int_array, check_new_id, check_token_ids, unhashable_id_error
from .invariants import check_manager
from .pool import BlockPool
from .prefix_cache import PrefixCache, full_blocks
from .request_arguments import check_flag, check_prompt
from .slot_mapping import padded_tables, table_slots
from .stats import AllocatorStats


class _Request:
    """One live request: ``len(table) == ceil(len(tokens) / S)``, and (with prefix caching on) every full
    block is in the prefix cache."""

    __slots__ = ("table", "tokens", "salt")

    def __init__(self, table: list[int], tokens: list[int], salt):
        self.table = table    # physical block ids, in logical order
        self.tokens = tokens  # every token id so far (T = len(tokens))
        self.salt = salt      # the prefix-cache salt (a fork inherits it)


class BlockManager:
    """Maps requests' token sequences onto ``num_blocks`` physical blocks of ``block_size`` token slots.

    State: ``_requests`` (request id -> its block table, tokens and salt, in the order added),
    ``_pool`` (ref counts and the free queue), ``_cache`` (the prefix cache, which the pool
    evicts from), and three event counters for :meth:`stats`.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True):
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.enable_prefix_caching = check_flag("enable_prefix_caching", enable_prefix_caching)
        self._requests: dict[str, _Request] = {}
        self._cache = PrefixCache(self.num_blocks)
        self._pool = BlockPool(self.num_blocks, self._cache)
        self._prompt_tokens = 0  # prompt tokens admitted, ever
        self._hit_tokens = 0     # of which served from the prefix cache
        self._cow_copies = 0     # copy-on-write block copies, ever

    # ----------------------------------------------------------------- the algorithm

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], *,
                    salt: str | bytes | int | tuple | None = None) -> int:
        """Allocate blocks for a whole prompt; return how many prompt tokens came from the prefix cache.

        The count is a multiple of ``block_size`` and always ``< len(prompt)``. ``salt`` (None,
        str, bytes, int or a tuple of these) separates tenants: different salts never share.
        """
        tokens = check_prompt(request_id, prompt_token_ids, salt, self._requests)
        S, T = self.block_size, len(tokens)
        full = full_blocks(tokens, S, 0, T // S) if self.enable_prefix_caching else []
        hits, node = self._cache.longest_prefix(full[:(T - 1) // S], salt)  # the last token is computed
        need = blocks_needed(T, S) - len(hits)
        free = self._pool.num_free - [self._pool.ref_count(b) for b in hits].count(0)  # hits revive cached free blocks
        if need > free:
            raise OutOfBlocksError(f"request {request_id!r} needs {need} new blocks of {S} token slots for its "
                                   f"{T}-token prompt ({len(hits)} from the prefix cache), but only {free} "
                                   f"of {self.num_blocks} blocks are free")
        self._pool.share(hits)  # first, so that take() cannot evict a block this prompt hits
        table = hits + self._pool.take(need)
        self._cache.register(node, full[len(hits):], salt, table[len(hits):len(full)])
        self._requests[request_id] = _Request(table, tokens, salt)
        self._prompt_tokens += T
        self._hit_tokens += len(hits) * S
        return len(hits) * S

    def append_tokens(self, request_id: str, token_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Append generated tokens; return the copy-on-write ``(src, dst)`` block pairs (at most one).

        Allocates a block each time the tokens overflow the last one, and first copies a partly
        filled last block that another table also holds. Blocks that become full are cached.
        """
        req = self._request(request_id)
        new = check_token_ids("token_ids", token_ids)
        copy, grow = self._append_blocks(req, len(new))
        pairs = self._take_append_blocks(request_id, req, copy, grow, len(new)) if copy or grow else []
        full = len(req.tokens) // self.block_size  # full blocks before: all of them cached already
        req.tokens += new
        if self.enable_prefix_caching and len(req.tokens) // self.block_size > full:
            self._cache_full_blocks(req, full)
        return pairs

    def fork(self, parent_id: str, child_id: str) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares every block (allocates nothing)."""
        parent = self._request(parent_id, "parent_id")
        check_new_id("child_id", child_id, self._requests)
        self._pool.share(parent.table)
        self._requests[child_id] = _Request(list(parent.table), list(parent.tokens), parent.salt)

    def free(self, request_id: str) -> None:
        """Release a request's blocks, tail first; a block no other table holds becomes free."""
        req = self._request(request_id)
        del self._requests[request_id]
        self._pool.release(reversed(req.table))

    def _append_blocks(self, req: _Request, n: int) -> tuple[bool, int]:
        """The append rule: (copy the last block first?, blocks to add) for ``n`` more tokens.

        A partly filled last block that another table holds is copied before it is written;
        then the request needs ``ceil((T + n) / S)`` blocks in all.
        """
        T, S = len(req.tokens), self.block_size
        copy = n > 0 and T % S > 0 and self._pool.ref_count(req.table[-1]) > 1
        return copy, blocks_needed(T + n, S) - len(req.table)

    def _take_append_blocks(self, request_id: str, req: _Request, copy: bool, grow: int, n: int) -> list:
        """Take the blocks the append rule asks for (or raise, changing nothing); return the copy pairs."""
        if copy + grow > self._pool.num_free:
            raise OutOfBlocksError(f"request {request_id!r} needs {copy + grow} new blocks of {self.block_size} "
                                   f"token slots to append {n} tokens to its {len(req.tokens)}, but only "
                                   f"{self._pool.num_free} of {self.num_blocks} blocks are free")
        pairs = []
        if copy:
            src, dst = req.table[-1], self._pool.take(1)[0]
            self._pool.release([src])  # another table still holds it
            req.table[-1] = dst
            pairs.append((src, dst))
            self._cow_copies += 1
        req.table += self._pool.take(grow)
        return pairs

    def _cache_full_blocks(self, req: _Request, start: int) -> None:
        """Register the blocks ``start ..`` of ``req`` that are full now (blocks before ``start`` are cached)."""
        stop = len(req.tokens) // self.block_size
        parent = self._cache.node_of(req.table[start - 1]) if start else None
        self._cache.register(parent, full_blocks(req.tokens, self.block_size, start, stop), req.salt,
                             req.table[start:stop])

    def _request(self, request_id, name: str = "request_id") -> _Request:
        """The live request ``request_id``, or a clear error naming the argument ``name``."""
        try:
            return self._requests[request_id]
        except KeyError:
            raise UnknownRequestError(f"{name} {request_id!r} is not a live request (never added, or already "
                                      f"freed); {len(self._requests)} requests are live") from None
        except TypeError:  # an unhashable id, such as a list
            raise unhashable_id_error(name, request_id) from None

    # ----------------------------------------------------------------- queries (change nothing)

    def __contains__(self, request_id) -> bool:
        try:
            return request_id in self._requests
        except TypeError:
            raise unhashable_id_error("request_id", request_id) from None

    @property
    def num_requests(self) -> int:
        """Live requests (added or forked, not yet freed)."""
        return len(self._requests)

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation could use now (free uncached plus cached free, which are evictable)."""
        return self._pool.num_free

    @property
    def prefix_cache(self) -> PrefixCache:
        """The prefix cache, for reading (:meth:`PrefixCache.nodes`, :meth:`PrefixCache.node_of`)."""
        return self._cache

    def request_ids(self) -> list[str]:
        """Ids of the live requests, in the order they were added or forked (a new list)."""
        return list(self._requests)

    def block_table(self, request_id: str) -> list[int]:
        """The request's physical block ids in logical order (a copy)."""
        return list(self._request(request_id).table)

    def token_ids(self, request_id: str) -> list[int]:
        """The request's token ids so far (a copy)."""
        return list(self._request(request_id).tokens)

    def num_tokens(self, request_id: str) -> int:
        """``T``: tokens the request holds (prompt plus appended)."""
        return len(self._request(request_id).tokens)

    def salt(self, request_id: str):
        """The prefix-cache salt the request was added with (a fork inherits its parent's)."""
        return self._request(request_id).salt

    def ref_count(self, block_id: int) -> int:
        """How many block tables hold physical block ``block_id`` (0: it is free)."""
        return self._pool.ref_count(check_int("block_id", block_id, minimum=0, maximum=self.num_blocks - 1))

    def free_queue(self) -> tuple[list[int], list[int]]:
        """Free block ids in the order allocation uses them: ``(uncached, cached)``, cached ones LRU first."""
        return self._pool.free_blocks()

    def can_append(self, request_id: str, num_tokens: int = 1) -> bool:
        """Whether appending ``num_tokens`` tokens would succeed now (copy-on-write included)."""
        req = self._request(request_id)
        copy, grow = self._append_blocks(req, check_int("num_tokens", num_tokens, minimum=0))
        return copy + grow <= self._pool.num_free

    def slot_mapping(self, request_id: str, positions) -> np.ndarray:
        """Flat cache slots (int64) of ``positions`` (token positions in ``[0, T)``) of one request."""
        req = self._request(request_id)
        pos = check_int_array("positions", positions)
        T = len(req.tokens)
        if pos.size and (pos.min() < 0 or pos.max() >= T):
            bad = pos[(pos < 0) | (pos >= T)][0]
            raise ValueError(f"positions must lie in [0, {T - 1}] for request {request_id!r} "
                             f"({T} tokens), got {bad}")
        return table_slots(req.table, pos, self.block_size)

    def padded_block_tables(self, request_ids: Sequence[str], pad: int = -1) -> np.ndarray:
        """Block tables of ``request_ids`` as one int64 array ``(len(request_ids), max blocks)``.

        Short rows are filled with ``pad``, which must be negative so that no real block id can
        be mistaken for padding: the layout :func:`slot_mapping_batch` and batched kernels read.
        """
        pad = check_int("pad", pad, maximum=-1)
        if isinstance(request_ids, (str, bytes)) or not isinstance(request_ids, Iterable):
            raise TypeError(f"request_ids must be a sequence of request ids (e.g. a list of str), got "
                            f"{request_ids!r} ({type(request_ids).__name__})")
        return padded_tables([self._request(r).table for r in request_ids], pad)

    def stats(self) -> AllocatorStats:
        """Counts and ledger figures, computed from the current state (O(live requests))."""
        S, pool = self.block_size, self._pool
        used = self.num_blocks - pool.num_free
        # Slack: the empty slots of partly filled last blocks, each block once (forks share them).
        empty = {r.table[-1]: S * len(r.table) - len(r.tokens) for r in self._requests.values()}
        slack = sum(empty.values())
        return AllocatorStats(
            num_blocks=self.num_blocks, block_size=S, num_requests=len(self._requests),
            used_blocks=used, free_blocks=pool.num_free, cached_free_blocks=pool.num_cached_free,
            prefix_queries_tokens=self._prompt_tokens, prefix_hit_tokens=self._hit_tokens,
            cow_copies=self._cow_copies, evictions=pool.evictions, blocks_allocated=pool.allocated,
            blocks_freed=pool.freed, logical_tokens=sum(len(r.tokens) for r in self._requests.values()),
            unique_tokens=S * used - slack, reserved_slots=S * used, slack=slack)

    def check_invariants(self) -> None:
        """Recompute every invariant from the public views; raise ``InvariantError`` on the first broken one."""
        check_manager(self)
