"""Each lesson's facts of its worked example, as the prose states them, with the check for each.

A `Fact` ties one phrase of a lesson's markdown to the code cell that shows its numbers live, and
either to a function that computes them from the library or to the piece of that cell's code that
chooses them (how to add one: `pagedkv_lib.lesson.claims`). The functions import what they need
when called, so importing this module costs nothing.
"""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact


def _batch():
    from pagedkv_lib.ledger import PAGE_BATCH
    return PAGE_BATCH


def _prompt():
    """The A1-A3 prompt's length in tokens (one prompt shared by all three)."""
    (prefix,) = {r.prefix for r in _batch()}
    return (prefix,)


def _tails():
    return tuple(r.tail for r in _batch())


def _unshared_tables():
    """Block tables of A1-A3 played without sharing at S = 4 (lesson 01's first figure)."""
    from pagedkv_lib.lesson.replay import play_paged
    plain = play_paged(_batch(), 4, share=False, num_blocks=16)
    return [plain.block_table(r.id) for r in _batch()]


def _span(blocks):
    """(first, last) of a run of consecutive block ids; raises when they are not one run."""
    blocks = sorted(blocks)
    if blocks != list(range(blocks[0], blocks[-1] + 1)):
        raise ValueError(f"blocks {blocks} are not one run")
    return blocks[0], blocks[-1]


def _prompt_block_refs():
    """The ref count of A1's first (prompt) block after one decode step with sharing, at S = 4."""
    from pagedkv_lib.lesson.replay import play_paged
    shared = play_paged(_batch(), 4, steps=1, num_blocks=28)
    return shared.ref_count(shared.block_table(_batch()[0].id)[0])


def _after_one_step():
    """Each request's prompt, its length after one decode step, then each final length."""
    (p,) = _prompt()
    return (p, p + 1, *(r.tokens for r in _batch()))


