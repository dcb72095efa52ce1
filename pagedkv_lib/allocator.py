"""A paged block manager: block tables, prefix caching, fork with copy-on-write, slot mapping.

Each request (a sequence of token ids) owns a *block table*: the physical blocks that hold its
KV states in logical order. Position ``p`` lives in slot ``p % S`` of block ``table[p // S]``,
so its flat slot in the cache is ``table[p // S] * S + p % S`` (``S`` = block size in tokens).
A request holds exactly ``ceil(T / S)`` blocks for its ``T`` tokens; only the last one can be
partly empty.

Semantics follow vLLM's v1 KV cache manager (see :mod:`pagedkv_lib.block_pool` for the pool):

* **Prefix caching.** Every *full* block gets a hash chained from its parent block's hash, its
  token ids and an optional ``salt`` (a tenant or adapter id: requests with different salts
  never share). A salt is ``None``, a ``str``, ``bytes``, an ``int`` (not a ``bool``) or a tuple
  of these: values of other types, such as ``1.0`` or ``True``, compare equal to a different
  salt (``1 == 1.0 == True``) and would share cache entries with it, so they are refused. A new
  prompt walks its chain from the first block and reuses cached blocks up to the first miss. The last prompt token is never served from the cache, because the model
  must compute its logits to sample the next token: a prompt of ``T`` tokens can reuse at most
  ``(T - 1) // S`` blocks, so a prompt that is exactly one cached block long reuses nothing.
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

Ledger figures (:meth:`BlockManager.stats`) use the subject page's symbols: logical tokens
``sum_i T_i``; unique tokens = token states physically stored (a block shared by several
tables counts once; a copy-on-write copy counts again); reserved slots ``R = S * used_blocks``;
slack ``W = R - unique``. They equal :func:`pagedkv_lib.ledger.allocate`'s figures when every
shared prefix fills whole blocks. When a shared prefix ends inside a block they differ: the
ledger stores the prefix once, while this manager (like vLLM) shares only full blocks, so each
further member stores the ``prefix % S`` tokens of the partial block again (a cache miss for a
prompt, a copy-on-write for a fork).

Cost: an append that lands in a non-full, unshared last block (most decode steps) touches no
block structure: it checks the tokens, extends the request's token list and bumps a counter.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .block_pool import BlockPool
from ._checks import check_int, check_ints, check_new_id, unhashable_id_error
from .errors import (DuplicateRequestError, InvariantError, OutOfBlocksError,  # noqa: F401 (re-exported)
                     UnknownRequestError)
from .ledger import ledger_summary


@dataclass(frozen=True)
class AllocatorStats:
    """A snapshot of a :class:`BlockManager`. Blocks in blocks, tokens in tokens, slots in token slots.

    ``prefix_*``, ``cow_copies``, ``evictions`` and ``blocks_allocated``/``blocks_freed`` count
    since the manager was made (``blocks_allocated`` counts every block taken out of the free
    queue, including cached free blocks a prefix hit brings back); the rest describe the state now.
    """

    num_blocks: int
    block_size: int
    num_requests: int
    used_blocks: int
    free_blocks: int
    cached_free_blocks: int
    prefix_queries_tokens: int
    prefix_hit_tokens: int
    cow_copies: int
    evictions: int
    blocks_allocated: int
    blocks_freed: int
    logical_tokens: int
    unique_tokens: int
    reserved_slots: int
    slack: int

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache per prompt token admitted (0.0 before any)."""
        return self.prefix_hit_tokens / self.prefix_queries_tokens if self.prefix_queries_tokens else 0.0

    def summary(self) -> dict[str, int]:
        """The four ledger figures under the names :meth:`pagedkv_lib.ledger.Ledger.summary` uses."""
        return ledger_summary(self.logical_tokens, self.unique_tokens, self.reserved_slots, self.slack)


