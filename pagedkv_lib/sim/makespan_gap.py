"""Why one served run finishes later than another: the makespan difference of two runs, split by cause.

:meth:`~.timed_serving.TimedResult.time_parts` splits one run's makespan into what its steps paid for.
Two runs of the same trace (say, preemption by recompute and by swap) then differ in four places: how many
steps they took (each reads the weights once), the time they sat idle, the prompts' first prefill (the same
for the same trace), and what their preemptions added (tokens prefilled again, or bytes over the host link).
The last part is split once more, into *how many* preemptions there were and *what each cost*, so that a
per-request price (:mod:`.preemption_cost`) can be set beside what a whole trace paid.
"""
from __future__ import annotations

from .timed_result import TimedResult


def preemption_seconds(result: TimedResult) -> float:
    """Seconds a run's preemptions added: tokens prefilled again plus swap transfers (both ways)."""
    parts = result.time_parts()
    return parts["prefill_again_s"] + parts["transfer_s"]


def preemptions(result: TimedResult) -> int:
    """Preemptions of either kind in a run."""
    return result.preempted_swap + result.preempted_recompute


def seconds_per_preemption(result: TimedResult) -> float:
    """What one preemption of a run cost on average (seconds; 0 for a run without any)."""
    n = preemptions(result)
    return preemption_seconds(result) / n if n else 0.0


def makespan_gap(base: TimedResult, other: TimedResult) -> dict:
    """``other``'s makespan minus ``base``'s, by cause (seconds; the values add up to that difference).

    ``steps_s``: more or fewer steps, each reading the weights once; ``idle_s``: waiting for arrivals;
    ``prompt_prefill_s``: the prompts' first prefill; ``preemption_count_s``: the preemptions ``other`` made
    beyond ``base``'s, at ``other``'s cost each; ``preemption_price_s``: ``base``'s number of preemptions
    times the difference in cost per preemption.
    """
    a, b = base.time_parts(), other.time_parts()
    n_a, n_b = preemptions(base), preemptions(other)
    per_a, per_b = seconds_per_preemption(base), seconds_per_preemption(other)
    return {"steps_s": b["weights_s"] - a["weights_s"], "idle_s": b["idle_s"] - a["idle_s"],
            "prompt_prefill_s": b["prompt_prefill_s"] - a["prompt_prefill_s"],
            "preemption_count_s": (n_b - n_a) * per_b, "preemption_price_s": n_a * (per_b - per_a)}
