"""Lesson 04 (Demo): what its practice holds back (the lab's and the simulator's gates live in :mod:`..lab_view`)."""
from __future__ import annotations

from ...accounting import blocks_needed
from .key_types import PracticeKey, need

LESSON = "04_demo"

FORK_HINTS = ("How many blocks does the prompt fill, and how full is the last one? Which are shared?",
              "A sample that writes into the shared partial block copies it first.",
              "Each sample then holds its own copy of that block, and the blocks its own tokens need.")
FORK_ALONE = "That stores every sample on its own: the full prompt blocks are shared."
FORK_KEPT = ("The partial prompt block does not stay shared while the tails start new blocks: each sample "
             "copies it (copy-on-write) and writes into its copy.")


def _fork_mistakes(live) -> dict:
    samples, size = need(live, "p-fork-blocks", "samples", "block_size")
    n, first = len(samples), samples[0]
    alone = n * blocks_needed(first.tokens, size)                              # nothing shared
    kept = first.prefix // size + 1 + n * blocks_needed(first.tail, size)      # partial block shared, tails apart
    return {alone: FORK_ALONE, kept: FORK_KEPT}


PRACTICES = {
    "p-fork-blocks": PracticeKey(
        "p-fork-blocks", LESSON, lambda live: need(live, "p-fork-blocks", "blocks")[0], FORK_HINTS,
        _fork_mistakes, (FORK_ALONE, FORK_KEPT), units="blocks", canvas=True,
        bridges=("copy-on-write", "beam search")),
}
GATES: dict = {}
