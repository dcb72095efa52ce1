"""Lesson 01 (Intuition): what its predictions and its practice hold back until the learner commits."""
from __future__ import annotations

from ...accounting import blocks_needed
from .key_types import GateKey, PracticeKey, need

LESSON = "01_intuition"

WASTE_CHOICES = ("reservation (slots for tokens still to come)",
                 "internal fragmentation (slots past each final length)",
                 "external fragmentation (gaps too short for the waiting run)")
UNUSED = ("reservation", "internal_fragmentation", "external_fragmentation")   # in WASTE_CHOICES order

WASTE = """Slots by category: {counts}. Each run reserves {run} slots for a request that will end at
{shortest}-{longest} tokens, so a large part of every run can never hold a token: internal
fragmentation ({internal} slots) against the {reservation} slots reserved for tokens still to come.
The {external} slots left at the end are free, yet the waiting request's {run}-slot run cannot fit:
external fragmentation. The paper measured that in such systems only 20-38% of KV memory held token
states (Kwon et al. 2023, Fig. 2)."""


def _biggest(live) -> str:
    arena, waiting = need(live, "q-waste", "arena", "waiting")
    cats = arena.categories(waiting)
    return WASTE_CHOICES[UNUSED.index(max(UNUSED, key=cats.get))]


def _waste_reveal(live) -> list:
    arena, waiting, figure = need(live, "q-waste", "arena", "waiting", "figure")
    cats = arena.categories(waiting)
    runs = [arena.placement(r) for r in arena.request_ids()]   # (start, reserved, live, final)
    text = WASTE.format(counts=", ".join(f"{k.replace('_', ' ')} {v}" for k, v in cats.items()),
                        run="/".join(str(s) for s in sorted({r[1] for r in runs})),
                        shortest=min(r[3] for r in runs), longest=max(r[3] for r in runs),
                        internal=cats["internal_fragmentation"], reservation=cats["reservation"],
                        external=cats["external_fragmentation"])
    return [figure, text]


BLOCKS = """Reserved slots for the same {tokens} tokens: contiguous {contiguous}, paged {paged} ({paged_blocks}
blocks), shared {shared} ({shared_blocks} blocks). The three prompt blocks have ref count 3 (orange): every
table maps them, the pool stores them once. Each request then has one block of its own, holding its one
new token and the rest of the block as tail slack."""


def _blocks_reveal(live) -> list:
    stats, reserved, figure = need(live, "q-blocks", "stats", "reserved", "figure")
    return [figure, BLOCKS.format(tokens=stats["shared"].logical_tokens, contiguous=reserved["contiguous"],
                                  paged=reserved["paged"], paged_blocks=stats["paged"].used_blocks,
                                  shared=reserved["shared"], shared_blocks=stats["shared"].used_blocks)]


READS = """Attention reads **{reads} token states** per decode step of this batch, in every layout: each
request attends to its whole history ({lens} tokens), shared prompt included. Sharing changes where the
prompt's states live (once, in blocks that all three tables map), not how many each request reads: the
shared layout stores {unique} unique token states and still reads {reads}. That count belongs to the
requests, not to the allocator."""


def _reads(live) -> int:
    """Token states one decode step reads: every request's whole history, checked equal in all three layouts."""
    shared, stats, ids = need(live, "q-reads", "shared", "stats", "ids")
    reads = sum(shared.num_tokens(r) for r in ids)
    logical = {stats["contiguous"]["token_states"], stats["paged"].logical_tokens,
               stats["shared"].logical_tokens}
    assert logical == {reads}, f"the layouts disagree on the logical tokens: {logical} vs {reads}"
    return reads


def _reads_reveal(live) -> list:
    shared, stats, ids = need(live, "q-reads", "shared", "stats", "ids")
    return [READS.format(reads=_reads(live), lens=", ".join(str(shared.num_tokens(r)) for r in ids),
                         unique=stats["shared"].unique_tokens)]


A4_HINTS = ("The prompt blocks already exist: A4's table maps them.",
            "Only A4's own tokens need new blocks.",
            "Its own tokens in blocks of S slots: a partly filled block is still a block.")
A4_AGAIN = "That stores the shared prompt again for A4."
A4_DOWN = "That rounds down: the last tokens need a block too."


def _a4_mistakes(live) -> dict:
    request, size = need(live, "p-a4", "request", "block_size")
    return {blocks_needed(request.tokens, size): A4_AGAIN, request.tail // size: A4_DOWN}


def _a4(live) -> int:
    before, after = need(live, "p-a4", "before", "after")
    return after - before


GATES = {
    "q-waste": GateKey("q-waste", LESSON, _biggest, _waste_reveal, choices=WASTE_CHOICES, texts=(WASTE,)),
    "q-blocks": GateKey("q-blocks", LESSON, lambda live: need(live, "q-blocks", "stats")[0]["shared"].used_blocks,
                        _blocks_reveal, units="blocks", tolerance=0, texts=(BLOCKS,)),
    "q-reads": GateKey("q-reads", LESSON, _reads, _reads_reveal, units="token states", tolerance=0,
                       texts=(READS,)),
}

PRACTICES = {
    "p-a4": PracticeKey("p-a4", LESSON, _a4, A4_HINTS, _a4_mistakes, (A4_AGAIN, A4_DOWN), units="blocks",
                        canvas=True, bridges=("A4", "ps1")),
}
