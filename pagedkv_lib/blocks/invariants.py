"""The block manager's invariants, recomputed from scratch: :meth:`BlockManager.check_invariants`.

Each check reads the manager's private structures and states one invariant the fast code
relies on; tests call it after every step. Slow on purpose (it rebuilds every count), so the
manager never calls it itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..accounting import blocks_needed
from ..errors import InvariantError
from .prefix_cache import full_blocks

if TYPE_CHECKING:
    from .manager import BlockManager


def check_manager(bm: BlockManager) -> None:
    """Raise :class:`InvariantError` naming the first invariant ``bm`` breaks."""
    holders, fill, logical = _check_tables(bm)
    _check_free_queue(bm, holders)
    _check_cache(bm)
    if bm.enable_prefix_caching:
        live = {uid: b for b, uid in enumerate(bm._cache.uid) if uid is not None}
        for rid, seq in bm._seqs.items():
            _check_chain(bm, rid, seq, live)
    else:
        _require(len(bm._cache) == 0, "prefix caching is off, but the prefix cache holds blocks")
    _require(logical == bm._logical, f"logical tokens {bm._logical} != recomputed {logical}")
    _require(sum(fill.values()) == logical - bm._saved,
             f"unique tokens {logical - bm._saved} != recomputed {sum(fill.values())}")


def _check_tables(bm: BlockManager) -> tuple[list[int], dict[int, int], int]:
    """Each table holds ceil(T/S) distinct blocks, tables sharing a block agree on its fill, and a
    request may append in place (``T < cap``) only into a last block no other table holds.

    Returns how many tables hold each block, the filled slots of each used block, and T_logical.
    """
    S = bm.block_size
    holders = [0] * bm.num_blocks
    fill: dict[int, int] = {}
    logical = 0
    for rid, seq in bm._seqs.items():
        T = len(seq.tokens)
        logical += T
        _require(len(seq.table) == blocks_needed(T, S),
                 f"request {rid!r} holds {len(seq.table)} blocks for {T} tokens, expected ceil(T/S)")
        _require(len(set(seq.table)) == len(seq.table), f"a block appears twice in the table of {rid!r}")
        _require(seq.cap in (0, S * len(seq.table)), f"request {rid!r} has append bound cap {seq.cap}, "
                 f"expected 0 or S * len(table) = {S * len(seq.table)}")
        for i, b in enumerate(seq.table):
            holders[b] += 1
            f = min(S, T - i * S)
            _require(fill.setdefault(b, f) == f, f"block {b} is shared by tables that disagree on how full it is")
    for rid, seq in bm._seqs.items():
        _require(len(seq.tokens) >= seq.cap or holders[seq.table[-1]] == 1,  # a full last block takes no write
                 f"request {rid!r} may append in place (cap {seq.cap}), but its partly filled last block is shared")
    return holders, fill, logical


def _check_free_queue(bm: BlockManager, holders: list[int]) -> None:
    """Ref counts count holders; a block is free (cached or not, as the cache says) exactly when none holds it."""
    pool = bm._pool
    uncached, cached_free = pool.free_blocks()
    free = set(uncached + cached_free)
    _require(len(free) == len(uncached) + len(cached_free), "a block appears twice in the free queue")
    for b in range(bm.num_blocks):
        _require(pool.ref_cnt[b] == holders[b],
                 f"ref count of block {b} is {pool.ref_cnt[b]} but {holders[b]} tables hold it")
        _require((b in free) != (holders[b] > 0),
                 f"block {b} must be either in the free queue or referenced, never both or neither")
    for b in uncached:
        _require(pool.cache.key[b] is None, f"uncached free block {b} is in the prefix cache")
    for b in cached_free:
        _require(pool.cache.key[b] is not None, f"cached free block {b} is not in the prefix cache")


def _check_cache(bm: BlockManager) -> None:
    """The key map and the per-block keys and ids describe the same full blocks, with unique ids."""
    cache = bm._cache
    for key, b in cache.block_of.items():
        _require(cache.key[b] == key and cache.uid[b] is not None,
                 f"the prefix cache maps a key to block {b}, which holds another key or no id")
        _require(len(key[1]) == bm.block_size, f"cached block {b} is not full")
    keyed = sum(1 for k in cache.key if k is not None)
    _require(keyed == len(cache.block_of), "a block has a key that the prefix cache does not map to it")
    uids = [u for u in cache.uid if u is not None]
    _require(len(uids) == keyed and len(set(uids)) == keyed, "cached blocks must each have one unique id")


def _check_chain(bm: BlockManager, rid: str, seq, live: dict[int, int]) -> None:
    """The cached blocks a request holds, and the chain it continues, spell exactly its own tokens.

    A cached block's key names its parent by id; following live parent ids from block ``i``
    must meet blocks ``i - 1, i - 2, ..., 0`` of the request's tokens, and reach the root
    (``None``) at block 0. A dead id (its block was evicted) ends the walk: nothing can reach past it.
    """
    S, cache, table = bm.block_size, bm._cache, seq.table
    _require(seq.chained == len(seq.tokens) // S, f"request {rid!r} has full blocks it never offered to the cache")
    blocks = full_blocks(seq.tokens, S, 0, seq.chained)
    for i in range(seq.chained + 1):
        parent = seq.parent if i == seq.chained else None
        if i < seq.chained:
            key = cache.key[table[i]]
            if key is None:
                continue
            _require(key[1:] == (blocks[i], seq.salt),
                     f"cached block {table[i]} at index {i} of {rid!r} holds other tokens than its key")
            parent = key[0]
        if i > 0 and cache.key[table[i - 1]] is not None:
            _require(parent == cache.uid[table[i - 1]],
                     f"block {i} of {rid!r} does not continue the cached block {table[i - 1]} before it")
        _check_ancestors(rid, parent, i, blocks, seq, live, cache)


def _check_ancestors(rid: str, parent, i: int, blocks, seq, live: dict[int, int], cache) -> None:
    """The live blocks above block ``i`` (``parent`` names the first) hold blocks ``i - 1, ..., 0``."""
    while parent is not None and parent in live:
        i -= 1
        _require(i >= 0, f"the cached chain of {rid!r} is longer than its tokens")
        b = live[parent]
        _require(cache.key[b][1:] == (blocks[i], seq.salt),
                 f"block {i} of {rid!r} continues cached block {b}, which holds other tokens")
        if b == seq.table[i]:
            return  # its own ancestors are checked at index i
        parent = cache.key[b][0]
    _require(parent is not None or i == 0, f"the cached chain of {rid!r} starts at block {i}, not 0")


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise InvariantError(f"invariant broken: {invariant}")
