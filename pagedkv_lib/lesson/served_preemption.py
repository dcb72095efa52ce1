"""Lesson 04's busy trace served in simulated time by recompute, by recompute reusing the blocks still cached
(vLLM v1's way) and by swap: the runs, their table, and where each run's time went.

:mod:`.engines_today` draws the control around it (:func:`~.engines_today.served_preemption_control`), and the
gate that asks which way finishes sooner reads the same runs (``answer_keys/engines_keys.py``).
"""
from __future__ import annotations

from ..sim import workloads
from ..sim.simulate import kv_budget_blocks
from ..sim.timed_serving import serve_timed


SERVED_BLOCK_SIZE = 16
"""Tokens per block of the served busy trace (:func:`served_preemption_results`), as vLLM's default."""

SERVED_PREEMPTIONS = {"recompute": dict(preemption="recompute"),
                      "recompute, reusing the blocks still cached": dict(preemption="recompute", prefix_caching=True),
                      "swap": dict(preemption="swap")}
"""The three ways :func:`served_preemption_runs` serves a trace when blocks run out (``serve_timed`` arguments)."""


def busy_trace(requests: int = 1000, rate_per_s: float = 20.0, seed: int = 0):
    """ShareGPT-like requests arriving as a Poisson process of ``rate_per_s`` a second: faster than OPT-13B on
    a 40 GiB GPU finishes them, so its blocks run out and requests are preempted."""
    return workloads.poisson_arrivals(workloads.sharegpt_like(requests, seed=seed), rate_per_s, seed=seed)


def served_preemption_results(trace, link_bytes_per_s: float, num_blocks: int,
                              ways=tuple(SERVED_PREEMPTIONS)) -> dict:
    """``trace`` served in simulated time (OPT-13B, ``num_blocks`` blocks of 16) each of ``ways`` (names in
    :data:`SERVED_PREEMPTIONS`), a swap using a host area of four times the GPU's blocks over a link of
    ``link_bytes_per_s`` bytes/s each way: each run's :class:`~..sim.timed_serving.TimedResult`, by way."""
    return {name: serve_timed(trace, num_blocks=num_blocks, block_size=SERVED_BLOCK_SIZE, cpu_blocks=4 * num_blocks,
                              link_bytes_per_s=link_bytes_per_s, **SERVED_PREEMPTIONS[name]) for name in ways}


def served_preemption_runs(trace, link_bytes_per_s: float, num_blocks: int) -> dict[str, dict]:
    """:func:`served_preemption_results` each way of :data:`SERVED_PREEMPTIONS`, as each run's
    :meth:`~..sim.timed_serving.TimedResult.summary`."""
    return {name: r.summary() for name, r in served_preemption_results(trace, link_bytes_per_s, num_blocks).items()}


def served_preemption_table(runs: dict[str, dict], requests: int, num_blocks: int) -> str:
    """:func:`served_preemption_runs` as markdown: time to serve every request, mean time to first token, tokens
    prefilled again after a preemption, tokens a returning request found still cached, and swaps out."""
    rows = [f"| {name} | {s['makespan_s']:,.1f} | {s['mean_ttft_s']:,.1f} | {s['recomputed_tokens']:,} | "
            f"{s['reused_tokens']:,} | {s['preempted_swap']:,} |" for name, s in runs.items()]
    return (f"{requests:,} requests, OPT-13B with {num_blocks:,} blocks of {SERVED_BLOCK_SIZE} tokens; a swap goes "
            f"to a host area of {4 * num_blocks:,} blocks. Simulated seconds.\n\n"
            "| when blocks run out | all served after (s) | mean time to first token (s) | tokens prefilled again | "
            "tokens found still cached | swaps out |\n|---|---|---|---|---|---|\n" + "\n".join(rows))


def time_parts_table(results: dict) -> str:
    """Markdown: where each run's time went (:meth:`~..sim.timed_serving.TimedResult.time_parts`, seconds), by way
    (``results``: :class:`~..sim.timed_serving.TimedResult` by name); each row's parts add up to its last column."""
    rows = []
    for name, r in results.items():
        p = r.time_parts()
        rows.append(f"| {name} | {r.steps:,} | {p['weights_s']:,.2f} | {p['prompt_prefill_s']:,.2f} | "
                    f"{p['prefill_again_s']:,.2f} | {p['transfer_s']:,.2f} | {p['idle_s']:,.2f} | "
                    f"{r.summary()['makespan_s']:,.2f} |")
    return ("| when blocks run out | steps | reading the weights, once a step (s) | prompts prefilled (s) | "
            "prefilled again (s) | over the host link (s) | nothing to run (s) | all served after (s) |\n"
            "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def served_preemption_text(trace, link_bytes_per_s: float, num_blocks: int | None = None) -> str:
    """Markdown: :func:`served_preemption_table` for ``trace`` over that link (``num_blocks``: by default a 40 GiB
    GPU's, :func:`~..sim.simulate.kv_budget_blocks`), then where each run's time went (:func:`time_parts_table`)."""
    blocks = kv_budget_blocks() if num_blocks is None else num_blocks
    results = served_preemption_results(trace, link_bytes_per_s, blocks)
    runs = {name: r.summary() for name, r in results.items()}
    return (served_preemption_table(runs, len(trace), blocks) + "\n\nWhere each run's time went:\n\n"
            + time_parts_table(results))
