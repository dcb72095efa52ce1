"""The gates of each lesson's last part, "what today's engines do" (lessons 02, 03 and 04).

Each answer is computed from the live values its cell passes in, through the library
(:mod:`pagedkv_lib.blocks.block_hash`, :mod:`pagedkv_lib.accounting`, :mod:`pagedkv_lib.sim.preemption_cost`,
:mod:`pagedkv_lib.sim.timed_serving` with :mod:`pagedkv_lib.sim.makespan_gap`, :mod:`pagedkv_lib.sim.cpu_tier`);
the reveals' tables come from :mod:`..engines_today`. Where the answer and the reveal need the same simulation or bisection, it runs
once (:func:`.key_types.one_pass`).
"""
from __future__ import annotations

from ... import accounting as acc
from ...blocks.block_hash import wrong_hit_probability
from ...sim import preemption_cost as pc
from ...sim.cpu_tier import replay_with_cpu_tier
from ...sim.makespan_gap import makespan_gap, preemptions, seconds_per_preemption
from .. import engines_today as E
from .key_types import GateKey, need, one_pass

# ------------------------------------------------------------------ 03_code: a 64-bit key's wrong hits

WRONG_HIT_CHOICES = ("rarer than one in a billion", "around one in a million", "around one in twenty",
                     "more likely than not")
WRONG_HIT = """Each lookup of a block that is not cached meets a key that equals one of the n cached keys with
chance n / 2^b; over m lookups the chances add up, to about m n / 2^b while that is small. With n = {n:,}
and m = {m:,} a 64-bit key gives **{p64:.3g}**, SHA-256 **{p256:.3g}**: the same lookups, the same cache,
and a wrong hit becomes something no deployment will ever see. The table runs other cache sizes:"""
WRONG_HIT_MEASURED = """The formula is not taken on trust: with a key cut to {bits} bits it can be watched at work. In
{trials:,} seeded trials a cache of {cached_blocks:,} random blocks met {lookups:,} lookups of other blocks; at
least one lookup hit a wrong block in **{measured:.1%}** of the trials, where the formula says **{formula:.1%}**."""
WRONG_HIT_ONE = ("That is close to the chance of one lookup. The question asks about all of them: every lookup "
                 "is another draw, and the draws add up.")
WRONG_HIT_ALWAYS = ("That would need m n near 2^64; a million blocks and a trillion lookups are still "
                    "a few percent short of it.")


def _wrong_hit_p(live) -> float:
    n, m = need(live, "q-wrong-hit", "cached_blocks", "lookups")
    return wrong_hit_probability(n, 64, m)


def _wrong_hit(live) -> str:
    p = _wrong_hit_p(live)
    return WRONG_HIT_CHOICES[(p >= 1e-9) + (p >= 1e-4) + (p >= 0.5)]


def _wrong_hit_reveal(live) -> list:
    n, m = need(live, "q-wrong-hit", "cached_blocks", "lookups")
    return [WRONG_HIT.format(n=n, m=m, p64=_wrong_hit_p(live), p256=wrong_hit_probability(n, 256, m)),
            E.wrong_hit_table(lookups=m), WRONG_HIT_MEASURED.format(**E.measured_wrong_hits())]


# ------------------------------------------------------------------ 02_math: a hybrid model's bytes per token

HYBRID = """{model} at {T:,} tokens: {L_full} full-attention layers keep all {T:,} tokens, {L_sw} sliding-window
layers only the last {W:,}. On average a token costs **{mean_kib:.1f} KiB** instead of {c_kib:.0f} KiB, a factor of
**{ratio:.2f}**. The factor grows with the length, toward L / L_full. The requests that fit a {gpu_gib:,.0f} GiB GPU
(utilization {utilization:g}, blocks of {block_size}) differ by another factor again, because whole blocks are counted per group,
and the {pad} padding layers that give every group the same page size cost memory too:"""
HYBRID_ALL = "That counts every layer as full attention: the sliding-window layers keep only their window."


def _hybrid_ratio(live) -> float:
    model, T = need(live, "q-hybrid-bytes", "model", "T")
    return acc.bytes_per_token(model) / acc.mean_bytes_per_token(model, T)


