"""Lesson 02 (Math): what its predictions and its practice hold back until the learner commits."""
from __future__ import annotations

from ... import accounting as acc
from ...accounting import GiB
from .key_types import GateKey, PracticeKey, need

LESSON = "02_math"

CTOK = """$C_{{tok}}$ = 2 x {L} x {H_kv} x {d_head} x {b} = **{c_tok:,} bytes = {kib} KiB** per token, the figure
the PagedAttention paper rounds to 800 KB. One 2,048-token request then holds {gib:.2f} GiB of cache (the
paper says 1.6 GB). The presets in `acc.MODELS` come from each model's published configuration:"""


def _ctok(live) -> int:
    (c_tok,) = need(live, "q-ctok", "C_tok")
    return c_tok // 1024


def _models_table() -> str:
    """Every preset's L, H_q, H_kv and C_tok in KiB, as a markdown table."""
    rows = [f"| {name} | {m.num_layers} | {m.num_query_heads} | {m.num_kv_heads} | "
            f"{acc.bytes_per_token(m) / 1024:g}" + (" (MLA)" if m.is_mla else "") + " |"
            for name, m in acc.MODELS.items()]
    return "| model | L | H_q | H_kv | C_tok (KiB) |\n|---|---|---|---|---|\n" + "\n".join(rows)


def _ctok_reveal(live) -> list:
    c_tok, L, H_kv, d_head, b = need(live, "q-ctok", "C_tok", "L", "H_kv", "d_head", "b")
    return [CTOK.format(L=L, H_kv=H_kv, d_head=d_head, b=b, c_tok=c_tok, kib=c_tok // 1024,
                        gib=2048 * c_tok / GiB), _models_table()]


RESERVED = """T = {T} tokens -> N = {N} blocks, **R = {S} x {blocks} = {R} slots**, W = {R} - {tokens} =
{W} slots of slack, all of it in the last blocks."""


def _reserved_reveal(live) -> list:
    T, N, R, W, S = need(live, "q-reserved", "T", "N", "R", "W_slack", "S")
    return [RESERVED.format(T=T, N=N, S=S, blocks=sum(N), R=R, tokens=sum(T), W=W)]


SHARED4 = """The three tables point at the same physical blocks (orange outlines) for the prefix, and each
tail lands in blocks of its own: the prefix is stored once, T_shared_saved = {saved} tokens."""
SHARED8 = """At S = 8 the prefix no longer fills its last block, and the rule starts each tail in a fresh
block anyway: every table has a hole in the *middle* (a half-empty block). Sharing still cuts the
reserved slots from {plain8} (the same three sequences stored apart, at S = 8) to {reserved8}, but it raises slack from
{plain_slack8} to {slack8} slots: sharing saves memory, and can leave more of what it keeps empty. Real
block managers treat that partial prefix block differently (vLLM shares only *full* blocks; a fork
shares its partial block until it writes); lesson `03_code` runs both on a real block manager."""


def _shared_reveal(live) -> list:
    shared, alone, s8, T, fig, fig8 = need(live, "q-shared", "shared", "alone", "s8", "T", "figure",
                                           "figure8")
    tables = f"With sharing: {shared.summary()}, tables {shared.tables}.  \nWithout: {alone.summary()}."
    return [tables, fig, SHARED4.format(saved=shared.shared_saved_tokens), fig8,
            SHARED8.format(plain8=acc.reserved_slots(T, 8), reserved8=s8.reserved_slots,
                           plain_slack8=acc.tail_slack(T, 8), slack8=s8.slack)]


CAPACITY = """Llama-3-8B fits about {ratio:g}x as many tokens. Part of that is smaller weights, but most of
it is Eq. 1: OPT-13B caches {opt_heads} full KV heads in each of {opt_layers} layers ({opt_kib} KiB per
token), Llama-3-8B only {llama_heads} KV heads in {llama_layers} layers ({llama_kib} KiB). Qwen2.5-7B, with
fewer KV heads and layers still, fits more again. GQA was designed for this: how many requests a server can
batch is set by how many tokens of KV cache fit, and that by $H_{{kv}}$."""


