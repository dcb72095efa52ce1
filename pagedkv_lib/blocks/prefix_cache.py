"""The prefix cache: a tree with one node per full-block prefix, so that a hit is exact and nothing held is lost.

A full block's K/V states depend on its own tokens and on every token before it. So the cache
names the states of a full block by a :class:`Node` of a tree (a radix tree with one block per
edge, as in SGLang's RadixAttention): the node of a request's block ``i`` stands for the
prefix ``tokens[:(i + 1) * S]``, and it holds

* ``parent``: the node of block ``i - 1`` (``None`` for block 0);
* ``tokens``: the block's own token ids, a tuple of ``S`` ints;
* ``salt``: the request's tenant or adapter id (requests with different salts never share);
* ``block``: the physical block that holds these states and that prompts may hit (``None``
  after it was evicted);
* ``refs``: what keeps the node: its child nodes plus the physical blocks that hold its states.

The tree is one dict from ``(parent node, tokens, salt)`` to a node: a step down is one lookup,
O(1) per block. Two prefixes meet at one node only if they agree on every token and on the
salt, so a hit is exact. (vLLM keys a block by a hash of ``(parent hash, tokens, salt)``; two
different prefixes whose hashes collide would continue into each other's blocks.)

**Nodes outlive their blocks.** When a cached block is evicted, its node stays as long as
something below it is still cached, so a request that computes that block again re-attaches
it to the same node, and the blocks cached below it are found again.

**Duplicates.** A node holds one block. A block computed again for a prefix whose node holds a
block already (a prompt of exactly ``k`` cached blocks recomputes the last one) stays uncached,
but it still names the node: the request continues the chain from it.

**Memory.** A node whose ``refs`` drop to 0 (no block holds its states, no child is left) is
dropped, and its parent loses a child (a node is made once and dropped once: O(1) per block,
amortized). So the tree holds exactly the nodes on the paths from the
root to the nodes of blocks that hold a full block's states: at most the sum of those blocks'
depths (in blocks), so at most ``num_blocks * D`` nodes for prompts of at most ``D`` blocks, and
at most ``num_blocks`` while every such node's parent has a block too (the usual case: a request
is freed tail first, so its prefix blocks are evicted last). Each node holds ``S`` token ids.
:func:`pagedkv_lib.blocks.invariants.check_manager` checks that the tree holds nothing more.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


def full_blocks(tokens: Sequence[int], block_size: int, start: int, stop: int) -> list[tuple[int, ...]]:
    """The token ids of full blocks ``start .. stop - 1`` of ``tokens``, one tuple per block."""
    S = block_size
    return [tuple(tokens[i * S:(i + 1) * S]) for i in range(start, stop)]


class Node:
    """One full-block prefix: the prefix of ``parent``, then ``tokens``, under ``salt``."""

    __slots__ = ("parent", "tokens", "salt", "block", "refs")

    def __init__(self, parent: Node | None, tokens: tuple[int, ...], salt):
        self.parent = parent
        self.tokens = tokens
        self.salt = salt
        self.block: int | None = None  # the cached physical block with these states (None: none now)
        self.refs = 0                  # child nodes + physical blocks holding these states

    def key(self) -> tuple:
        """Where the tree files this node: ``(parent, tokens, salt)``."""
        return (self.parent, self.tokens, self.salt)


class PrefixCache:
    """The tree of full-block prefixes, and which node each physical block's states belong to."""

    def __init__(self, num_blocks: int):
        self._nodes: dict[tuple, Node] = {}                     # (parent, tokens, salt) -> node
        self._node_of: list[Node | None] = [None] * num_blocks  # block id -> node of its states (None: partial or free)

    def __len__(self) -> int:
        """Nodes in the tree (prefixes it remembers, with or without a cached block)."""
        return len(self._nodes)

    # ---------------------------------------------------------------- what the block manager calls

    def longest_prefix(self, token_blocks: Iterable[tuple], salt) -> tuple[list[int], Node | None]:
        """The cached blocks of a prompt's first full blocks, up to the first miss, and the last hit's node."""
        hits, node = [], None
        for tokens in token_blocks:
            child = self._nodes.get((node, tokens, salt))
            if child is None or child.block is None:
                break
            hits.append(child.block)
            node = child
        return hits, node

    def register(self, parent: Node | None, token_blocks: Iterable[tuple], salt, blocks: Iterable[int]) -> None:
        """Name freshly computed full blocks: ``blocks[i]`` holds ``token_blocks[i]`` after ``parent``'s prefix.

        A block whose node holds no block becomes the node's cached block (a recomputed block
        re-attaches to its old node); otherwise it is a duplicate and stays uncached.
        """
        for tokens, b in zip(token_blocks, blocks):
            key = (parent, tokens, salt)
            node = self._nodes.get(key)
            if node is None:
                node = self._nodes[key] = Node(parent, tokens, salt)
                if parent is not None:
                    parent.refs += 1
            node.refs += 1
            if node.block is None:
                node.block = b
            self._node_of[b] = node
            parent = node

    def node_of(self, block: int) -> Node | None:
        """The node whose states physical ``block`` holds (None: a partly filled or a free uncached block)."""
        return self._node_of[block]

    def is_cached(self, block: int) -> bool:
        """Whether ``block`` is the block its node serves to prompts."""
        node = self._node_of[block]
        return node is not None and node.block == block

    def freed(self, block: int) -> bool:
        """``block`` is free now; return whether it stays cached (cached free). A duplicate forgets its node."""
        if self.is_cached(block):
            return True
        if self._node_of[block] is not None:
            self._forget(block)
        return False

    def evict(self, block: int) -> None:
        """Cached free ``block`` is reused for other tokens; its node stays while something below it is cached."""
        self._node_of[block].block = None
        self._forget(block)

    def _forget(self, block: int) -> None:
        """``block`` no longer holds its node's states; drop the nodes nothing keeps any more."""
        node = self._node_of[block]
        self._node_of[block] = None
        node.refs -= 1
        while node is not None and node.refs == 0:
            del self._nodes[node.key()]
            node = node.parent
            if node is not None:
                node.refs -= 1

    # ---------------------------------------------------------------- read-only views (invariants, tests)

    def nodes(self) -> Iterator[Node]:
        """Every node of the tree (read them; changing one breaks the cache)."""
        return iter(list(self._nodes.values()))

    def find(self, parent: Node | None, tokens: tuple, salt) -> Node | None:
        """The node filed under ``(parent, tokens, salt)``, or None."""
        return self._nodes.get((parent, tokens, salt))