def _hybrid_reveal(live) -> list:
    model, T, rows = need(live, "q-hybrid-bytes", "model", "T", "rows")
    spec, gpu = acc.get_model(model), rows[0]
    return [HYBRID.format(model=model, T=T, gpu_gib=gpu["gpu_bytes"] / acc.GiB, utilization=gpu["utilization"],
                          block_size=gpu["block_size"], L_full=spec.num_full_layers, L_sw=spec.num_sliding_layers,
                          W=spec.sliding_window, mean_kib=acc.mean_bytes_per_token(model, T) / 1024,
                          c_kib=acc.bytes_per_token(model) / 1024, ratio=_hybrid_ratio(live),
                          pad=acc.kv_cache_groups(model).padding_layers),
            E.hybrid_table(rows)]


# ------------------------------------------------------------------ 04_demo: swap or recompute; a CPU tier

PREEMPT_CHOICES = ("swap, at every length", "recompute, at every length",
                   "recompute for short requests, swap for long ones",
                   "swap for short requests, recompute for long ones")
PREEMPT = """Swapping moves C_tok bytes per token out and back; recomputing spends 2P FLOPs per token on the
weights and, for attention, FLOPs that grow with the square of the length. Both costs for {model} under these
constants, at four lengths:"""
PREEMPT_VLLM = """**What vLLM chose.** vLLM V1 preempts by recomputation by default, not by swapping; its
documentation says recomputation has lower overhead in the V1 architecture (vLLM documentation, *Optimization and
Tuning*, `docs/configuration/optimization.md`, read 2026-12-04). This cost model prices each preemption alone;
it leaves out two things that can tip a real engine toward recomputing: a preempted request's freed blocks stay
in the prefix cache (lesson 03) until they are evicted, so its recompute can start with hits, and a swap needs
pinned host memory and a link that other transfers share. Hugging Face transformers' continuous batching swaps
to a pinned CPU buffer when it has room and falls back to a "soft reset" (recompute) when it has not
(Transformers documentation, *Continuous batching architecture*, read 2026-12-04)."""
PREEMPT_RECOMPUTE = ("Recompute needs no host memory, but its cost grows faster than the transfer's: a model with "
                     "few KV heads has few bytes per token to move, and a fast link moves them in less time "
                     "than the weights take to run.")
PREEMPT_LONG = "The attention part of a recompute grows with the square of the length, the transfer only linearly."


def _preempt(live) -> tuple[str, list]:
    model, link = need(live, "q-preempt", "model", "link")
    cross = pc.crossover_tokens(model, link_bytes_per_s=link)     # one bisection, for the answer and the reveal
    choice = PREEMPT_CHOICES[0 if cross == 0 else 1 if cross >= pc.MAX_CROSSOVER_TOKENS else 2]
    return choice, [PREEMPT.format(model=model), E.preemption_table(model, link, cross), PREEMPT_VLLM]


# ------------------------------------------------------------------ 04_demo: a served trace, swap or recompute

SERVED_CHOICES = ("recompute", "swap")
SERVED = """Plain recompute served every request after **{re_s:,.1f} s**, swap after **{sw_s:,.1f} s**, over the
same link, trace and memory. A step of the timed loop lasts as long as reading the weights once, plus its prefill
tokens, plus its bytes over the host link; added up over each run, those parts are the whole time:"""
SERVED_WHY = """**Why the per-request table and the served trace disagree.** Swap's time less recompute's is
**{total_s:+.2f} s**. The two runs take {steps_re:,} and {steps_sw:,} steps, which accounts for {steps_gap:+.2f} s of
it, and time with nothing to run for {idle_gap:+.2f} s. So the step count hardly moves: not in the {held:,} steps of
swap's run in which a waiting request was held back because a swapped one waited for room, nor because a recompute's
prefill rides in a step's token budget. The gap is what the preemptions added to their steps. One preemption cost
**{per_re:.2f} ms** by recompute and **{per_sw:.2f} ms** by swap on average, close to what the per-request table
prices (for {tokens:,.0f} tokens, the mean a swap moved: {model_re:.2f} ms to recompute, {model_sw:.2f} ms to swap).
What differs is how many: recompute preempted **{n_re:,}** times, swap **{n_sw:,}**. That difference in number
accounts for {count_s:+.2f} s, the difference in price for {price_s:+.2f} s. And **{undone:,}** of the swaps out
sent away a request that had been swapped back in at the start of the same step: the loop swaps a request in before
it sets aside the blocks the running requests' next tokens need, so their decodes found no room and the youngest
request, the one just back, left again. Those round trips moved {undone_gib:,.1f} GiB over the link for nothing:
**{undone_s:.2f} s**."""
SERVED_SWAP = ("The per-request table prices one preemption. A served trace pays for every preemption it makes, "
               "and how many it makes depends on the way: a request swapped back in takes its blocks at once, and "
               "when the running requests' next tokens then find no room, it is the one sent out again.")


