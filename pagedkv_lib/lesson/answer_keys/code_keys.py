"""Lesson 03 (Code): what its predictions and its practices hold back until the learner commits."""
from __future__ import annotations

import math

import numpy as np

from ...accounting import blocks_needed
from ...blocks.manager import BlockManager
from ...blocks.slot_mapping import table_slots
from .. import speed_table
from .key_types import GateKey, PracticeKey, need

LESSON = "03_code"

HIT = r"""`add_request` returned **{hit}**. To sample r3's first new token the model needs the logits of r3's
*last* prompt token, and those come only from running the model on it. So the lookup stops before the
block that holds the last token: a prompt of $T$ tokens reuses at most $\lfloor (T-1)/S \rfloor$ blocks,
and a prompt of exactly $k$ cached full blocks reuses $k-1$. r3's second block is computed again, into
fresh block {fresh}; the cache keeps block {kept} as the one filed under that node. Here is
`add_request`: check the arguments, look up the cached prefix, check room, take blocks, register the new
full blocks."""


def _hit(live) -> str:
    hit, prompt, S = need(live, "q-hit", "hit3", "prompt", "S")
    assert hit == (len(prompt) - 1) // S * S, (hit, len(prompt), S)   # at most floor((T - 1) / S) blocks
    return str(hit)


def _hit_reveal(live) -> list:
    bm, table1, code, figure = need(live, "q-hit", "bm", "table1", "code", "figure")
    return [HIT.format(hit=_hit(live), fresh=bm.block_table("r3")[1], kept=table1[1]), code, figure]


COW_CHOICES = ("[] (nothing is copied)", "one (src, dst) pair", "one pair per block r2b shares with r2")
COW = """It returned `{cow}`. Block {src} is partly filled and two tables hold it, so writing into it would
change r2's history too. The manager gives r2b a fresh block {dst} and returns the pair, so that the
attention layer copies the K/V states of block {src} into block {dst} before it writes token 42. The full
blocks stay shared. r2's own append then returned `{parent}`: r2 is now the only holder of block {last}
and writes in place. r2b's positions 8-11 now live in slots {slots}. The code: `append_tokens` checks its
arguments, asks the append rule `_append_blocks` (which `can_append` asks too) whether to copy the last
block first and how many blocks to add, takes them, and caches the blocks that became full:"""


def _cow(live) -> str:
    """The choice the returned copies match, after checking them against the block tables."""
    cow, parent, last, bm = need(live, "q-cow", "cow", "cow_parent", "last", "bm")
    for src, dst in cow:
        assert src == last and dst not in bm.block_table("r2"), (src, dst)
    assert parent == [] and bm.ref_count(last) == 1
    return COW_CHOICES[min(len(cow), 2)]


def _cow_reveal(live) -> list:
    cow, parent, last, slots, code, figure = need(live, "q-cow", "cow", "cow_parent", "last", "slots_r2b",
                                                  "code", "figure")
    (src, dst), = cow
    return [COW.format(cow=cow, src=src, dst=dst, parent=parent, last=last, slots=slots), *code, figure]


ATTN_CHOICES = ("exactly 0: the same floats, bit for bit", "above 0 but below 1e-5: float rounding",
                "above 1e-5: the blocks are out of order", "NaN: unused slots are read")
ATTN = """Largest difference from dense attention: {found}. The block table puts every token back in its
logical place, and the lengths keep each request away from slots it does not own, so the NaN is never
read. Paging changes where K and V are stored, not what attention computes; any difference left is float
rounding from another order of summation (a gathered copy multiplied in other shapes, or a softmax folded
block by block)."""


def _attn(live) -> str:
    """Which band the gather's largest difference from dense falls in; every paged decode within 1e-5."""
    (diffs,) = need(live, "q-attn", "diffs")
    assert all(d <= 1e-5 for d in diffs.values()), diffs
    d = diffs["paged_decode_gather"]
    return ATTN_CHOICES[3] if math.isnan(d) else ATTN_CHOICES[0] if d == 0 else ATTN_CHOICES[
        1 if d <= 1e-5 else 2]


def _attn_reveal(live) -> list:
    (diffs,) = need(live, "q-attn", "diffs")
    _attn(live)
    return [ATTN.format(found=", ".join(f"`{name}` {d:.1e}" for name, d in diffs.items()))]


SLOT_HINTS = ("Which logical block holds the position? Divide by S, rounding down.",
              "Look that logical block up in the table to find its physical block; the offset in it is p % S.",
              "Flat slot = physical block x S + offset.")
SLOT_LOGICAL = "That is the logical position: the slot goes through the block table."
SLOT_START = "That is the start of the right block; add the offset p % S."
SLOT_FIRST = "That used the table's first entry: the position is in another logical block."


def _slot(live) -> int:
    table, size, p = need(live, "p-slot", "table", "block_size", "position")
    return int(table_slots(table, np.array([p]), size)[0])


def _slot_mistakes(live) -> dict:
    table, size, p = need(live, "p-slot", "table", "block_size", "position")
    return {p: SLOT_LOGICAL, table[p // size] * size: SLOT_START, table[0] * size + p % size: SLOT_FIRST}


HIT_HINTS = ("The cache serves whole blocks only.",
             "The model must compute the logits of the prompt's last token.",
             "Which block holds the last prompt token, and can it come from the cache?")
HIT_ALL = "The last prompt token must be computed, so its block is not reused."
HIT_TOKENS = "The cache serves whole blocks, never single tokens."


def _cached_hit(live) -> int:
    """Tokens ``add_request`` serves from the cache for a prompt whose full blocks are all cached (a real manager)."""
    T, size = need(live, "p-hit", "prompt_len", "block_size")
    bm = BlockManager(num_blocks=2 * blocks_needed(T, size), block_size=size)
    prompt = list(range(T))
    bm.add_request("first", prompt)
    return bm.add_request("again", prompt)


def _hit_mistakes(live) -> dict:
    (T,) = need(live, "p-hit", "prompt_len")
    return {T: HIT_ALL, T - 1: HIT_TOKENS}


def _paging(live):
    """The choice (or tied choices) the live measurement's paged-over-contiguous ratio falls in."""
    (speed,) = need(live, "q-paging", "speed")
    return speed_table.paging_answer(speed)


def _paging_reveal(live) -> list:
    (speed,) = need(live, "q-paging", "speed")
    return speed_table.paging_reveal(speed)


GATES = {
    "q-hit": GateKey("q-hit", LESSON, _hit, _hit_reveal, choices=("0", "4", "8"), texts=(HIT,)),
    "q-cow": GateKey("q-cow", LESSON, _cow, _cow_reveal, choices=COW_CHOICES, texts=(COW,)),
    "q-attn": GateKey("q-attn", LESSON, _attn, _attn_reveal, choices=ATTN_CHOICES, texts=(ATTN,)),
    "q-paging": GateKey("q-paging", LESSON, _paging, _paging_reveal, choices=speed_table.PAGING_CHOICES,
                        texts=speed_table.TEXTS),
}

PRACTICES = {
    "p-slot": PracticeKey("p-slot", LESSON, _slot, SLOT_HINTS, _slot_mistakes,
                          (SLOT_LOGICAL, SLOT_START, SLOT_FIRST)),
    "p-hit": PracticeKey("p-hit", LESSON, _cached_hit, HIT_HINTS,
                         _hit_mistakes, (HIT_ALL, HIT_TOKENS),
                         canvas=True, bridges=("logits", "prefill")),
}
