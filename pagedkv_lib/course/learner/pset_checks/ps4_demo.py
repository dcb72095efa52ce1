"""Problem set 4's visible checks (the simulator and the lab), one function per test cell.

Each ``qN_tests(t, V)`` takes the test cell's record ``t`` and your numbers ``V``, checks that your
answer is set and of the right kind, and returns ``(checks, your answer)`` for the grader's checks.
"""
from __future__ import annotations

import numbers
from typing import Any


def _set(t, name: str) -> Any:
    """Your variable ``name``, after checking that you set it."""
    t.checks.require(t.value(name) is not None, f"Set {name} in the cell above and run it.")
    return t.value(name)


def _fraction(t, name: str) -> float:
    """Your ``name``, checked to be a fraction between 0 and 1."""
    share = _set(t, name)
    t.checks.require(isinstance(share, numbers.Real) and not isinstance(share, bool), f"{name} should be a number, got {share!r}")
    t.checks.require(0 <= share <= 1, f"{name} = {share} should be a fraction between 0 and 1 (not a percentage).")
    return share


def _count(t, name: str, unit: str) -> int:
    """Your ``name``, checked to be a whole number (an int)."""
    n = _set(t, name)
    t.checks.require(isinstance(n, int) and not isinstance(n, bool), f"{name} should be a whole number of {unit} (an int), got {n!r}")
    return n


def q1_tests(t, V) -> tuple[Any, float]:
    """Q1: ``slack_share`` is a fraction."""
    return t.checks, _fraction(t, "slack_share")


def q2_tests(t, V) -> tuple[Any, float]:
    """Q2: ``sharing_saving`` is a fraction, and not 0."""
    saving = _fraction(t, "sharing_saving")
    t.checks.require(saving > 0, "sharing_saving = 0: without sharing nothing is saved; use the \"paged+sharing\" policy.")
    return t.checks, saving


def q3_tests(t, V) -> tuple[Any, int]:
    """Q3: ``capacity_tokens`` is a positive whole number."""
    n = _count(t, "capacity_tokens", "tokens")
    t.checks.require(n > 0, "A token count is positive.")
    return t.checks, n


def q4_tests(t, V) -> tuple[Any, list]:
    """Q4: both ratios are positive numbers; returns ``(checks, [over max, over oracle])``."""
    t.checks.require(t.value("batch_gain_over_max") is not None, "Set batch_gain_over_max in the cell above and run it.")
    t.checks.require(t.value("batch_gain_over_oracle") is not None, "Set batch_gain_over_oracle too.")
    gains = [t.value("batch_gain_over_max"), t.value("batch_gain_over_oracle")]
    t.checks.require(all(isinstance(x, numbers.Real) and not isinstance(x, bool) and x > 0 for x in gains),
                     f"both ratios should be positive numbers, got {gains!r}")
    return t.checks, gains


def q5_tests(t, V) -> tuple[Any, int]:
    """Q5: ``lab_sharing_saved_bytes`` is a positive whole number."""
    n = _count(t, "lab_sharing_saved_bytes", "bytes")
    t.checks.require(n > 0, f"lab_sharing_saved_bytes = {n}: the samples share their prompt's full blocks, so sharing saves something.")
    return t.checks, n


#: Q7's two policies, as ``preempt_winner`` names them.
Q7_POLICIES = ("swap", "recompute")


def q7_tests(t, V) -> tuple[Any, str, float]:
    """Q7: ``preempt_winner`` names a policy and ``preempt_margin`` is a ratio of at least 1."""
    winner = _set(t, "preempt_winner")
    t.checks.require(isinstance(winner, str) and winner.strip().lower() in Q7_POLICIES,
                     f"preempt_winner should be \"swap\" or \"recompute\", got {winner!r}")
    margin = _set(t, "preempt_margin")
    t.checks.require(isinstance(margin, numbers.Real) and not isinstance(margin, bool),
                     f"preempt_margin should be a number, got {margin!r}")
    t.checks.require(margin >= 1, f"preempt_margin = {margin} is below 1: it is the larger total divided by "
                                  "the smaller, at least 1.")
    return t.checks, winner.strip().lower(), margin


def q7_outcome(swap_s: float, recompute_s: float) -> tuple[str, float]:
    """``(winner, margin)`` from two totals in seconds: the cheaper policy (a tie goes to recompute, which
    needs no host memory) and the dearer total over the cheaper."""
    return ("swap" if swap_s < recompute_s else "recompute"), max(swap_s, recompute_s) / min(swap_s, recompute_s)


def q7_mistakes(swap_s: float, recompute_s: float, *, linear_s: float, decode_s: float, other_link_swap_s: float,
                default_mfu_recompute_s: float) -> list[tuple[tuple[str, float], str]]:
    """Known wrong ``(winner, margin)`` pairs, each one slip, from the right totals (seconds over the trace)
    and the totals a slip computes instead: ``linear_s`` recompute without its attention term, ``decode_s``
    recompute at one decode step per token, ``other_link_swap_s`` swap over the other PCIe link,
    ``default_mfu_recompute_s`` recompute at the library's default MFU."""
    winner = q7_outcome(swap_s, recompute_s)[0]
    return [(q7_outcome(swap_s / 2, recompute_s), "A swap moves the blocks out to host memory and later back "
                                                  "in: count the link twice."),
            (q7_outcome(swap_s * 8, recompute_s), "The link's constant is in bytes per second already: dividing "
                                                  "it by 8 counts bits."),
            (q7_outcome(swap_s / 8, recompute_s), "The link's constant and the KV cache are both in bytes: "
                                                  "multiplying by 8 counts bits."),
            (q7_outcome(swap_s, decode_s), "Recompute is a prefill: all T tokens in one pass at prefill FLOP/s, "
                                           "not one decode step (a read of every weight) per token."),
            (q7_outcome(swap_s, linear_s), "A prefill also computes causal attention over its T tokens: add "
                                           "2 * L * H_q * d_head * T**2 FLOPs."),
            (q7_outcome(other_link_swap_s, recompute_s), "That is the other PCIe link: use V.q7_link."),
            (q7_outcome(swap_s, default_mfu_recompute_s), "That is the library's default MFU: use V.q7_mfu."),
            ((winner, max(swap_s, recompute_s) - min(swap_s, recompute_s)), "That is the seconds saved; the "
                                                                            "question asks for the ratio of the two totals.")]
