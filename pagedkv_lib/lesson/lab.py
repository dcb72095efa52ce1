"""The allocation lab's logic: five small traces played on the real block manager.

:func:`run_lab` plays one trace at one block size ``S`` on a
:class:`~pagedkv_lib.blocks.manager.BlockManager`, with sharing (prefix caching, forks) or without,
stores the same final sequences in :class:`~pagedkv_lib.blocks.contiguous.ContiguousArena` runs, and
measures three effects, all in token slots, at the moment every sequence holds all its tokens:

* **tail slack** ``W = R - T_unique`` of the paged run (slots after the last token of each
  sequence's last block);
* **prefix-sharing savings**: reserved slots of the same sequences stored with nothing shared,
  minus those of the run (0 with sharing off);
* **reservation waste (contiguous)**: slots a contiguous server reserves beyond the tokens it
  stores, when it must reserve the model's context (``"max"``, the paper's Orca-Max).

Widgets live in :mod:`pagedkv_lib.lesson.lab_view`; this module is plain Python, so tests and lesson
cells can check every figure without a browser.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import replay
from ..validation import check_choice, check_int
from ..blocks.manager import BlockManager
from ..blocks.contiguous import RESERVATION_POLICIES, ContiguousArena
from ..errors import OutOfBlocksError
from ..ledger import PAGE_BATCH, Request
from ..sim import sharegpt_like

TRACES = ("A1-A3 batch", "parallel sampling", "beam search", "shared system prompt", "ShareGPT-like 20")
"""Trace names :func:`run_lab` accepts."""

EFFECTS = ("tail slack", "prefix-sharing savings", "reservation waste (contiguous)")
"""The three effects a learner predicts between, in token slots."""

DESCRIPTIONS = {
    "A1-A3 batch": "the three requests A1-A3 from the Intuition lesson: three continuations of one "
                   "shared prompt, each with its own short tail",
    "parallel sampling": "one short instruction-style prompt answered by n samples of different lengths "
                         "(the samples fork the prompt)",
    "beam search": "one prompt decoded by n beams; at every step each beam picks a parent beam at random, "
                   "so beams fork and die",
    "shared system prompt": "six requests that start with the same long system prompt, then their own "
                            "question and answer (the prefix cache serves the system prompt)",
    "ShareGPT-like 20": "twenty requests with ShareGPT-like prompt and output lengths, nothing in common",
}
"""What each trace is, in words (shown before the commit: no block or slot figures)."""

_PROMPT, _BEAM_STEPS, _SYSTEM, _USERS = 20, 24, 40, 6


@dataclass(frozen=True, eq=False)
class LabRun:
    """One configuration of the lab, played. Figures in token slots unless a name says blocks."""

    trace: str
    block_size: int
    sharing: bool
    n: int
    manager: BlockManager          # the chosen run (sharing as asked)
    unshared: BlockManager         # the same final sequences, each stored on its own
    request_ids: list
    context: int                   # tokens a contiguous server reserves per sequence ("max")
    contiguous: dict               # policy -> ContiguousArena holding the final sequences

    @property
    def ledger(self) -> dict:
        """``BlockManager.stats().summary()`` of the chosen run: logical, unique, reserved, slack."""
        return self.manager.stats().summary()

    @property
    def effects(self) -> dict:
        """Slots per effect, keyed by :data:`EFFECTS`."""
        run = self.ledger
        saved = self.unshared.stats().reserved_slots - run["reserved"]
        cats = self.contiguous["max"].categories()
        waste = cats["reservation"] + cats["internal_fragmentation"] + cats["external_fragmentation"]
        return dict(zip(EFFECTS, (run["slack"], saved, waste)))

    @property
    def dominant(self) -> str | tuple:
        """The effect with the most slots, or a tuple of the effects that tie for the most."""
        effects = self.effects
        top = [e for e in EFFECTS if effects[e] == max(effects.values())]
        return top[0] if len(top) == 1 else tuple(top)


def run_lab(trace: str = "A1-A3 batch", block_size: int = 16, sharing: bool = True, n: int = 4,
            seed: int = 0) -> LabRun:
    """Play ``trace`` at ``block_size`` tokens per block; ``n`` samples or beams where the trace has them."""
    trace = check_choice("trace", trace, TRACES)
    S = check_int("block_size", block_size, minimum=1, maximum=4096)
    n = check_int("n", n, minimum=2, maximum=16)
    seed = check_int("seed", seed, minimum=0)
    if not isinstance(sharing, bool):
        raise TypeError(f"sharing must be True or False, got {sharing!r}")
    shared, ids, context = _PLAYERS[trace](S, n, np.random.default_rng(seed), None)
    st = shared.stats()
    tight = st.used_blocks + st.cached_free_blocks
    if tight < shared.num_blocks:  # play again in a pool with no block it never needed (a tidier map)
        try:
            shared, ids, context = _PLAYERS[trace](S, n, np.random.default_rng(seed), tight)
        except OutOfBlocksError:  # it needed more at some step than it holds at the end: keep the first
            pass
    tokens = {rid: shared.token_ids(rid) for rid in ids}
    unshared = _unshared(tokens, S)
    arenas = {p: _arena(tokens, p, context) for p in RESERVATION_POLICIES}
    return LabRun(trace, S, sharing, n, shared if sharing else unshared, unshared, ids, context, arenas)


def _pool(lengths, S: int, pool: int | None = None) -> int:
    """``pool`` if given, else blocks for sequences of these lengths plus one each for a copy."""
    return pool or sum(-(-int(t) // S) + 1 for t in lengths)


def _unshared(tokens: dict, S: int) -> BlockManager:
    """The sequences stored one by one, no prefix cache, no forks: nothing shared."""
    need = sum(-(-len(t) // S) for t in tokens.values())
    manager = BlockManager(need, S, enable_prefix_caching=False)
    for rid, toks in tokens.items():
        manager.add_request(rid, toks)
    return manager


def _arena(tokens: dict, policy: str, context: int) -> ContiguousArena:
    """A contiguous arena just large enough for every sequence's run, each holding its tokens."""
    probe = ContiguousArena(1, policy, context)
    arena = ContiguousArena(sum(probe.reservation_for(len(t)) for t in tokens.values()), policy, context)
    for rid, toks in tokens.items():
        arena.admit(rid, len(toks), len(toks))
    return arena


