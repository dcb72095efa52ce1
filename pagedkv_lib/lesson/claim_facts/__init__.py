"""Each lesson's facts of its worked example, as the prose states them, with the check for each.

A `Fact` ties one phrase of a lesson's markdown to the code cell that shows its numbers live, and
either to a function that computes them from the library or to the piece of that cell's code that
chooses them (how to add one: `pagedkv_lib.lesson.claims`). The functions import what they need
when called, so importing this module costs nothing.

One module per lesson (``intuition_facts`` ... ``demo_facts``), the worked example they share in
``worked_example``.
"""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact

from .code_facts import FACTS_03
from .demo_facts import FACTS_04
from .intuition_facts import FACTS_01
from .math_facts import FACTS_02

FACTS: tuple[Fact, ...] = FACTS_01 + FACTS_02 + FACTS_03 + FACTS_04

__all__ = ["FACTS", "FACTS_01", "FACTS_02", "FACTS_03", "FACTS_04"]