def _capacity_reveal(live) -> list:
    ratio, lines, figure = need(live, "q-capacity", "ratio", "lines", "figure")
    opt, llama = acc.get_model("OPT-13B"), acc.get_model("Llama-3-8B")
    return ["\n".join(lines), figure,
            CAPACITY.format(ratio=ratio, opt_heads=opt.num_kv_heads, opt_layers=opt.num_layers,
                            opt_kib=acc.bytes_per_token(opt) // 1024, llama_heads=llama.num_kv_heads,
                            llama_layers=llama.num_layers, llama_kib=acc.bytes_per_token(llama) // 1024)]


SLACK_CHOICES = ("yes for all four", "yes for 4, 16, 64; no for 512", "no for 4, 16, 64; yes for 512",
                 "no for all four")
SLACK = """The prediction holds while S is small next to the typical request. From S = {first_off} on (gap
{gap:+.1%}; the median request has {median:.0f} tokens) the points leave the 5% band: many requests fit
inside one block, so T mod S is no longer uniform, and a short request wastes most of its only block.
Slack grows linearly with S, which argues for small blocks; lesson 03 shows what pulls the other way
(block-table size, kernel efficiency, prefix-cache granularity)."""


def _slack(live) -> str:
    small_ok, big_ok = need(live, "q-slack", "small_ok", "big_ok")
    return SLACK_CHOICES[2 * (not small_ok) + (not big_ok)]


def _slack_reveal(live) -> list:
    table, figure, gap, median = need(live, "q-slack", "table", "figure", "gap", "median")
    first_off = min(S for S in sorted(gap) if abs(gap[S]) > 0.05)
    return [table, figure, SLACK.format(first_off=first_off, gap=gap[first_off], median=median)]


BLOCKS_HINTS = ("Blocks hold S tokens each; the last one may be partly filled.",
                "Divide, and look at what is left over: a partly filled block is still a whole block.",
                "The formula for N_i in section 3.")
BLOCKS_DOWN = "That rounds down: the tokens left over need a block too."
BLOCKS_TIMES = "That multiplies; divide tokens by slots per block."


def _blocks_mistakes(live) -> dict:
    T, size = need(live, "p-blocks", "tokens", "block_size")
    return {T // size: BLOCKS_DOWN, T * size: BLOCKS_TIMES}


GATES = {
    "q-ctok": GateKey("q-ctok", LESSON, _ctok, _ctok_reveal, units="KiB", tolerance=0.25, texts=(CTOK,)),
    "q-reserved": GateKey("q-reserved", LESSON, lambda live: need(live, "q-reserved", "R")[0],
                          _reserved_reveal, units="slots", tolerance=0, texts=(RESERVED,)),
    "q-shared": GateKey("q-shared", LESSON, lambda live: need(live, "q-shared", "shared")[0].reserved_slots,
                        _shared_reveal, units="slots", tolerance=0, texts=(SHARED4, SHARED8)),
    "q-capacity": GateKey("q-capacity", LESSON, lambda live: need(live, "q-capacity", "ratio")[0],
                          _capacity_reveal, units="x", tolerance=0.15, texts=(CAPACITY,)),
    "q-slack": GateKey("q-slack", LESSON, _slack, _slack_reveal, choices=SLACK_CHOICES, texts=(SLACK,)),
}

PRACTICES = {
    "p-blocks": PracticeKey(
        "p-blocks", LESSON, lambda live: acc.blocks_needed(*need(live, "p-blocks", "tokens", "block_size")),
        BLOCKS_HINTS, _blocks_mistakes,
        (BLOCKS_DOWN, BLOCKS_TIMES), units="blocks", canvas=True, bridges=("Eq. 1", "expected slack")),
}