def _served(live) -> tuple:
    trace, link, blocks = need(live, "q-served-preempt", "trace", "link", "num_blocks")
    results = E.served_preemption_results(trace, link, blocks, ways=("recompute", "swap"))  # once, for both
    re, sw = results["recompute"], results["swap"]
    re_s, sw_s = re.summary()["makespan_s"], sw.summary()["makespan_s"]
    answer = SERVED_CHOICES if re_s == sw_s else SERVED_CHOICES[0] if re_s < sw_s else SERVED_CHOICES[1]
    gap, tokens = makespan_gap(re, sw), sw.swapped_tokens / max(sw.preempted_swap, 1)
    why = SERVED_WHY.format(
        total_s=sw_s - re_s, steps_re=re.steps, steps_sw=sw.steps, steps_gap=gap["steps_s"],
        idle_gap=gap["idle_s"], held=sw.admissions_held_steps,
        per_re=1e3 * seconds_per_preemption(re), per_sw=1e3 * seconds_per_preemption(sw), tokens=tokens,
        model_re=1e3 * pc.recompute_seconds(round(tokens)), model_sw=1e3 * pc.swap_seconds(round(tokens),
                                                                                            link_bytes_per_s=link),
        n_re=preemptions(re), n_sw=preemptions(sw), count_s=gap["preemption_count_s"],
        price_s=gap["preemption_price_s"], undone=sw.undone_swaps, undone_gib=sw.undone_swap_bytes / acc.GiB,
        undone_s=sw.undone_swap_bytes / link)
    return answer, [SERVED.format(re_s=re_s, sw_s=sw_s), E.time_parts_table(results), why]


# ------------------------------------------------------------------ 04_demo: chunked prefill

CHUNKING_CHOICES = ("both get shorter", "the longest gets shorter, the 99th percentile longer",
                    "the longest gets longer, the 99th percentile shorter", "both get longer")
CHUNKING = """Whole prompts: a step that admits prompts prefills them whole, and every running request waits
through it without a token: {stalled_w:,} stalled decodes, the longest gap between two tokens of one request
**{max_w:,.0f} ms**, the 99th percentile **{p99_w:,.0f} ms**. Chunked under the same {budget:,} tokens per
step: {stalled_c:,} stalled decodes. The prefill work is still there, now inside steps that also decode, so
every request decoding in such a step waits as long as its piece of prompt takes. The longest gap is
**{max_c:,.0f} ms** ({max_moved}), the 99th percentile **{p99_c:,.0f} ms** ({p99_moved}); the run takes
{steps_c:,} steps instead of {steps_w:,}, and the mean time to first token is {ttft_c:.2f} s instead of
{ttft_w:.2f} s. The budget caps how much prefill one step carries: try others in the control under the gate."""
CHUNKING_ALL_SHORTER = ("Chunking ends the stalls, but the prefill work does not go away: it now rides in the "
                        "decode steps, and every decode in such a step waits for its piece of prompt.")
CHUNKING_REVERSED = ("Without chunking the longest gap is a stall: a running request waits through one or more "
                     "whole-prompt prefill steps in a row. Chunking caps the prefill of any one step at the "
                     "budget, and no request waits through a step without a token.")


