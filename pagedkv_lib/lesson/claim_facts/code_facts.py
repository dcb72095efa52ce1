"""Lesson 03's facts: the block manager's section-1 walk, hits and keys.

Part of :mod:`pagedkv_lib.lesson.claim_facts`, which joins the four lessons' facts."""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact
from .worked_example import batch, prompt, tails


def _section1():
    """Lesson 03's section 1 replayed: r1, r2 (a hit), r3, fork and append, free, r5."""
    from pagedkv_lib.blocks.manager import BlockManager
    S = 4
    bm = BlockManager(num_blocks=12, block_size=S)
    r1 = list(range(100, 110))
    bm.add_request("r1", r1)
    seen = {"S": S, "r1": len(r1), "table1": bm.block_table("r1")}
    bm.add_request("r2", r1[:8] + [7, 8, 9])
    bm.add_request("r3", r1[:8])
    seen["r3"] = bm.num_tokens("r3")
    bm.fork("r2", "r2b")
    seen["r2"] = bm.num_tokens("r2")
    bm.append_tokens("r2b", [42])
    bm.append_tokens("r2", [43])
    r5 = bm.token_ids("r2") + [50, 51]
    for rid in ["r1", "r2", "r2b", "r3"]:
        bm.free(rid)
    seen["hit5"] = bm.add_request("r5", r5)
    return seen


def _step1():
    """T, S, T, S, ceil(T/S), tokens in the last block, its slack (r1 at S = 4)."""
    s = _section1()
    T, S, n = s["r1"], s["S"], len(s["table1"])
    return T, S, T, S, n, T - S * (n - 1), S * n - T


