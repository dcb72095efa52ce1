"""The gates of each lesson's last part, "what today's engines do" (lessons 02, 03 and 04).

Each answer is computed from the live values its cell passes in, through the library
(:mod:`pagedkv_lib.blocks.block_hash`, :mod:`pagedkv_lib.accounting`, :mod:`pagedkv_lib.sim.preemption_cost`,
:mod:`pagedkv_lib.sim.cpu_tier`); the reveals' tables come from :mod:`..engines_today`.
"""
from __future__ import annotations

from ... import accounting as acc
from ...blocks.block_hash import wrong_hit_probability
from ...sim import preemption_cost as pc
from .. import engines_today as E
from .key_types import GateKey, need

# ------------------------------------------------------------------ 03_code: a 64-bit key's wrong hits

WRONG_HIT_CHOICES = ("rarer than one in a billion", "around one in a million", "around one in twenty",
                     "more likely than not")
WRONG_HIT = """Each lookup of a block that is not cached meets a key that equals one of the n cached keys with
chance n / 2^b; over m lookups the chances add up, to about m n / 2^b while that is small. With n = {n:,}
and m = {m:,} a 64-bit key gives **{p64:.3g}**, SHA-256 **{p256:.3g}**: the same lookups, the same cache,
and a wrong hit becomes something no deployment will ever see. The table runs other cache sizes:"""
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
            E.wrong_hit_table(lookups=m)]


# ------------------------------------------------------------------ 02_math: a hybrid model's bytes per token

HYBRID = """{model} at {T:,} tokens: {L_full} full-attention layers keep all {T:,} tokens, {L_sw} sliding-window
layers only the last {W:,}. On average a token costs **{mean_kib:.1f} KiB** instead of {c_kib:.0f} KiB, a factor of
**{ratio:.2f}**. The factor grows with the length, toward L / L_full. The requests that fit an 80 GiB GPU
(utilization 0.9, blocks of 16) differ by another factor again, because whole blocks are counted per group,
and the {pad} padding layers that give every group the same page size cost memory too:"""
HYBRID_ALL = "That counts every layer as full attention: the sliding-window layers keep only their window."


def _hybrid_ratio(live) -> float:
    model, T = need(live, "q-hybrid-bytes", "model", "T")
    return acc.bytes_per_token(model) / acc.mean_bytes_per_token(model, T)


def _hybrid_reveal(live) -> list:
    model, T, rows = need(live, "q-hybrid-bytes", "model", "T", "rows")
    spec = acc.get_model(model)
    return [HYBRID.format(model=model, T=T, L_full=spec.num_full_layers, L_sw=spec.num_sliding_layers,
                          W=spec.sliding_window, mean_kib=acc.mean_bytes_per_token(model, T) / 1024,
                          c_kib=acc.bytes_per_token(model) / 1024, ratio=_hybrid_ratio(live),
                          pad=acc.kv_cache_groups(model).padding_layers),
            E.hybrid_table(rows)]


# ------------------------------------------------------------------ 04_demo: swap or recompute; a CPU tier

PREEMPT_CHOICES = ("swap, at every length", "recompute, at every length",
                   "recompute for short requests, swap for long ones",
                   "swap for short requests, recompute for long ones")
PREEMPT = """Swapping moves C_tok bytes per token out and back; recomputing spends 2P FLOPs per token on the
weights and, for attention, FLOPs that grow with the square of the length. Under these constants the
crossover for {model} is {cross:,} tokens (0: swap wins from the first token):"""
PREEMPT_RECOMPUTE = ("Recompute needs no host memory, but its cost grows faster than the transfer's: a model with "
                     "few KV heads has few bytes per token to move, and a fast link moves them in less time "
                     "than the weights take to run.")
PREEMPT_LONG = "The attention part of a recompute grows with the square of the length, the transfer only linearly."


def _preempt(live) -> str:
    model, link = need(live, "q-preempt", "model", "link")
    cross, top = pc.crossover_tokens(model, link_bytes_per_s=link), 1 << 24
    return PREEMPT_CHOICES[0 if cross == 0 else 1 if cross >= top else 2]


def _preempt_reveal(live) -> list:
    model, link = need(live, "q-preempt", "model", "link")
    return [PREEMPT.format(model=model, cross=pc.crossover_tokens(model, link_bytes_per_s=link)),
            E.preemption_text(model, link)]


CPU_TIER = """A CPU tier keeps what the GPU evicts, under the same chain keys, so a conversation that comes back
after its blocks left the GPU loads them over the host link instead of prefilling them again:"""
def _cpu_rate(live) -> float:
    trace, gpu, cpu = need(live, "q-cpu-tier", "trace", "gpu_blocks", "cpu_blocks")
    from ...sim.cpu_tier import replay_with_cpu_tier
    return 100 * replay_with_cpu_tier(trace, gpu_blocks=gpu, cpu_blocks=cpu).hit_rate


def _cpu_reveal(live) -> list:
    trace, gpu, cpu = need(live, "q-cpu-tier", "trace", "gpu_blocks", "cpu_blocks")
    return [CPU_TIER, E.cpu_tier_text(trace, gpu, cpu)]


GATES = {
    "q-wrong-hit": GateKey("q-wrong-hit", "03_code", _wrong_hit, _wrong_hit_reveal, choices=WRONG_HIT_CHOICES,
                           texts=(WRONG_HIT,),
                           mistakes={WRONG_HIT_CHOICES[0]: WRONG_HIT_ONE, WRONG_HIT_CHOICES[3]: WRONG_HIT_ALWAYS}),
    "q-hybrid-bytes": GateKey("q-hybrid-bytes", "02_math", _hybrid_ratio, _hybrid_reveal, units="x", tolerance=0.15,
                              texts=(HYBRID,), mistakes={1.0: HYBRID_ALL}),
    "q-preempt": GateKey("q-preempt", "04_demo", _preempt, _preempt_reveal, choices=PREEMPT_CHOICES,
                         texts=(PREEMPT,),
                         mistakes={PREEMPT_CHOICES[1]: PREEMPT_RECOMPUTE, PREEMPT_CHOICES[3]: PREEMPT_LONG}),
    "q-cpu-tier": GateKey("q-cpu-tier", "04_demo", _cpu_rate, _cpu_reveal, units="%", tolerance=0.1,
                          texts=(CPU_TIER,)),
}
PRACTICES: dict = {}
