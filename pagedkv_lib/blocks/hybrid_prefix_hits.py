"""Prefix hits for a model with full-attention and sliding-window layers: scan, then intersect.

A prefix of ``h`` full blocks is a hit for a KV-cache group when the group still holds every
block the first token after the prefix will read (vLLM, ``docs/design/hybrid_kv_cache_manager.md``):

* **full attention** reads every earlier token, so blocks ``0 .. h - 1`` must all be cached.
  Any shorter prefix of a hit is a hit too, so the longest one is found **left to right**,
  stopping at the first miss;
* **sliding window** ``W``: the token at position ``h * S`` reads positions from
  ``h * S - W + 1`` on, so only blocks ``max(0, h * S - W + 1) // S .. h - 1`` must be cached,
  at most ``ceil((W - 1) / S)`` of them. A shorter prefix of a hit need not be a hit (its
  window reaches blocks that may be gone), so the longest one is found **right to left**,
  stopping at the first run of enough cached blocks.

Each function takes ``cached(i)``, whether block ``i`` of the prompt is cached in that group,
and ``max_blocks``, the most blocks a hit may cover (the block of the last prompt token is
always computed). :func:`longest_common_hit` intersects the groups' answers: every type in
turn shrinks the candidate to its own longest hit within it, until no type shrinks it; with
one full-attention type first and one sliding type, that is one pass, vLLM's algorithm.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


def full_attention_hit(cached: Callable[[int], bool], max_blocks: int) -> int:
    """The longest ``h <= max_blocks`` with blocks ``0 .. h - 1`` all cached (left to right)."""
    h = 0
    while h < max_blocks and cached(h):
        h += 1
    return h


def sliding_window_hit(cached: Callable[[int], bool], max_blocks: int, window: int, block_size: int) -> int:
    """The longest ``h <= max_blocks`` whose window blocks ``max(0, hS - W + 1) // S .. h - 1`` are cached.

    Right to left: the first run of ``ceil((W - 1) / S)`` cached blocks ending at block
    ``h - 1`` gives ``h``; a shorter run that reaches block 0 gives its own length (the window
    then covers the whole prefix). ``h = 0`` (nothing from the cache) is always allowed.
    """
    need = -(-(window - 1) // block_size)
    if need == 0:
        return max_blocks  # a window of 1 token reads no earlier block
    run = 0
    for i in range(max_blocks - 1, -1, -1):
        if cached(i):
            run += 1
            if run >= need:
                return i + run
        else:
            run = 0
    return run  # blocks 0 .. run - 1 are cached, fewer than a whole window needs


def longest_common_hit(scans: Sequence[Callable[[int], int]], max_blocks: int) -> int:
    """Intersect per-type hits: ``scans[k](limit)`` is type ``k``'s longest hit ``<= limit``.

    Repeats the pass until the candidate stops shrinking, so the answer is a hit for every type.
    """
    h, changed = max_blocks, True
    while changed:
        changed = False
        for scan in scans:
            shorter = scan(h)
            if shorter < h:
                h, changed = shorter, True
    return h
