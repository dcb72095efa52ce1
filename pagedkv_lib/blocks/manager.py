"""A paged block manager: block tables, prefix caching, fork with copy-on-write, slot mapping.

Each request (a sequence of token ids) owns a *block table*: the physical blocks that hold its
KV states in logical order. Position ``p`` lives in slot ``p % S`` of block ``table[p // S]``,
so its flat slot in the cache is ``table[p // S] * S + p % S`` (``S`` = block size in tokens).
A request holds exactly ``ceil(T / S)`` blocks for its ``T`` tokens; only the last one can be
partly empty.

Semantics follow vLLM's v1 KV cache manager (see :mod:`pagedkv_lib.blocks.pool` for the pool):

* **Prefix caching.** Every *full* block is cached under a key that names the block before it
  by identity, its own token ids and an optional ``salt`` (a tenant or adapter id: requests
  with different salts never share; see :func:`pagedkv_lib.validation.check_salt` for the types
  allowed). So a hit is exact: it serves states computed after the very same tokens (see
  :mod:`pagedkv_lib.blocks.prefix_cache`). A new prompt walks the keys from its first block and
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
``W``; :mod:`pagedkv_lib.blocks.stats` says where they differ from the teaching ledger.

Public methods check their arguments, then call an unchecked core (``_admit``, ``_grow``).
An append that lands in a non-full, unshared last block (most decode steps) touches no block
structure: it extends the request's token list and bumps a counter.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..validation import check_int, check_new_id, check_salt, check_token_ids, unhashable_id_error
from ..accounting import blocks_needed
from .queries import BlockManagerQueries
from .pool import BlockPool
from ..errors import (DuplicateRequestError, InvariantError, OutOfBlocksError,  # noqa: F401 (re-exported)
                     UnknownRequestError)
from .prefix_cache import full_blocks
from .slot_mapping import slot_mapping_batch  # noqa: F401 (re-exported)


class _Request:
    """One live request: its block table, its token ids, and where its prefix-cache chain stands.

    Invariants: ``len(table) == ceil(len(tokens) / S)``; only the last block can be partly filled.
    ``cap`` is 0 or ``S * len(table)``; an append that keeps ``T < cap`` writes into a partly filled
    last block that no other table holds (``append_tokens``'s fast path). Fork sets it to 0, which
    sends the next append through ``_grow``, and ``_grow`` sets it again.
    """

    __slots__ = ("table", "tokens", "salt", "parent", "chained", "cap")

    def __init__(self, table: list[int], tokens: list[int], salt, parent: int | None, chained: int,
                 cap: int):
        self.table = table        # physical block ids, logical order
        self.tokens = tokens      # every token id so far (T = len(tokens))
        self.salt = salt
        self.parent = parent      # prefix-cache id naming full block chained - 1 (None: chain root)
        self.chained = chained    # full blocks offered to the prefix cache so far (0 with caching off)
        self.cap = cap            # slots an append may fill without a block change (0: ask _grow)


class BlockManager(BlockManagerQueries):
    """Maps requests' token sequences onto a pool of ``num_blocks`` blocks of ``block_size`` slots.

    This class holds what changes the state; what only reads it (tables, counts, slot mapping,
    stats, invariants) is inherited from :class:`pagedkv_lib.blocks.queries.BlockManagerQueries`.
    """

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
        # With caching off nothing is looked up or registered (the `if`s below skip empty calls,
        # about 6% of an admission).
        full, hits, parent = [], [], None
        if self.enable_prefix_caching:
            full = full_blocks(tokens, S, 0, T // S)
            # The last prompt token is computed, never served from the cache: at most (T - 1) // S hits.
            hits, parent = self._cache.longest_prefix(full[:(T - 1) // S], salt)
        k = len(hits)
        need = blocks_needed(T, S) - k
        revived = pool.count_free(hits) if hits else 0  # cached free blocks the hits take out of the free queue
        if need > pool.num_free - revived:
            raise OutOfBlocksError(
                f"request {request_id!r} needs {need} new blocks of {S} token slots for its {T}-token "
                f"prompt ({k} blocks from the prefix cache), but only {pool.num_free - revived} "
                f"of {self.num_blocks} blocks are free")
        # Nothing below can fail. Hits first: a cached free block they revive leaves the free
        # queue before take() could evict it.
        if hits:
            pool.hit(hits)
        table = hits + pool.take(need)
        if full:
            parent = self._cache.register(parent, full[k:], salt, table[k:len(full)])
        # The last block is always a fresh one (k <= (T - 1) // S < ceil(T / S)): ours alone.
        self._seqs[request_id] = _Request(table, tokens, salt, parent, len(full), S * len(table))
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
        tokens, n = seq.tokens, len(new)
        # Most decode steps: the tokens fit in the last block without filling it, and no other
        # table holds that block (both are what T + n < seq.cap says). T_logical and T_unique
        # both grow by n, so T_shared_saved stays.
        if len(tokens) + n < seq.cap:
            tokens.extend(new)
            self._logical += n
            return []
        return self._grow(request_id, seq, new) if n else []

    def _grow(self, request_id: str, seq: _Request, new: Sequence[int]) -> list[tuple[int, int]]:
        """Every other append: new blocks, copy-on-write, and caching the blocks that became full."""
        S, pool, table, tokens, n = self.block_size, self._pool, seq.table, seq.tokens, len(new)
        T = len(tokens)
        # can_append's rule, written out here: a shared helper cost the sharing simulation ~3%
        # (benchmarks/RESULTS.md, 2026-12-01); tests hold can_append to what this does.
        cow = T % S > 0 and self._ref[table[-1]] > 1
        need = cow + (T + n + S - 1) // S - len(table)
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
        seq.cap = S * len(table)  # the last block is ours alone now: fresh, copied, or no longer shared
        return pairs

    def fork(self, parent_id: str, child_id: str) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares every block (never allocates)."""
        parent = self._seq(parent_id, "parent_id")
        check_new_id("child_id", child_id, self._seqs)
        for b in parent.table:
            self._ref[b] += 1
        parent.cap = 0  # the last block is shared now: the next append of either goes through _grow
        self._seqs[child_id] = _Request(list(parent.table), list(parent.tokens), parent.salt,
                                        parent.parent, parent.chained, 0)
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