def _moved(before: float, after: float) -> str:
    return "shorter" if after < before else "longer" if after > before else "unchanged"


def _chunking(live) -> tuple:
    trace, blocks, budget = need(live, "q-chunking", "trace", "num_blocks", "token_budget")
    runs = E.chunking_runs(trace, budget, blocks)      # both schedules once, for the answer and the reveal
    w, c = runs["whole prompts"], runs["chunked"]
    longest = {"shorter": (0, 1), "longer": (2, 3), "unchanged": (0, 1, 2, 3)}[_moved(w["max_itl_s"], c["max_itl_s"])]
    p99 = {"shorter": (0, 2), "longer": (1, 3), "unchanged": (0, 1, 2, 3)}[_moved(w["p99_itl_s"], c["p99_itl_s"])]
    right = tuple(CHUNKING_CHOICES[k] for k in sorted(set(longest) & set(p99)))
    text = CHUNKING.format(
        budget=budget, stalled_w=w["stalled_decodes"], stalled_c=c["stalled_decodes"],
        max_w=1e3 * w["max_itl_s"], max_c=1e3 * c["max_itl_s"], p99_w=1e3 * w["p99_itl_s"], p99_c=1e3 * c["p99_itl_s"],
        max_moved=_moved(w["max_itl_s"], c["max_itl_s"]), p99_moved=_moved(w["p99_itl_s"], c["p99_itl_s"]),
        steps_w=w["steps"], steps_c=c["steps"], ttft_w=w["mean_ttft_s"], ttft_c=c["mean_ttft_s"])
    return (right[0] if len(right) == 1 else right), [text, E.chunking_table(runs, budget, len(trace), blocks)]


CPU_TIER = """A CPU tier keeps what the GPU evicts, under the same chain keys, so a conversation that comes back
after its blocks left the GPU loads them over the host link instead of prefilling them again:"""


def _cpu_tier(live) -> tuple[float, list]:
    trace, gpu, cpu = need(live, "q-cpu-tier", "trace", "gpu_blocks", "cpu_blocks")
    replay = replay_with_cpu_tier(trace, gpu_blocks=gpu, cpu_blocks=cpu)   # once, for the answer and the reveal
    return 100 * replay.hit_rate, [CPU_TIER, E.cpu_tier_summary(replay, gpu, cpu)]


GATES = {
    "q-wrong-hit": GateKey("q-wrong-hit", "03_code", _wrong_hit, _wrong_hit_reveal, choices=WRONG_HIT_CHOICES,
                           texts=(WRONG_HIT, WRONG_HIT_MEASURED),
                           mistakes={WRONG_HIT_CHOICES[0]: WRONG_HIT_ONE, WRONG_HIT_CHOICES[3]: WRONG_HIT_ALWAYS}),
    "q-hybrid-bytes": GateKey("q-hybrid-bytes", "02_math", _hybrid_ratio, _hybrid_reveal, units="x", tolerance=0.15,
                              texts=(HYBRID,), mistakes={1.0: HYBRID_ALL}),
    "q-preempt": one_pass("q-preempt", "04_demo", _preempt, choices=PREEMPT_CHOICES,
                          texts=(PREEMPT, PREEMPT_VLLM),
                          mistakes={PREEMPT_CHOICES[1]: PREEMPT_RECOMPUTE, PREEMPT_CHOICES[3]: PREEMPT_LONG}),
    "q-served-preempt": one_pass("q-served-preempt", "04_demo", _served, choices=SERVED_CHOICES,
                                 texts=(SERVED, SERVED_WHY), mistakes={SERVED_CHOICES[1]: SERVED_SWAP}),
    "q-chunking": one_pass("q-chunking", "04_demo", _chunking, choices=CHUNKING_CHOICES, texts=(CHUNKING,),
                           mistakes={CHUNKING_CHOICES[0]: CHUNKING_ALL_SHORTER, CHUNKING_CHOICES[2]: CHUNKING_REVERSED}),
    "q-cpu-tier": one_pass("q-cpu-tier", "04_demo", _cpu_tier, units="%", tolerance=0.1, texts=(CPU_TIER,)),
}
PRACTICES: dict = {}
