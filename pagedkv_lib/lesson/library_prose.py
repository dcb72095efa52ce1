"""The prose the library shows in a lesson, gathered for the checks that read lessons' markdown.

Reveals, misconceptions, hints, the opening lens, the learning map and the research-room items are not
markdown cells, but a learner reads them as the lesson's text: the claims scan
(`pagedkv_lib.lesson.claims`) and the section-reference check read them as they read markdown.
"""
from __future__ import annotations

import string

from .answer_keys import GATE_KEYS, PRACTICE_KEYS
from .items import lesson as lesson_items
from .learning_map import map_markdown

__all__ = ["rendered_prose"]


def _blank_fields(template: str) -> str:
    """A ``str.format`` template with each field (a live value) written as "…"."""
    return "".join(lit + ("…" if field is not None else "") for lit, field, *_ in string.Formatter().parse(template))


def rendered_prose(lesson: str) -> list[tuple[str, str]]:
    """``(where, markdown)`` of every piece of prose the library shows in ``lesson``: its gates' reveal
    templates (live fields blanked) and misconceptions, its practices' hints and known mistakes, its
    opening lens, its learning map and its research-room items (an equation item as a formula), their
    titles, evidence and the self-checks that resolve them, except those that pose a number to try ("I
    can predict the hit for 9 tokens": a question, not a claim). Scanned
    by ``tests/test_lesson_claims.py`` and ``tests/test_lesson_references.py`` as its markdown is."""
    les = lesson_items(lesson)
    out = [("learning map", map_markdown(lesson)), (f"{les.lens.id} question", les.lens.question),
           (f"{les.lens.id} reveal", les.lens.reveal)]
    out += [(f"{les.lens.id} misconception", m) for m in les.lens.mistakes.values()]
    for i in les.items:
        out += [(f"item {i.id}", f"${i.content}$" if i.kind == "equation" else i.content),
                (f"item {i.id} title", i.title)]
        out += [(f"item {i.id} evidence", e) for e in i.evidence]
        out += [(f"item {i.id} resolve", r) for r in i.resolve if not r.startswith("I can predict")]
    for key in GATE_KEYS.values():
        if key.lesson == lesson:
            out += [(f"{key.id} reveal", _blank_fields(t)) for t in key.texts]
            out += [(f"{key.id} misconception", m) for m in key.mistakes.values()]
    for key in PRACTICE_KEYS.values():
        if key.lesson == lesson:
            out += [(f"{key.id} hint", h) for h in key.hints]
            out += [(f"{key.id} mistake", m) for m in key.mistake_texts]
    return out