class _Seq:
    """One live request: its block table, its token ids, and where its hash chain stands."""

    __slots__ = ("table", "tokens", "salt", "last_hash", "num_hashed", "cap")

    def __init__(self, table, tokens, salt, last_hash, num_hashed, cap):
        self.table: list[int] = table          # physical block ids, logical order
        self.tokens: list[int] = tokens        # every token id so far (T = len(tokens))
        self.salt = salt
        self.last_hash: int | None = last_hash  # hash of block num_hashed - 1 (None: chain root)
        self.num_hashed: int = num_hashed       # full blocks whose hash is computed
        # S * len(table), or 0 when another table may hold a partly filled last block (0 is always
        # safe: it only sends appends down the slow path, which checks ref counts and sets cap
        # again). An append of n tokens with T + n < cap writes into the last block alone; a full
        # last block (T == cap) may be shared through a prefix hit, but it is never written.
        self.cap: int = cap


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
        self._seqs: dict[str, _Seq] = {}
        # Running totals, so stats() is O(1); check_invariants() recomputes them from scratch.
        self._ref = self._pool.ref_cnt
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
        tokens = _token_list("prompt_token_ids", prompt_token_ids)
        if tokens is prompt_token_ids:
            tokens = list(tokens)  # our own copy: appends extend it
        T = len(tokens)
        if not T:
            raise ValueError(f"prompt_token_ids must hold at least one token, got an empty prompt "
                             f"for request {request_id!r}")
        if salt is not None and type(salt) not in _SALT_TYPES:
            _check_salt("salt", salt)
        S, pool = self.block_size, self._pool
        full = T // S
        hits, hashes, keys, h = [], [], [], None
        if self.enable_prefix_caching and full:
            # One pass: walk the hash chain while it hits (at most (T - 1) // S blocks: the last
            # token is computed), then hash the remaining full blocks for registration. Each
            # block's key tuple is built and hashed once and serves the lookup and the cache.
            toks = tuple(tokens)
            cached_get, block_key = pool.cached.get, pool.block_key
            hit = hits.append
            stop = (T - 1) // S * S
            for a in range(0, stop, S):
                key = (h, toks[a:a + S], salt)
                kh = hash(key)
                b = cached_get(kh)
                if b is None or block_key[b] != key:  # a miss (a mere hash collision is one too)
                    keys.append(key)
                    hashes.append(kh)
                    h = kh
                    a += S
                    break
                hit(b)
                h = kh
            else:
                a = stop
            for a in range(a, full * S, S):
                key = (h, toks[a:a + S], salt)
                h = hash(key)
                keys.append(key)
                hashes.append(h)
        k = len(hits)
        revived = list(map(pool.ref_cnt.__getitem__, hits)).count(0) if k else 0  # hits on cached *free* blocks
        need = -(-T // S) - k
        if need > pool.num_free - revived:
            raise OutOfBlocksError(
                f"request {request_id!r} needs {need} new blocks of {S} token slots for its {T}-token "
                f"prompt ({k} blocks from the prefix cache), but only {pool.num_free - revived} "
                f"of {self.num_blocks} blocks are free")
        # Nothing below can fail.
        if k:
            pool.hit(hits)
            table = hits + pool.take(need)
        else:
            table = pool.take(need)
        if hashes:
            pool.register(hashes, keys, table[k:full])
        self._seqs[request_id] = _Seq(table, tokens, salt, h, full if self.enable_prefix_caching else 0,
                                      len(table) * S)  # the last block is new: no one else holds it
        hit_tokens = k * S
        self._queries += T
        self._hit_tokens += hit_tokens
        self._logical += T
        self._saved += hit_tokens - revived * S  # hits on free blocks bring their states back to life
        return hit_tokens

    def append_tokens(self, request_id: str, token_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Append generated tokens; return the copy-on-write ``(src, dst)`` block pairs, in order.

        New blocks are allocated when the tokens overflow the last block, and a partly filled last
        block that another table also holds is first copied into a fresh block (copy-on-write).
        Raises ``OutOfBlocksError`` and changes nothing if the blocks it needs are not free.
        """
        try:
            seq = self._seqs.get(request_id)
        except TypeError:  # an unhashable id; costs nothing when no exception is raised
            raise unhashable_id_error("request_id", request_id) from None
        if seq is None:
            raise self._unknown(request_id)
        if type(token_ids) is list:  # the common case, checked inline (a call costs more)
            for t in token_ids:
                if type(t) is not int or t < 0:  # rare: numpy scalars to convert, or a bad id
                    token_ids = _token_list("token_ids", token_ids)
                    break
            new = token_ids
        else:
            new = _token_list("token_ids", token_ids)
        n = len(new)
        # Hot path: the tokens fit in the last block without filling it, and no one else holds it
        # (seq.cap is 0 when someone might). T_logical and T_unique both grow by n, so
        # T_shared_saved stays.
        tokens = seq.tokens
        if len(tokens) + n < seq.cap:
            tokens.extend(new)
            self._logical += n
            return []
        return self._append_slow(request_id, seq, new) if n else []

    def _append_slow(self, request_id: str, seq: _Seq, new: list[int]) -> list[tuple[int, int]]:
        """Every other append: new blocks, copy-on-write, and hashing the blocks that became full."""
        S, pool, table, tokens, n = self.block_size, self._pool, seq.table, seq.tokens, len(new)
        T, ref = len(tokens), pool.ref_cnt
        filled_last = T % S  # tokens in a partly filled last block (0: the last block is full)
        cow = filled_last > 0 and ref[table[-1]] > 1
        need = -(-(T + n) // S) - len(table) + cow
        if need:
            if need > pool.num_free:
                raise OutOfBlocksError(
                    f"request {request_id!r} needs {need} new blocks of {S} token slots to append {n} "
                    f"tokens to its {T}, but only {pool.num_free} of {self.num_blocks} blocks are free")
            fresh = pool.take(need)
        pairs = []
        if cow:  # invariant relied on: only a partly filled last block is ever written
            src, dst = table[-1], fresh.pop(0)
            ref[src] -= 1  # stays >= 1: another table still holds src
            table[-1] = dst
            pairs.append((src, dst))
            self._cow += 1
            self._saved -= filled_last  # the copied states are now stored twice
        if need > cow:
            table.extend(fresh)
        tokens.extend(new)
        self._logical += n
        full = (T + n) // S
        if full > seq.num_hashed and self.enable_prefix_caching:
            # Hash the blocks that just became full and offer them to the cache (BlockPool.register
            # inlined: this runs once per block that decoding fills).
            cached, block_hash, block_key = pool.cached, pool.block_hash, pool.block_key
            h, salt = seq.last_hash, seq.salt
            for a in range(seq.num_hashed * S, full * S, S):
                key = (h, tuple(tokens[a:a + S]), salt)
                h = hash(key)
                b = table[a // S]
                if cached.setdefault(h, b) == b:
                    block_hash[b] = h
                    block_key[b] = key
            seq.last_hash, seq.num_hashed = h, full
        seq.cap = len(table) * S if ref[table[-1]] == 1 else 0
        return pairs

    def fork(self, parent_id: str, child_id: str) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares every block (never allocates)."""
        parent = self._seq(parent_id, "parent_id")
        check_new_id("child_id", child_id, self._seqs)
        ref = self._pool.ref_cnt
        for b in parent.table:
            ref[b] += 1
        # Both now share the last block: cap 0 sends their next appends down the slow path.
        parent.cap = 0
        self._seqs[child_id] = _Seq(list(parent.table), list(parent.tokens), parent.salt,
                                    parent.last_hash, parent.num_hashed, 0)
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
        last_filled = T - (len(table) - 1) * S
        last_freed = self._pool.ref_cnt[table[-1]] == 1
        freed = self._pool.release(reversed(table))
        freed_states = freed * S - (S - last_filled if last_freed else 0)
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
        return self._pool.ref_cnt[check_int("block_id", block_id, minimum=0, maximum=self.num_blocks - 1)]

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

    def _append_need(self, seq: _Seq, n: int) -> tuple[int, bool]:
        """``(need, cow)`` for appending ``n`` tokens: new blocks to take, and whether the last is copied.

        ``cow``: the last block is partly filled and another table holds it, so writing into it
        first copies it into a fresh block. ``need = cow + ceil((T + n) / S) - len(table)``.
        """
        T, S = len(seq.tokens), self.block_size
        cow = n > 0 and T % S > 0 and self._pool.ref_cnt[seq.table[-1]] > 1
        return -(-(T + n) // S) - len(seq.table) + cow, cow

    def slot_mapping(self, request_id: str, positions) -> np.ndarray:
        """Flat cache slots (int64) of ``positions`` (token positions in ``[0, T)``) of one request."""
        seq = self._seq(request_id)
        pos = _int_array("positions", positions)
        T = len(seq.tokens)
        if pos.size and (pos.min() < 0 or pos.max() >= T):
            bad = pos[(pos < 0) | (pos >= T)][0]
            raise ValueError(f"positions must lie in [0, {T - 1}] for request {request_id!r} "
                             f"({T} tokens), got {bad}")
        table = np.asarray(seq.table, dtype=np.int64)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

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
        seqs = [self._seq(r) for r in request_ids]
        width = max((len(s.table) for s in seqs), default=0)
        out = np.full((len(seqs), width), pad, dtype=np.int64)
        for row, s in enumerate(seqs):
            out[row, :len(s.table)] = s.table
        return out

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

    # ----------------------------------------------------------------- invariants

    def check_invariants(self) -> None:
        """Recompute everything from the block tables and raise ``InvariantError`` on a mismatch."""
        pool, S, N = self._pool, self.block_size, self.num_blocks
        uncached, cached_free = pool.free_blocks()
        free_list = uncached + cached_free
        _require(len(set(free_list)) == len(free_list), "a block appears twice in the free queue")
        holders = [0] * N
        fill = {}  # block -> filled slots, which every holder must agree on
        logical = 0
        for rid, seq in self._seqs.items():
            T = len(seq.tokens)
            logical += T
            _require(len(seq.table) == -(-T // S),
                     f"request {rid!r} holds {len(seq.table)} blocks for {T} tokens, expected ceil(T/S)")
            _require(len(set(seq.table)) == len(seq.table), f"a block appears twice in the table of {rid!r}")
            _require(seq.cap in (0, len(seq.table) * S) and (T >= seq.cap or self._ref[seq.table[-1]] == 1),
                     f"request {rid!r} may append into a partly filled last block that another table holds")
            for i, b in enumerate(seq.table):
                holders[b] += 1
                f = min(S, T - i * S)
                _require(fill.setdefault(b, f) == f,
                         f"block {b} is shared by tables that disagree on how full it is")
            if self.enable_prefix_caching:
                self._check_chain(rid, seq)
        for b in range(N):
            _require(pool.ref_cnt[b] == holders[b],
                     f"ref count of block {b} is {pool.ref_cnt[b]} but {holders[b]} tables hold it")
        free_set = set(free_list)
        for b in range(N):
            _require((b in free_set) != (holders[b] > 0),
                     f"block {b} must be either in the free queue or referenced, never both or neither")
        used = sum(1 for h in holders if h)
        _require(len(free_list) + used == N, "free count + used count != num_blocks")
        for b in uncached:
            _require(pool.block_hash[b] is None, f"uncached free block {b} has a hash")
        for b in cached_free:
            _require(pool.block_hash[b] is not None, f"cached free block {b} has no hash")
        for h, b in pool.cached.items():
            key = pool.block_key[b]
            _require(pool.block_hash[b] == h and key is not None and hash(key) == h,
                     f"the hash map entry {h} -> block {b} does not match the block's key")
            _require(len(key[1]) == S, f"cached block {b} is not full")
        hashed = sum(1 for h in pool.block_hash if h is not None)
        _require(hashed == len(pool.cached), "a block has a hash that the hash map does not point to it")
        _require(logical == self._logical, f"logical tokens {self._logical} != recomputed {logical}")
        _require(sum(fill.values()) == logical - self._saved,
                 f"unique tokens {logical - self._saved} != recomputed {sum(fill.values())}")

    def _check_chain(self, rid: str, seq: _Seq) -> None:
        """Every full block is hashed along the chain, and a cached block holds the tokens it claims."""
        S, pool = self.block_size, self._pool
        _require(seq.num_hashed == len(seq.tokens) // S, f"request {rid!r} has unhashed full blocks")
        hashes, keys = self._chain(None, seq.tokens, 0, seq.num_hashed, seq.salt)
        _require(seq.last_hash == (hashes[-1] if hashes else None), f"request {rid!r} lost its hash chain")
        for i, b in enumerate(seq.table[:seq.num_hashed]):
            if pool.block_hash[b] is not None:
                _require(pool.block_key[b] == keys[i],
                         f"cached block {b} at index {i} of {rid!r} holds other tokens than its key")

    # ----------------------------------------------------------------- helpers

    def _chain(self, parent_hash, tokens, start: int, stop: int, salt):
        """Hashes and keys of full blocks ``start..stop-1`` of ``tokens``, chained from ``parent_hash``."""
        S = self.block_size
        toks = tuple(tokens[start * S:stop * S])  # one tuple; its slices are the blocks' token tuples
        hashes, keys = [], []
        h = parent_hash
        for a in range(0, len(toks), S):
            key = (h, toks[a:a + S], salt)
            h = hash(key)
            keys.append(key)
            hashes.append(h)
        return hashes, keys

    def _seq(self, request_id, name: str = "request_id") -> _Seq:
        try:
            seq = self._seqs.get(request_id)
        except TypeError:
            raise unhashable_id_error(name, request_id) from None
        if seq is None:
            raise self._unknown(request_id, name)
        return seq

    def _unknown(self, request_id, name: str = "request_id") -> UnknownRequestError:
        return UnknownRequestError(f"{name} {request_id!r} is not a live request (never added, or already "
                                   f"freed); {len(self._seqs)} requests are live")

def slot_mapping_batch(block_tables, positions, block_size: int) -> np.ndarray:
    """Flat cache slots for a batch: ``block_tables[i, p // S] * S + p % S`` for each ``p`` in row i.

    ``block_tables`` is an int array ``(B, max_blocks)`` (rows padded with any negative value,
    see :meth:`BlockManager.padded_block_tables`); ``positions`` is ``(B,)`` (one position per
    request, as in decode) or ``(B, P)``. A position of ``-1`` marks padding and maps to slot
    ``-1``; it reads no block, so an empty batch (``B = 0``) or a table with no columns is fine
    as long as every position is padding. Returns int64 of ``positions``' shape.
    """
    S = check_int("block_size", block_size, minimum=1)
    tables = _int_array("block_tables", block_tables)
    pos = _int_array("positions", positions)
    if tables.ndim != 2:
        raise ValueError(f"block_tables must be 2-D (requests, blocks), got shape {tables.shape}")
    if pos.ndim not in (1, 2) or pos.shape[0] != tables.shape[0]:
        raise ValueError(f"positions must have shape ({tables.shape[0]},) or ({tables.shape[0]}, P) "
                         f"to match block_tables {tables.shape}, got {pos.shape}")
    if pos.size and pos.min() < -1:
        raise ValueError(f"positions must be >= 0 (or -1 for padding), got {pos.min()}")
    pos2 = pos[:, None] if pos.ndim == 1 else pos
    pad = pos2 < 0
    idx = np.where(pad, 0, pos2) // S
    if not pad.all() and idx[~pad].max() >= tables.shape[1]:
        raise ValueError(f"a position needs logical block {idx[~pad].max()}, but block_tables have only "
                         f"{tables.shape[1]} columns")
    if tables.shape[1] == 0:  # every position is padding (checked above): nothing to read
        return np.full(pos.shape, -1, dtype=np.int64)
    blocks = np.take_along_axis(tables, idx, axis=1)
    if np.any(blocks[~pad] < 0):
        raise ValueError("a position maps to a padding entry of block_tables (a negative block id)")
    slots = np.where(pad, -1, blocks * S + np.where(pad, 0, pos2) % S)
    return slots.reshape(pos.shape)


def _token_list(name: str, token_ids) -> Sequence[int]:
    """Token ids as a sequence of Python ints >= 0 (numpy arrays and integer scalars converted).

    Runs on every append, so the common case (a list of ints) is one pass with no conversion.
    """
    if type(token_ids) is list or isinstance(token_ids, (tuple, range)):
        toks = token_ids
    elif isinstance(token_ids, np.ndarray):
        if token_ids.ndim != 1 or token_ids.dtype.kind not in "iu":
            raise TypeError(f"{name} must be a 1-D sequence of integer token ids, got an array of "
                            f"shape {token_ids.shape} and dtype {token_ids.dtype}")
        toks = token_ids.tolist()
    elif isinstance(token_ids, Sequence) and not isinstance(token_ids, (str, bytes)):
        toks = list(token_ids)
    else:
        raise TypeError(f"{name} must be a sequence of integer token ids, got {token_ids!r} "
                        f"({type(token_ids).__name__})")
    for t in toks:
        if type(t) is not int or t < 0:  # rare: numpy scalars to convert, or a bad id to report
            return check_ints(name, toks, minimum=0)
    return toks


def _int_array(name: str, values) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged rows: numpy's "inhomogeneous shape"
        raise ValueError(f"{name} must be a rectangular array of integers (every row the same "
                         f"length), got {values!r}") from exc
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


_SALT_TYPES = (str, bytes, int)


def _check_salt(name: str, salt) -> None:
    """A salt is None, a str, bytes, an int (not a bool) or a tuple of these.

    Exact types only: equal values of other types (``1.0``, ``True``, an ``IntEnum``) hash and
    compare equal to an int salt, so they would share its cache entries.
    """
    if not _salt_ok(salt):
        raise TypeError(f"{name} must be None, a str, bytes, an int (not a bool) or a tuple of these, so "
                        f"that different salts never compare equal; got {salt!r} ({type(salt).__name__})")


def _salt_ok(salt) -> bool:
    if salt is None or type(salt) in _SALT_TYPES:
        return True
    return type(salt) is tuple and all(_salt_ok(item) for item in salt)


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise InvariantError(f"invariant broken: {invariant}")
