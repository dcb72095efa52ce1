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
