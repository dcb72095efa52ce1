"""The block manager's invariants, recomputed from scratch: :meth:`BlockManager.check_invariants`.

The checks read only what the manager shows anyone (block tables, token ids, salts, ref
counts, the free queue, the prefix cache's nodes) and state each invariant the manager relies
on; tests call them after every step. Slow on purpose (they rebuild every count), so the
manager never calls them itself. :func:`check_tables`, :func:`check_free_queue` and :func:`require`
serve the hashed and hybrid managers' checks too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..accounting import blocks_needed
from ..errors import InvariantError
from .prefix_cache import full_blocks

if TYPE_CHECKING:
    from .manager import BlockManager
    from .prefix_cache import Node


def check_manager(bm: BlockManager) -> None:
    """Raise :class:`InvariantError` naming the first invariant ``bm`` breaks."""
    holders, fill = check_tables(bm)
    check_free_queue(bm, holders)
    _check_tree(bm)
    for rid in bm.request_ids():
        _check_chain(bm, rid)
    s = bm.stats()
    require(s.logical_tokens == sum(bm.num_tokens(r) for r in bm.request_ids()), "logical tokens are not sum T")
    require(s.unique_tokens == sum(fill.values()),
             f"unique tokens {s.unique_tokens} != {sum(fill.values())}, the filled slots of the used blocks")
    require(s.used_blocks == len(fill), f"{s.used_blocks} blocks are used, but tables hold {len(fill)}")


def check_tables(bm: BlockManager) -> tuple[list[int], dict[int, int]]:
    """Each table holds ceil(T/S) distinct blocks, and tables sharing a block agree on how full it is.

    Returns how many tables hold each block and the filled slots of each used block.
    """
    S = bm.block_size
    holders = [0] * bm.num_blocks
    fill: dict[int, int] = {}
    for rid in bm.request_ids():
        table, T = bm.block_table(rid), bm.num_tokens(rid)
        require(len(table) == blocks_needed(T, S),
                 f"request {rid!r} holds {len(table)} blocks for {T} tokens, expected ceil(T/S)")
        require(len(set(table)) == len(table), f"a block appears twice in the table of {rid!r}")
        for i, b in enumerate(table):
            holders[b] += 1
            f = min(S, T - i * S)
            require(fill.setdefault(b, f) == f, f"block {b} is shared by tables that disagree on how full it is")
    return holders, fill


def check_free_queue(bm: BlockManager, holders: list[int]) -> None:
    """Ref counts count holders; a block is free exactly when none holds it, cached free exactly when the cache serves it."""
    cache = bm.prefix_cache
    uncached, cached = bm.free_queue()
    free = set(uncached + cached)
    require(len(free) == len(uncached) + len(cached), "a block appears twice in the free queue")
    for b in range(bm.num_blocks):
        require(bm.ref_count(b) == holders[b], f"ref count of block {b} is {bm.ref_count(b)} but {holders[b]} tables hold it")
        require((b in free) != (holders[b] > 0),
                 f"block {b} must be either in the free queue or referenced, never both or neither")
    for b in uncached:
        require(cache.node_of(b) is None, f"uncached free block {b} still names a prefix-cache node")
    for b in cached:
        require(cache.is_cached(b), f"cached free block {b} is not served by the prefix cache")


def _check_tree(bm: BlockManager) -> None:
    """Every node is filed under its key below a node of the tree, and is kept by exactly its ``refs``.

    ``refs`` = child nodes + blocks holding the node's states, and it is >= 1: the tree keeps
    nothing that no block holds below it (the memory bound of :mod:`.prefix_cache`).
    """
    cache = bm.prefix_cache
    nodes = list(cache.nodes())
    ids = {id(n) for n in nodes}
    refs = {id(n): 0 for n in nodes}
    for n in nodes:
        require(cache.find(n.parent, n.tokens, n.salt) is n, "a node is not filed under its own key")
        require(len(n.tokens) == bm.block_size, "a node holds a partly filled block")
        if n.parent is not None:
            require(id(n.parent) in ids, "a node hangs below a node that left the tree (an orphan)")
            require(n.parent.salt == n.salt, "a node's salt differs from its parent's")
            refs[id(n.parent)] += 1
        if n.block is not None:
            require(cache.node_of(n.block) is n, f"block {n.block} is cached under a node it does not name")
    for b in range(bm.num_blocks):
        n = cache.node_of(b)
        if n is not None:
            require(id(n) in ids, f"block {b} names a node that left the tree")
            refs[id(n)] += 1
    for n in nodes:
        require(n.refs == refs[id(n)], f"a node counts {n.refs} references, but {refs[id(n)]} children and blocks keep it")
        require(n.refs >= 1, "the tree keeps a node that no block holds, at it or below it")
    if not bm.enable_prefix_caching:
        require(not nodes, "prefix caching is off, but the prefix cache holds nodes")


def _check_chain(bm: BlockManager, rid: str) -> None:
    """Each full block of a request names the node of exactly its own prefix and salt; the partial one names none.

    Block ``i``'s node must hang below block ``i - 1``'s (block 0's below the root) and hold
    block ``i``'s tokens, so by induction it stands for ``tokens[:(i + 1) * S]``.
    """
    S, cache, table, tokens = bm.block_size, bm.prefix_cache, bm.block_table(rid), bm.token_ids(rid)
    blocks, salt = full_blocks(tokens, S, 0, len(tokens) // S), bm.salt(rid)
    parent: Node | None = None
    for i, b in enumerate(table):
        node = cache.node_of(b)
        if i >= len(blocks) or not bm.enable_prefix_caching:
            require(node is None, f"block {b} of {rid!r} is partly filled but names a prefix-cache node")
            continue
        require(node is not None, f"full block {b} at index {i} of {rid!r} is not in the prefix cache")
        require(node.parent is parent, f"block {b} at index {i} of {rid!r} does not continue the node of the block before it")
        require(node.tokens == blocks[i] and node.salt == salt,
                 f"block {b} at index {i} of {rid!r} is cached under other tokens or another salt")
        parent = node


def require(condition: bool, invariant: str) -> None:
    """Raise :class:`InvariantError` saying which ``invariant`` broke, unless ``condition`` holds."""
    if not condition:
        raise InvariantError(f"invariant broken: {invariant}")