def _r2_last_block():
    s = _section1()
    return s["r2"] - s["S"] * ((s["r2"] - 1) // s["S"]), s["S"]


def _a_at(S):
    from pagedkv_lib.lesson.replay import play_paged
    return play_paged(batch(), block_size=S)


def _ledger(S):
    from pagedkv_lib.ledger import allocate
    return allocate(batch(), S)


def _stored_30_22():
    """Token states the manager and the ledger store for A1-A3 at S = 8: (30, 8, 22)."""
    return _a_at(8).stats().unique_tokens, 8, _ledger(8).unique_tokens


def _s8_story():
    """At S = 8: the prefix's extra tokens, both stores, and 22 + 2 x 4."""
    (P,) = prompt()
    extra = P % 8
    return (8, extra, _a_at(8).stats().unique_tokens, _ledger(8).unique_tokens,
            _ledger(8).unique_tokens, len(batch()) - 1, extra)


def _s4_agree():
    if _a_at(4).stats().summary() != _ledger(4).summary() or prompt()[0] % 4:
        raise ValueError("at S = 4 the manager and the ledger differ")
    return (4,)


def _roads():
    """Reserved slots, the ledger's slack, second and third copies, the manager's slack."""
    m, led = _a_at(8).stats(), _ledger(8)
    if m.reserved_slots != led.reserved_slots:
        raise ValueError("the two roads reserve different slots")
    return m.reserved_slots, led.slack, m.unique_tokens - led.unique_tokens, m.slack


def _position_12():
    """Position P shares block P // 8 with positions 8 .. P - 1."""
    (P,) = prompt()
    return P, P // 8 * 8, P - 1


def _tinylm_hit():
    """Prompt tokens the prefix cache serves to the second copy (whole blocks of 8 before the
    last token), of the tinylm prompt's tokens."""
    from pagedkv_lib import tinylm
    T = len(tinylm.encode("Paged KV caches map tokens to blocks."))
    return (T - 1) // 8 * 8, T


def _last_block_positions():
    """First and last position of r2's (and so r2b's) last block in lesson 03's section 1."""
    s = _section1()
    S, last = s["S"], (s["r2"] - 1) // s["S"]
    return S * last, S * last + S - 1


def _key_bits():
    from pagedkv_lib.blocks.block_hash import HASH_BITS
    return HASH_BITS["blake2b-64"]


_03 = "03_code"
FACTS_03 = (
    Fact(_03, "stores 30 token states for the three requests A1-A3 at $S = 8$ where the "
         "ledger of the Intuition lesson stores 22", "c23", check=_stored_30_22),
    Fact(_03, "A 10-token prompt at $S = 4$ needs $\\lceil 10/4 \\rceil = 3$ blocks; the "
         "last one holds 2 tokens and 2 slots of slack", "c04", check=_step1),
    Fact(_03, "The partly filled block 2 has", "c04", check=lambda: (_section1()["table1"][2],)),
    Fact(_03, "that repeats r1's first 8 tokens", "c07", code="r2 = r1[:8]"),
    Fact(_03, "is *exactly* r1's first 8 tokens", "c10", code='add_request("r3", r1[:8])'),
    Fact(_03, "r2's last block holds 3 of its 4 slots", "c12", check=_r2_last_block),
    Fact(_03, "12 tokens of prefill skipped", "c20", check=lambda: (_section1()["hit5"],)),
    Fact(_03, "continue one 12-token prompt, with tails of 3, 5 and 2 tokens", "c23",
         check=lambda: prompt() + tails()),
    Fact(_03, "At $S = 4$ the prefix fills three blocks exactly", "c23", check=_s4_agree),
    Fact(_03, "At $S = 8$ the prefix is one full block and 4 more tokens, and the manager "
         "stores **30** token states where the ledger stores **22**: $22 + 2 \\times 4$",
         "c23", check=_s8_story),
    Fact(_03, "The 4 prefix tokens in block 1", "c25",
         check=lambda: (prompt()[0] % 8, _a_at(8).block_table("A3")[1])),
    Fact(_03, "A2 and A3 find block 0 in the cache", "c27",
         check=lambda: (_a_at(8).block_table("A2")[0],)),
    Fact(_03, "stores those 4 tokens again", "c27", check=lambda: (prompt()[0] % 8,)),
    Fact(_03, "reserve the same 40 slots as the ledger, but the ledger leaves 18 of them empty "
         "where the manager fills 8 with second and third copies of prefix tokens (slack 10)",
         "c27", check=_roads),
    Fact(_03, "so position 12 must share a block with positions 8-11", "c25",
         check=_position_12),
    Fact(_03, "found 32 of its 37 tokens in the prefix cache", "c49", check=_tinylm_hit),
    # the library's prose in this lesson (library_prose.rendered_prose): items, reveals, misconceptions
    Fact(_03, "Controls: S = 4", "c04", check=lambda: (_section1()["S"],)),
    Fact(_03, "r3 = r1's first 8 tokens", "c10", code='add_request("r3", r1[:8])'),
    Fact(_03, "before it writes token 42", "c15", code='append_tokens("r2b", [42])'),
    Fact(_03, "r2b's positions 8-11", "c15", check=lambda: _last_block_positions()),
    Fact(_03, "a 64-bit key gives", "eng-03d", code="under 64-bit keys"),
    Fact(_03, "near 2^64", "eng-03d", check=lambda: (2, _key_bits())),
    Fact(_03, "the manager stores 30 token states where the ledger stores 22", "c23",
         check=lambda: (_stored_30_22()[0], _stored_30_22()[2])),
    # the gates' choices (library_prose.rendered_prose): q-hit's are every whole-block count of r3's prompt;
    # q-attn's bands end at the tolerance the kernels' asserts hold them to
    Fact(_03, "0 | 4 | 8", "c10", check=lambda: tuple(range(0, _section1()["r3"] + 1, _section1()["S"]))),
    Fact(_03, "below 1e-5", "c43", code="err <= 1e-5"),
    Fact(_03, "above 1e-5", "c43", code="err <= 1e-5"),
    Fact(_03, "(30 vs 22 for A1-A3 at $S = 8$)", "c23",
         check=lambda: (_stored_30_22()[0], _stored_30_22()[2], 8)),
    Fact(_03, "equal the ledger's at $S = 4$ and differ by $2 \\times 4$ tokens at $S = 8$",
         "c23", check=lambda: (_s4_agree()[0], len(batch()) - 1, prompt()[0] % 8, 8)),
)
