"""Each lesson's facts of its worked example, as the prose states them, with the check for each.

A `Fact` ties one phrase of a lesson's markdown to the code cell that shows its numbers live and to
a function that computes them from the library (how to add one: `pagedkv_lib.lesson.claims`).
"""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact

FACTS: tuple[Fact, ...] = ()