_01 = "01_intuition"
FACTS_01 = (
    Fact(_01, "one 12-token prompt", "cell-02", check=_prompt),
    Fact(_01, "(here $S = 4$)", "cell-04", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "map to physical blocks 0-2", "cell-04",
         check=lambda: _span(_unshared_tables()[0][:3])),
    Fact(_01, "maps to block 9", "cell-04", check=lambda: (_unshared_tables()[0][3],)),
    Fact(_01, "produced its 13th token", "cell-04", check=lambda: (_prompt()[0] + 1,)),
    Fact(_01, "had taken blocks 3-8", "cell-04",
         check=lambda: _span(t for table in _unshared_tables()[1:] for t in table[:3])),
    Fact(_01, "its 12 prompt tokens plus one of its own (13 tokens), and will end at 15, 17 "
         "and 14 tokens", "cell-02", check=_after_one_step),
    Fact(_01, "the same memory, 112 token slots", "cell-08", code="num_slots=112"),
    Fact(_01, "maximum length of 32", "cell-08", code='"max", 32'),
    Fact(_01, "A fourth request of 20 tokens", "cell-08", code="waiting = 20"),
    Fact(_01, "Blocks of $S = 4$ slots", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "the 12-token prompt are the same tokens", "cell-02", check=_prompt),
    Fact(_01, "the same 12-token prompt arrives and will produce 6 tokens", "cell-17",
         code='Request("A4", 12, 6,'),
    Fact(_01, "With sharing at $S = 4$", "cell-17", code="play_paged(PAGE_BATCH + (A4,), 4)"),
    # the library's prose in this lesson (library_prose.rendered_prose): research-room items, reveals
    Fact(_01, "a contiguous run of 32 slots", "cell-08", code='"max", 32'),
    Fact(_01, "in an arena of 112", "cell-08", code="num_slots=112"),
    Fact(_01, "a waiting request of 20 tokens", "cell-08", code="waiting = 20"),
    Fact(_01, "after one decode step, S = 4", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
    Fact(_01, "the 12-token prompt shared", "cell-02", check=_prompt),
    Fact(_01, "have ref count 3", "cell-11", check=lambda: (_prompt_block_refs(),)),
    Fact(_01, "which blocks have ref count 3", "cell-11", check=lambda: (_prompt_block_refs(),)),
    Fact(_01, "sits in physical block 9", "cell-04", check=lambda: (_unshared_tables()[0][3],)),
    Fact(_01, "ceil(12 /", "cell-02", check=_prompt),
    Fact(_01, "/ 4) prompt blocks", "cell-11", code="play_paged(PAGE_BATCH, 4,"),
)


def _model(name):
    from pagedkv_lib.accounting import get_model
    return get_model(name)


def _weights_8b():
    """Bytes per fp16 weight, Llama-3-8B's parameters, the same bytes again, its weights in GiB."""
    from pagedkv_lib.accounting import DTYPE_BYTES, GiB
    m = _model("Llama-3-8B")
    b = DTYPE_BYTES[m.weight_dtype]
    return b, m.num_params, b, round(m.weight_bytes / GiB, 1)


def _kv_factor():
    """Eq. 1's factor: bytes per token over L * H_kv * d * b (keys and values)."""
    from pagedkv_lib.accounting import bytes_per_token
    m = _model("OPT-13B")
    return (bytes_per_token(m) / (m.num_layers * m.num_kv_heads * m.head_dim
                                  * m.bytes_per_scalar),)


def _fp16_bytes():
    from pagedkv_lib.accounting import DTYPE_BYTES
    if DTYPE_BYTES["fp16"] != DTYPE_BYTES["bf16"]:
        raise ValueError("fp16 and bf16 differ in size")
    return (DTYPE_BYTES["fp16"],)


def _slack_at(S):
    from pagedkv_lib.accounting import expected_slack_per_request
    return S, expected_slack_per_request(S)


def _slack_16():
    return _slack_at(16)


def _slackless_block_size():
    """The one block size with no expected slack."""
    from pagedkv_lib.accounting import expected_slack_per_request
    (S,) = [S for S in range(1, 1025) if expected_slack_per_request(S) == 0]
    return S


def _doubled_default():
    """vLLM's default block size (the paper's, registered as cited) and twice it."""
    from pagedkv_lib.lesson.claims import cited
    (S,) = cited("block-size").values
    return S, 2 * S


_02 = "02_math"
FACTS_02 = (
    Fact(_02, "share a 12-token prompt", "cell-17", check=_prompt),
    Fact(_02, "(2 for fp16/bf16)", "cell-05", check=_fp16_bytes),
    Fact(_02, "The factor 2 is keys", "cell-05", check=_kv_factor),
    Fact(_02, "only 8 KV heads (each shared by 4 query heads)", "cell-05",
         check=lambda: (_model("Llama-3-8B").num_kv_heads,
                        _model("Llama-3-8B").num_query_heads
                        // _model("Llama-3-8B").num_kv_heads)),
    Fact(_02, "= 512 + 64 scalars", "cell-07",
         check=lambda: (_model("DeepSeek-V3").kv_lora_rank, _model("DeepSeek-V3").rope_head_dim)),
    Fact(_02, "on one 80 GiB GPU", "cell-20", code='acc.kv_capacity(name, 80 * GiB'),
    Fact(_02, "parameters x 2 bytes in fp16 (Llama-3-8B: 8.03e9 x 2 B = 15.0 GiB)", "cell-20",
         check=_weights_8b),
    Fact(_02, "At $S = 16$ that is 7.5 slots per request", "cell-23", check=_slack_16),
    # the library's prose in this lesson (library_prose.rendered_prose): the lens, reveals, items
    Fact(_02, "doubles from 16 to 32", "bb9edca7", check=lambda: _doubled_default()),
    Fact(_02, "from 7.5 at S = 16 to 15.5 at S = 32", "cell-23",
         check=lambda: (*_slack_16()[::-1], *_slack_at(32)[::-1])),
    Fact(_02, "tests it on 2,000 lengths", "cell-23", code="size=2000"),
    Fact(_02, "utilization 0.9, blocks of 16", "cell-20", code="utilization=0.9, block_size=16"),
    Fact(_02, "$C_{tok}$ = 2 x", "cell-05", check=_kv_factor),
    Fact(_02, "At S = 8 the prefix no longer fills", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "stored apart, at S = 8)", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "leave the 5% band", "cell-23", code="within 5% of"),
    Fact(_02, "The block tables drawn at S = 4", "cell-17", code="allocate(PAGE_BATCH, block_size=4)"),
    Fact(_02, "and S = 8", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "with sharing at S = 8", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "on an 80 GiB GPU", "cell-20", code="acc.kv_capacity(name, 80 * GiB"),
    Fact(_02, "Block size 1 is best, since it has no slack", "cell-23", check=lambda: (_slackless_block_size(),)),
    Fact(_02, "why vLLM chose 16", "cell-23", check=lambda: _doubled_default()[:1]),
)


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
    return play_paged(_batch(), block_size=S)


def _ledger(S):
    from pagedkv_lib.ledger import allocate
    return allocate(_batch(), S)


def _stored_30_22():
    """Token states the manager and the ledger store for A1-A3 at S = 8: (30, 8, 22)."""
    return _a_at(8).stats().unique_tokens, 8, _ledger(8).unique_tokens


def _s8_story():
    """At S = 8: the prefix's extra tokens, both stores, and 22 + 2 x 4."""
    (P,) = _prompt()
    extra = P % 8
    return (8, extra, _a_at(8).stats().unique_tokens, _ledger(8).unique_tokens,
            _ledger(8).unique_tokens, len(_batch()) - 1, extra)


def _s4_agree():
    if _a_at(4).stats().summary() != _ledger(4).summary() or _prompt()[0] % 4:
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
    (P,) = _prompt()
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
         check=lambda: _prompt() + _tails()),
    Fact(_03, "At $S = 4$ the prefix fills three blocks exactly", "c23", check=_s4_agree),
    Fact(_03, "At $S = 8$ the prefix is one full block and 4 more tokens, and the manager "
         "stores **30** token states where the ledger stores **22**: $22 + 2 \\times 4$",
         "c23", check=_s8_story),
    Fact(_03, "The 4 prefix tokens in block 1", "c25",
         check=lambda: (_prompt()[0] % 8, _a_at(8).block_table("A3")[1])),
    Fact(_03, "A2 and A3 find block 0 in the cache", "c27",
         check=lambda: (_a_at(8).block_table("A2")[0],)),
    Fact(_03, "stores those 4 tokens again", "c27", check=lambda: (_prompt()[0] % 8,)),
    Fact(_03, "reserve the same 40 slots as the ledger, but the ledger leaves 18 of them empty "
         "where the manager fills 8 with second and third copies of prefix tokens (slack 10)",
         "c27", check=_roads),
    Fact(_03, "so position 12 must share a block with positions 8-11", "c25",
         check=_position_12),
    Fact(_03, "to `1e-5`", "c43", code="err <= 1e-5"),
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
    Fact(_03, "equal to dense to 1e-5", "c43", code="err <= 1e-5"),
    Fact(_03, "(30 vs 22 for A1-A3 at $S = 8$)", "c23",
         check=lambda: (_stored_30_22()[0], _stored_30_22()[2], 8)),
    Fact(_03, "equal the ledger's at $S = 4$ and differ by $2 \\times 4$ tokens at $S = 8$",
         "c23", check=lambda: (_s4_agree()[0], len(_batch()) - 1, _prompt()[0] % 8, 8)),
)


def _lab_tries(trace, *sizes):
    """The block sizes a "things to try" line names, once each has played in the lab."""
    from pagedkv_lib.lesson.lab import run_lab
    for S in sizes:
        run_lab(trace, S)
    return sizes


def _sharegpt_20():
    from pagedkv_lib.lesson.lab import run_lab
    return (len(run_lab("ShareGPT-like 20").request_ids),)


def _sim_default(parameter):
    import inspect
    from pagedkv_lib.sim import simulate
    return inspect.signature(simulate).parameters[parameter].default


def _sim_gpu_gib():
    return (_sim_default("gpu_memory_gib"),)


_04 = "04_demo"
FACTS_04 = (
    Fact(_04, "(a 12-token prompt, tails of 3, 5 and 2 tokens)", "cell-05",
         check=lambda: _prompt() + _tails()),
    # the trace's name: in the markdown ("**ShareGPT-like 20**") and the lab's labels (lab.TRACES, module_prose)
    Fact(_04, "ShareGPT-like 20", "cell-05", check=_sharegpt_20),
    Fact(_04, "A1-A3 at $S = 4$, then $S = 8$, then $S = 32$", "cell-05",
         check=lambda: _lab_tries("A1-A3 batch", 4, 8, 32)),
    Fact(_04, "Beam search at $S = 8$, then at $S = 64$", "cell-05",
         check=lambda: _lab_tries("beam search", 8, 64)),
    Fact(_04, "ShareGPT-like 20 at $S = 1$ and at $S = 64$", "cell-05",
         check=lambda: _sharegpt_20() + _lab_tries("ShareGPT-like 20", 1, 64)[1:]),
    Fact(_04, "(OPT-13B on a 40 GiB GPU)", "cell-08", check=_sim_gpu_gib),
    # the library's prose in this lesson (library_prose.rendered_prose): the lens, items
    Fact(_04, "blocks of 16 instead", "cell-08", check=lambda: (_sim_default("block_size"),)),
    Fact(_04, "trace of 300 requests", "cell-08", code='"ShareGPT-like, 300 requests"'),
    Fact(_04, "OPT-13B on 40 GiB", "cell-08", check=_sim_gpu_gib),
    Fact(_04, "The lab at S = 4, 8 and 32", "cell-05", check=lambda: _lab_tries("A1-A3 batch", 4, 8, 32)),
    Fact(_04, "fork of a 20-token prompt at S = 8", "cell-11", code="one 20-token prompt at S = 8"),
)

FACTS: tuple[Fact, ...] = FACTS_01 + FACTS_02 + FACTS_03 + FACTS_04