def _pow2(tokens: int) -> int:
    """The context of a toy model: the smallest power of two that holds ``tokens``."""
    return 1 << (tokens - 1).bit_length()


# ------------------------------------------------------------------ the traces

def _page_batch(S, n, rng, pool):
    longest = max(r.tokens for r in PAGE_BATCH)
    return replay.play_paged(PAGE_BATCH, S, share=True, num_blocks=pool), [r.id for r in PAGE_BATCH], _pow2(longest)


def _parallel(S, n, rng, pool):
    tails = rng.integers(8, 41, size=n)
    batch = [Request(f"s{j + 1}", _PROMPT, int(t), "prompt") for j, t in enumerate(tails)]
    return replay.play_paged(batch, S, share=True, num_blocks=pool), [r.id for r in batch], _pow2(_PROMPT + int(tails.max()))


def _beams(S, n, rng, pool):
    """Neutral beam search: each step, every beam slot picks a parent uniformly; the first pick of
    a parent continues it, further picks fork it, unpicked beams are freed; then each beam decodes."""
    manager = BlockManager(_pool([_PROMPT + _BEAM_STEPS] * n, S, pool), S)
    manager.add_request("b1", list(range(1, _PROMPT + 1)))
    beams, made = ["b1"], 1
    for j in range(1, n):
        made += 1
        manager.fork("b1", f"b{made}")
        beams.append(f"b{made}")
    for step in range(_BEAM_STEPS):
        picks = rng.integers(0, n, size=n)
        new, seen = [], set()
        for p in picks:
            if p in seen:
                made += 1
                manager.fork(beams[p], f"b{made}")
                new.append(f"b{made}")
            else:
                seen.add(p)
                new.append(beams[p])
        for p, rid in enumerate(beams):
            if p not in seen:
                manager.free(rid)
        for j, rid in enumerate(new):
            manager.append_tokens(rid, [10_000 * (step + 1) + j])
        beams = new
    return manager, sorted(beams, key=lambda rid: int(rid[1:])), _pow2(_PROMPT + _BEAM_STEPS)


def _system_prompt(S, n, rng, pool):
    users, answers = rng.integers(5, 21, size=_USERS), rng.integers(10, 41, size=_USERS)
    manager = BlockManager(_pool(_SYSTEM + users + answers, S, pool), S)
    system = list(range(1, _SYSTEM + 1))
    for r in range(_USERS):
        rid, base = f"u{r + 1}", 1_000 * (r + 1)
        manager.add_request(rid, system + list(range(base, base + int(users[r]))))
        manager.append_tokens(rid, list(range(base + 500, base + 500 + int(answers[r]))))
    return manager, [f"u{r + 1}" for r in range(_USERS)], _pow2(int((_SYSTEM + users + answers).max()))


