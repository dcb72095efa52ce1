"""The prefix cache: full blocks found again by exactly what they were computed after.

A full block's K/V states depend on its own tokens and on every token before it. So the cache
files a full block under the key ``(parent, tokens, salt)``:

* ``parent`` names the block before it **by identity**: the id the cache gave that block when
  it registered it (``None`` for a request's first block). Ids come from a counter and are
  never reused, so two keys with the same parent id continue the very same cached block;
* ``tokens`` is the block's own token ids, a tuple of ``block_size`` ints;
* ``salt`` separates tenants: requests with different salts never share.

Two prompts reach the same key only if they agree on every token up to the end of the block
(and on the salt), so a hit is exact. A key that named its parent by a 64-bit hash instead
would let two different prefixes with equal hashes continue into each other's blocks; vLLM
names the parent by hash and offers SHA-256 hashes to make that practically impossible. An id
is exact, and a lookup hashes each key once, as a dict does anyway.

A block whose parent was evicted keeps its entry, but no walk can reach it again (a
recomputed parent gets a new id); it leaves the map when it is evicted itself. Every entry
belongs to one physical block, so the map never holds more than ``num_blocks`` keys.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count


def full_blocks(tokens: Sequence[int], block_size: int, start: int, stop: int) -> list[tuple[int, ...]]:
    """The token ids of full blocks ``start .. stop - 1`` of ``tokens``, one tuple per block: what keys hold."""
    S = block_size
    run = tuple(tokens[start * S:stop * S])  # one tuple; its slices are the blocks
    return [run[a:a + S] for a in range(0, len(run), S)]


class PrefixCache:
    """Maps ``(parent id, token ids, salt)`` to a physical block, and each cached block to its key and id.

    Invariants (:meth:`pagedkv_lib.blocks.manager.BlockManager.check_invariants` tests them):
    ``block_of[key[b]] == b`` for every cached block ``b``, and ``key[b] is None`` exactly
    when ``b`` is not cached; ``uid[b]`` is set exactly for cached blocks and is unique.
    """

    def __init__(self, num_blocks: int):
        self.block_of: dict[tuple, int] = {}                # key -> cached block id
        self.key: list[tuple | None] = [None] * num_blocks  # block id -> its key (None: not cached)
        self.uid: list[int | None] = [None] * num_blocks    # block id -> the id that names it as a parent
        self._uids = count()

    def __len__(self) -> int:
        return len(self.block_of)

    def longest_prefix(self, token_blocks: Sequence[tuple], salt) -> tuple[list[int], int | None]:
        """The cached blocks that continue a request's first blocks, up to the first miss.

        ``token_blocks`` holds the token ids of each full block from the start of a prompt.
        Returns ``(hits, parent)``: the hit block ids in order, and the id naming the last hit
        (``None`` when nothing hit), from which the request's own blocks continue the chain.
        """
        hits, parent, block_of = [], None, self.block_of
        for tokens in token_blocks:
            b = block_of.get((parent, tokens, salt))
            if b is None:
                break
            hits.append(b)
            parent = self.uid[b]
        return hits, parent

    def register(self, parent: int | None, token_blocks: Iterable[tuple], salt,
                 blocks: Iterable[int]) -> int | None:
        """Cache each freshly computed full block ``blocks[i]`` (tokens ``token_blocks[i]``) after ``parent``.

        A key that is cached already (another request computed the same block first) keeps its
        block: this one stays uncached, and the chain continues from the cached one, so that a
        later walk finds the blocks registered after it. Returns the id naming the last block.
        """
        block_of, key_of, uid = self.block_of, self.key, self.uid
        for tokens, b in zip(token_blocks, blocks):
            key = (parent, tokens, salt)
            owner = block_of.setdefault(key, b)
            if owner == b:
                key_of[b] = key
                uid[b] = next(self._uids)
            parent = uid[owner]
        return parent

    def forget(self, b: int) -> None:
        """Drop cached block ``b`` (it is being reused for other tokens); its id dies with it."""
        del self.block_of[self.key[b]]
        self.key[b] = self.uid[b] = None
