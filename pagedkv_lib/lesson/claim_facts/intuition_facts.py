"""Lesson 01's facts: where tokens live, the ledger's tables, ref counts.

Part of :mod:`pagedkv_lib.lesson.claim_facts`, which joins the four lessons' facts."""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact
from .worked_example import batch, prompt


def _unshared_tables():
    """Block tables of A1-A3 played without sharing at S = 4 (lesson 01's first figure)."""
    from pagedkv_lib.lesson.replay import play_paged
    plain = play_paged(batch(), 4, share=False, num_blocks=16)
    return [plain.block_table(r.id) for r in batch()]


def _span(blocks):
    """(first, last) of a run of consecutive block ids; raises when they are not one run."""
    blocks = sorted(blocks)
    if blocks != list(range(blocks[0], blocks[-1] + 1)):
        raise ValueError(f"blocks {blocks} are not one run")
    return blocks[0], blocks[-1]


def _prompt_block_refs():
    """The ref count of A1's first (prompt) block after one decode step with sharing, at S = 4."""
    from pagedkv_lib.lesson.replay import play_paged
    shared = play_paged(batch(), 4, steps=1, num_blocks=28)
    return shared.ref_count(shared.block_table(batch()[0].id)[0])


def _after_one_step():
    """Each request's prompt, its length after one decode step, then each final length."""
    (p,) = prompt()
    return (p, p + 1, *(r.tokens for r in batch()))



_01 = "01_intuition"
FACTS_01 = (
    Fact(_01, "one 12-token prompt", "cell-02", check=prompt),
    Fact(_01, "(here $S = 4$)", "cell-04", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "map to physical blocks 0-2", "cell-04",
         check=lambda: _span(_unshared_tables()[0][:3])),
    Fact(_01, "maps to block 9", "cell-04", check=lambda: (_unshared_tables()[0][3],)),
    Fact(_01, "produced its 13th token", "cell-04", check=lambda: (prompt()[0] + 1,)),
    Fact(_01, "had taken blocks 3-8", "cell-04",
         check=lambda: _span(t for table in _unshared_tables()[1:] for t in table[:3])),
    Fact(_01, "its 12 prompt tokens plus one of its own (13 tokens), and will end at 15, 17 "
         "and 14 tokens", "cell-02", check=_after_one_step),
    Fact(_01, "the same memory, 112 token slots", "cell-08", code="num_slots=112"),
    Fact(_01, "maximum length of 32", "cell-08", code='"max", 32'),
    Fact(_01, "A fourth request of 20 tokens", "cell-08", code="waiting = 20"),
    Fact(_01, "Blocks of $S = 4$ slots", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "the 12-token prompt are the same tokens", "cell-02", check=prompt),
    Fact(_01, "the same 12-token prompt arrives and will produce 6 tokens", "cell-17",
         code='Request("A4", 12, 6,'),
    Fact(_01, "With sharing at $S = 4$", "cell-17", code="play_paged(PAGE_BATCH + (A4,), 4)"),
    # the library's prose in this lesson (library_prose.rendered_prose): research-room items, reveals
    Fact(_01, "a contiguous run of 32 slots", "cell-08", code='"max", 32'),
    Fact(_01, "in an arena of 112", "cell-08", code="num_slots=112"),
    Fact(_01, "a waiting request of 20 tokens", "cell-08", code="waiting = 20"),
    Fact(_01, "after one decode step, S = 4", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "the 12-token prompt shared", "cell-02", check=prompt),
    Fact(_01, "have ref count 3", "cell-11", check=lambda: (_prompt_block_refs(),)),
    Fact(_01, "which blocks have ref count 3", "cell-11", check=lambda: (_prompt_block_refs(),)),
    Fact(_01, "sits in physical block 9", "cell-04", check=lambda: (_unshared_tables()[0][3],)),
    Fact(_01, "ceil(12 /", "cell-02", check=prompt),
    Fact(_01, "/ 4) prompt blocks", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
)