def _sharegpt(S, n, rng, pool):
    trace = sharegpt_like(20, seed=0)
    prompts, outputs = trace.prompt_len, trace.output_len[:, 0]
    manager = BlockManager(_pool(prompts + outputs, S, pool), S)
    for r, (p, o) in enumerate(zip(prompts, outputs)):
        rid, base = f"r{r + 1}", 10_000 * (r + 1)
        manager.add_request(rid, list(range(base, base + int(p))))
        manager.append_tokens(rid, list(range(base + int(p), base + int(p) + int(o))))
    return manager, [f"r{r + 1}" for r in range(len(prompts))], trace.max_context


_PLAYERS = {"A1-A3 batch": _page_batch, "parallel sampling": _parallel, "beam search": _beams,
            "shared system prompt": _system_prompt, "ShareGPT-like 20": _sharegpt}


# ------------------------------------------------------------------ what the numbers say

def ledger_table(run: LabRun) -> str:
    """The chosen run's ledger (``BlockManager.stats().summary()``) as a markdown table."""
    led, st = run.ledger, run.manager.stats()
    return ("| logical | unique | reserved | slack | blocks in use | copy-on-write copies |\n"
            "|---:|---:|---:|---:|---:|---:|\n"
            f"| {led['logical']} | {led['unique']} | {led['reserved']} | {led['slack']} "
            f"| {st.used_blocks} | {st.cow_copies} |")


def explain(run: LabRun) -> str:
    """Why the outcome is what it is, in markdown, from the run's own figures."""
    led, S, fx = run.ledger, run.block_size, run.effects
    top = max(fx.values())
    lead = (" and ".join(run.dominant) + " tie") if isinstance(run.dominant, tuple) else f"{run.dominant} dominates"
    seqs = len(run.request_ids)
    parts = [f"**{lead}** ({top:,} token slots). Tail slack {fx[EFFECTS[0]]:,}, sharing savings "
             f"{fx[EFFECTS[1]]:,}, contiguous reservation waste {fx[EFFECTS[2]]:,}.",
             f"*Paged.* {seqs} sequences hold {led['logical']:,} logical tokens. The block manager stores "
             f"{led['unique']:,} unique token states in {led['reserved'] // S:,} blocks of S = {S}, that is "
             f"R = {led['reserved']:,} slots, so W = R - T_unique = {led['slack']:,}. Slack sits only in a "
             f"table's last block: at most S - 1 = {S - 1} slots per sequence."]
    unshared = run.unshared.stats().reserved_slots
    if run.sharing:
        parts.append(f"*Sharing.* Stored with nothing shared, the same sequences reserve {unshared:,} slots; "
                     f"sharing saves {fx[EFFECTS[1]]:,}. Only full blocks are shared: a block a second "
                     f"sequence writes into is copied first (copy-on-write, "
                     f"{run.manager.stats().cow_copies} copies here), and a prompt served from the cache "
                     "reuses only its full blocks. Larger blocks leave fewer full shared blocks.")
    else:
        parts.append(f"*Sharing is off*: every sequence keeps its own copy of any common tokens "
                     f"({unshared:,} slots reserved). Turn sharing on to see what it saves.")
    res = {p: sum(a.placement(rid)[1] for rid in a.request_ids()) for p, a in run.contiguous.items()}
    parts.append(f"*Contiguous.* A server that must reserve the model's context ({run.context:,} tokens "
                 f"here) for each sequence reserves {res['max']:,} slots for {led['logical']:,} tokens and "
                 f"wastes {fx[EFFECTS[2]]:,}. Knowing more helps: the next power of two of each length "
                 f"reserves {res['pow2']:,}, the exact final length {res['oracle']:,} (an oracle no server "
                 "has). Contiguous runs cannot share blocks.")
    if S >= run.context:
        parts.append(f"With S = {S} at least the whole context ({run.context:,} tokens), every block "
                     "table is one block: paging then reserves as much as the contiguous server, or more.")
    if run.trace == "ShareGPT-like 20":
        parts.append("Nothing is shared in this trace: different prompts hold different tokens, so the "
                     "prefix cache finds no full block it has seen.")
    parts.append("These are slot counts at one moment (every sequence complete). They say nothing "
                 "about speed or latency.")
    return "\n\n".join(parts)
