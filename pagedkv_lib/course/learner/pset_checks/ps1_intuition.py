"""Problem set 1's visible checks (paging by intuition), one function per test cell.

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


def q1_tests(t, V) -> tuple[Any, Any]:
    """Q1: ``block_of_position`` is one of the request's physical blocks."""
    block = _set(t, "block_of_position")
    t.checks.require(isinstance(block, int) and block in V.q1_block_table,
                     f"block_of_position should be one of the request's physical blocks {V.q1_block_table} (an int), got {block!r}")
    return t.checks, block


def q2_tests(t, V) -> tuple[Any, str]:
    """Q2: ``largest_waste`` names one of the three kinds of waste."""
    kinds = ('reservation', 'internal', 'external')
    waste = _set(t, "largest_waste")
    t.checks.require(isinstance(waste, str) and waste.strip().lower() in kinds,
                     f"largest_waste should be one of {kinds} (a string), got {waste!r}")
    return t.checks, waste.strip().lower()


def q3_tests(t, V) -> tuple[Any, int]:
    """Q3: ``shared_blocks_used`` is a whole number, at least one block per continuation."""
    n = _set(t, "shared_blocks_used")
    t.checks.require(isinstance(n, int) and not isinstance(n, bool),
                     f"shared_blocks_used should be a whole number of blocks (an int), got {n!r}")
    t.checks.require(n >= V.q3_continuations, f"shared_blocks_used = {n}: each of the {V.q3_continuations} continuations "
                     "needs at least one block of its own.")
    return t.checks, n


def q4_tests(t, V) -> tuple[Any, int]:
    """Q4: ``token_states_read`` is a positive whole number."""
    n = _set(t, "token_states_read")
    t.checks.require(isinstance(n, int) and not isinstance(n, bool),
                     f"token_states_read should be a whole number of token states (an int), got {n!r}")
    t.checks.require(n > 0, "token_states_read counts token states: it is positive.")
    return t.checks, n


def q5_tests(t, V) -> tuple[Any, float]:
    """Q5: ``slack_estimate_slots`` is a number of slots, never negative."""
    slots = _set(t, "slack_estimate_slots")
    t.checks.require(isinstance(slots, numbers.Real) and not isinstance(slots, bool),
                     f"slack_estimate_slots should be a number of slots, got {slots!r}")
    t.checks.require(slots >= 0, f"slack_estimate_slots = {slots}: slack counts empty slots, so it is never negative.")
    return t.checks, slots


def q6_tests(t, V) -> tuple[Any, str]:
    """Q6: ``paging_changes`` holds letters from a to d (a string, list or set), returned sorted, as one string."""
    letters = _set(t, "paging_changes")
    if isinstance(letters, (set, frozenset)):
        letters = sorted(letters)
    letters = "".join(str(x) for x in letters) if isinstance(letters, (list, tuple)) else letters
    t.checks.require(isinstance(letters, str) and letters and set(letters.lower().replace(",", "").replace(" ", "")) <= set("abcd"),
                     f"paging_changes should hold letters from a, b, c, d, got {t.value('paging_changes')!r}")
    return t.checks, "".join(sorted(set(letters.lower().replace(",", "").replace(" ", ""))))
