"""A paged block manager: block tables, prefix caching, fork with copy-on-write, slot mapping.

Each request (a sequence of token ids) owns a *block table*: the physical blocks that hold its
KV states in logical order. Position ``p`` lives in slot ``p % S`` of block ``table[p // S]``,
so its flat slot in the cache is ``table[p // S] * S + p % S`` (``S`` = block size in tokens).
A request holds exactly ``ceil(T / S)`` blocks for its ``T`` tokens; only the last one can be
partly empty.

Semantics follow vLLM's v1 KV cache manager (see :mod:`pagedkv_lib.block_pool` for the pool):

* **Prefix caching.** Every *full* block is cached under a key that names the block before it
  by identity, its own token ids and an optional ``salt`` (a tenant or adapter id: requests
  with different salts never share; see :func:`pagedkv_lib._checks.check_salt` for the types
  allowed). So a hit is exact: it serves states computed after the very same tokens (see
  :mod:`pagedkv_lib.prefix_cache`). A new prompt walks the keys from its first block and
  reuses cached blocks up to the first miss. The last prompt token is never served from the
  cache, because the model must compute its logits to sample the next token: a prompt of ``T``
  tokens can reuse at most ``(T - 1) // S`` blocks, so a prompt that is exactly one cached
  block long reuses nothing.
* **Fork** (parallel sampling, beam search): the child maps every block of the parent,
  including a partly filled last block, by bumping ref counts.
* **Copy-on-write.** Appending into a partly filled last block that another table also holds
  first copies it into a fresh block. :meth:`BlockManager.append_tokens` returns the copies as
  ``(src, dst)`` block pairs so that an attention layer can copy the K/V states of ``src`` into
  ``dst`` before it writes the new tokens. Full blocks are never written again, so sharing
  them needs no copy.
* **Freeing** releases a table tail first, so that a request's prefix blocks, the ones other
  requests are most likely to hit, are evicted last.
* **Atomic failure.** A call that needs more blocks than are free (cached free blocks count:
  they are evicted on demand) raises :class:`~pagedkv_lib.errors.OutOfBlocksError` before it
  changes anything. So does every bad argument (``TypeError``/``ValueError``).

Ledger figures (:meth:`BlockManager.stats`) use the subject page's symbols ``T``, ``R`` and
``W``; :mod:`pagedkv_lib.allocator_stats` says where they differ from the teaching ledger.

Public methods check their arguments, then call an unchecked core (``_admit``, ``_grow``).
An append that lands in a non-full, unshared last block (most decode steps) touches no block
structure: it extends the request's token list and bumps a counter.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ._checks import (check_int, check_int_array, check_new_id, check_salt, check_token_ids,
                      unhashable_id_error)
from .accounting import blocks_needed
from .allocator_invariants import check_manager
from .allocator_stats import AllocatorStats
from .block_pool import BlockPool
from .errors import (DuplicateRequestError, InvariantError, OutOfBlocksError,  # noqa: F401 (re-exported)
                     UnknownRequestError)
from .prefix_cache import full_blocks
from .slot_mapping import padded_tables, slot_mapping_batch, table_slots  # noqa: F401 (slot_mapping_batch re-exported)


class _Request:
    """One live request: its block table, its token ids, and where its prefix-cache chain stands.

    Invariant: ``len(table) == ceil(len(tokens) / S)``; only the last block can be partly filled.
    """

    __slots__ = ("table", "tokens", "salt", "parent", "chained")

    def __init__(self, table: list[int], tokens: list[int], salt, parent: int | None, chained: int):
        self.table = table        # physical block ids, logical order
        self.tokens = tokens      # every token id so far (T = len(tokens))
        self.salt = salt
        self.parent = parent      # prefix-cache id naming full block chained - 1 (None: chain root)
        self.chained = chained    # full blocks offered to the prefix cache so far (0 with caching off)


class BlockManager:
    """Maps requests' token sequences onto a pool of ``num_blocks`` blocks of ``block_size`` slots."""

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True):
        num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        block_size = check_int("block_size", block_size, minimum=1)
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be True or False, got {enable_prefix_caching!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._pool = BlockPool(num_blocks)
        self._cache = self._pool.cache
        self._ref = self._pool.ref_cnt
        self._seqs: dict[str, _Request] = {}
        # Running totals, so stats() is O(1); check_invariants() recomputes them from scratch.
        self._logical = 0      # T_logical: sum of T over live requests (tokens)
        self._saved = 0        # T_shared_saved = T_logical - T_unique, T_unique = filled slots of used blocks
        self._queries = 0      # prompt tokens admitted
        self._hit_tokens = 0   # of which served from the prefix cache
        self._cow = 0          # copy-on-write block copies

    # ----------------------------------------------------------------- lifecycle

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], *,
                    salt: str | bytes | int | tuple | None = None) -> int:
        """Allocate blocks for a whole prompt; return how many prompt tokens came from the cache.

        The count is a multiple of ``block_size`` and always ``< len(prompt)`` (the last prompt
        token is computed, see the module doc). Raises ``OutOfBlocksError`` and changes nothing
        if the pool cannot hold the prompt even after evicting cached free blocks.
        """
        check_new_id("request_id", request_id, self._seqs)
        tokens = check_token_ids("prompt_token_ids", prompt_token_ids)
        if not tokens:
            raise ValueError(f"prompt_token_ids must hold at least one token, got an empty prompt "
                             f"for request {request_id!r}")
        if salt is not None:
            check_salt("salt", salt)
        return self._admit(request_id, list(tokens) if tokens is prompt_token_ids else tokens, salt)

    def _admit(self, request_id: str, tokens: list[int], salt) -> int:
        """Look up the cached prefix, check room, take blocks, register the new full blocks."""
        S, T, pool = self.block_size, len(tokens), self._pool
        full = full_blocks(tokens, S, 0, T // S) if self.enable_prefix_caching else []
        # The last prompt token is computed, never served from the cache: at most (T - 1) // S hits.
        hits, parent = self._cache.longest_prefix(full[:(T - 1) // S], salt)
        k = len(hits)
        need = blocks_needed(T, S) - k
        revived = pool.count_free(hits)  # cached free blocks the hits take back out of the free queue
        if need > pool.num_free - revived:
            raise OutOfBlocksError(
                f"request {request_id!r} needs {need} new blocks of {S} token slots for its {T}-token "
                f"prompt ({k} blocks from the prefix cache), but only {pool.num_free - revived} "
                f"of {self.num_blocks} blocks are free")
        # Nothing below can fail. Hits first: a cached free block they revive leaves the free
        # queue before take() could evict it.
        pool.hit(hits)
        table = hits + pool.take(need)
        parent = self._cache.register(parent, full[k:], salt, table[k:len(full)])
        self._seqs[request_id] = _Request(table, tokens, salt, parent, len(full))
        self._queries += T
        self._hit_tokens += k * S
        self._logical += T
        self._saved += (k - revived) * S  # hits on free blocks bring their states back to life
        return k * S

    def append_tokens(self, request_id: str, token_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Append generated tokens; return the copy-on-write ``(src, dst)`` block pairs, in order.

        New blocks are allocated when the tokens overflow the last block, and a partly filled last
        block that another table also holds is first copied into a fresh block (copy-on-write).
        Raises ``OutOfBlocksError`` and changes nothing if the blocks it needs are not free.
        """
        # This runs on every decode step, so the edge checks are written out for its usual
        # argument, one plain token id in a list: the two calls this saves were about 10% of the
        # allocator's time in benchmarks/allocator.py (benchmarks/RESULTS.md, 2026-12-01).
        try:
            seq = self._seqs[request_id]
        except KeyError:
            raise self._unknown(request_id) from None
        except TypeError:  # an unhashable id, such as a list
            raise unhashable_id_error("request_id", request_id) from None
        if type(token_ids) is list and len(token_ids) == 1 and type(token_ids[0]) is int and token_ids[0] >= 0:
            new = token_ids
        else:
            new = check_token_ids("token_ids", token_ids)
        T, n, table = len(seq.tokens), len(new), seq.table
        # Most decode steps: the tokens fit in the last block without filling it (the table holds
        # ceil(T / S) blocks, so that is T + n < S * len(table)) and no other table holds that
        # block. T_logical and T_unique both grow by n, so T_shared_saved stays.
        if T + n < self.block_size * len(table) and self._ref[table[-1]] == 1:
            seq.tokens.extend(new)
            self._logical += n
            return []
        return self._grow(request_id, seq, new) if n else []

    def _grow(self, request_id: str, seq: _Request, new: Sequence[int]) -> list[tuple[int, int]]:
        """Every other append: new blocks, copy-on-write, and caching the blocks that became full."""
        S, pool, table, tokens, n = self.block_size, self._pool, seq.table, seq.tokens, len(new)
        T = len(tokens)
        need, cow = self._append_need(seq, n)
        if need > pool.num_free:
            raise OutOfBlocksError(
                f"request {request_id!r} needs {need} new blocks of {S} token slots to append {n} "
                f"tokens to its {T}, but only {pool.num_free} of {self.num_blocks} blocks are free")
        fresh = pool.take(need)
        pairs = []
        if cow:  # invariant relied on: only a partly filled last block is ever written
            src, dst = table[-1], fresh.pop(0)
            self._ref[src] -= 1  # stays >= 1: another table still holds src
            table[-1] = dst
            pairs.append((src, dst))
            self._cow += 1
            self._saved -= T % S  # the copied states are now stored twice
        table += fresh
        tokens.extend(new)
        self._logical += n
        full = (T + n) // S
        if self.enable_prefix_caching and full > seq.chained:
            seq.parent = self._cache.register(seq.parent, full_blocks(tokens, S, seq.chained, full),
                                              seq.salt, table[seq.chained:full])
            seq.chained = full
        return pairs

    def fork(self, parent_id: str, child_id: str) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares every block (never allocates)."""
        parent = self._seq(parent_id, "parent_id")
        check_new_id("child_id", child_id, self._seqs)
        for b in parent.table:
            self._ref[b] += 1
        self._seqs[child_id] = _Request(list(parent.table), list(parent.tokens), parent.salt,
                                        parent.parent, parent.chained)
        self._logical += len(parent.tokens)
        self._saved += len(parent.tokens)

    def free(self, request_id: str) -> None:
        """Release a request's blocks, tail first; blocks no other table holds become free."""
        try:
            seq = self._seqs.pop(request_id, None)
        except TypeError:
            raise unhashable_id_error("request_id", request_id) from None
        if seq is None:
            raise self._unknown(request_id)
        S, table, T = self.block_size, seq.table, len(seq.tokens)
        empty_slots = S * len(table) - T  # unfilled slots of the last block
        last_freed = self._ref[table[-1]] == 1
        freed = self._pool.release(reversed(table))
        freed_states = freed * S - (empty_slots if last_freed else 0)
        self._logical -= T
        self._saved -= T - freed_states

    # ----------------------------------------------------------------- queries

    def __contains__(self, request_id) -> bool:
        try:
            return request_id in self._seqs
        except TypeError:
            raise unhashable_id_error("request_id", request_id) from None

    @property
    def num_requests(self) -> int:
        """Live requests (added or forked, not yet freed)."""
        return len(self._seqs)

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
        return self._append_need(seq, n)[0] <= self._pool.num_free

    def _append_need(self, seq: _Request, n: int) -> tuple[int, bool]:
        """``(need, cow)`` for appending ``n`` tokens: new blocks to take, and whether the last is copied.

        ``cow``: the last block is partly filled and another table holds it, so writing into it
        first copies it into a fresh block. ``need = cow + ceil((T + n) / S) - len(table)``.
        """
        T, S = len(seq.tokens), self.block_size
        cow = n > 0 and T % S > 0 and self._ref[seq.table[-1]] > 1
        return cow + blocks_needed(T + n, S) - len(seq.table), cow

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

    # ----------------------------------------------------------------- helpers

    def _seq(self, request_id, name: str = "request_id") -> _Request:
        """The live request ``request_id``, or a clear error naming the argument ``name``."""
        try:
            return self._seqs[request_id]
        except KeyError:
            raise self._unknown(request_id, name) from None
        except TypeError:  # an unhashable id, such as a list
            raise unhashable_id_error(name, request_id) from None

    def _unknown(self, request_id, name: str = "request_id") -> UnknownRequestError:
        return UnknownRequestError(f"{name} {request_id!r} is not a live request (never added, or already "
                                   f"freed); {len(self._seqs)} requests are live")
