"""The prose the library shows in a lesson, gathered for the checks that read lessons' markdown.

Reveals, misconceptions, hints, the opening lens, the learning map and the research-room items are not
markdown cells, but a learner reads them as the lesson's text: the claims scan
(`pagedkv_lib.lesson.claims`) and the section-reference check read them as they read markdown.

Tables' captions and headers, figure descriptions, legends and control labels are written in the library's
modules as string literals and f-strings: `module_prose` reads them from the source of the modules of
:data:`DISPLAY_MODULES` (which lessons render each) by the rule its docstring states.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import string

from .answer_keys import GATE_KEYS, PRACTICE_KEYS
from .items import lesson as lesson_items
from .learning_map import map_markdown

__all__ = ["rendered_prose", "module_prose", "DISPLAY_MODULES"]

_EVERY = ("01_intuition", "02_math", "03_code", "04_demo")

DISPLAY_MODULES: dict[str, tuple[str, ...]] = {
    "pagedkv_lib.lesson.engines_today": ("02_math", "03_code", "04_demo"),
    "pagedkv_lib.lesson.served_preemption": ("04_demo",),
    "pagedkv_lib.lesson.lab_view": ("04_demo",),
    "pagedkv_lib.lesson.paper_view": ("04_demo",),
    "pagedkv_lib.lesson.viz": _EVERY,
    "pagedkv_lib.figure_text": _EVERY,
    "pagedkv_lib.lesson.speed_table": ("03_code",),
    "pagedkv_lib.lesson.lab": ("04_demo",),
    "pagedkv_lib.sim.plots": ("04_demo",),            # the simulator lab's figures
    "pagedkv_lib.sim.paper_comparison": ("04_demo",),
    "pagedkv_lib.kernels.timing": ("03_code",),       # the timing table's row names
    "pagedkv_lib.kernels.gpu_timing": ("03_code",),
    # the machinery every lesson shows: gates, practices, the research room and its hand-off, drafts, the record
    **{f"pagedkv_lib.lesson.{m}": _EVERY for m in ("gates", "gate_view", "practice", "canvas", "click_delay",
                                                   "room", "handoff", "drafts", "record", "learning_map")},
}
"""The modules whose fixed text (captions, table headers, figure descriptions and legends, control labels,
gate choices, feedback) a lesson shows, and the lessons that show it."""

_TAG = re.compile(r"<[^>]*>")


def _is_docstring(node, parent) -> bool:
    return (isinstance(parent, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and parent.body and isinstance(parent.body[0], ast.Expr) and parent.body[0].value is node) or (
        isinstance(parent, ast.Expr) and isinstance(node, ast.Constant))


def module_prose(module: str) -> list[tuple[str, str]]:
    """``(where, text)`` of each piece of displayed text written in ``module``'s source.

    The rule: every string literal and every f-string (its fields, live values, written as "…"), that holds
    a space between words, counts as displayed text, except a docstring or a bare string statement (the
    documentation under a constant), a message of ``raise`` or ``assert`` (an error, not the lesson's text),
    and markup: HTML tags are dropped (``<img ... style="max-width: 100%">``), their text kept. A string
    stitched from pieces (``"a " "b"``) is one literal; an f-string's pieces are joined with each field as
    "…". ``where`` is ``module:line``."""
    mod = importlib.import_module(module)
    tree = ast.parse(inspect.getsource(mod))
    parent = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, (ast.Raise, ast.Assert))
            for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or _is_docstring(node, parent.get(node)):
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and not isinstance(parent.get(node), (ast.JoinedStr, ast.FormattedValue)):
            text = node.value
        else:
            continue
        text = _TAG.sub(" ", text)
        if re.search(r"[A-Za-z]\S*\s+\S", text):
            out.append((f"{module.rsplit('.', 1)[-1]}:{node.lineno}", text))
    return out


def _blank_fields(template: str) -> str:
    """A ``str.format`` template with each field (a live value) written as "…"."""
    return "".join(lit + ("…" if field is not None else "") for lit, field, *_ in string.Formatter().parse(template))


def _choices(key, lesson: str) -> list[str]:
    """A gate's choices as the scan reads them. Where a module that renders into ``lesson`` holds the choices
    (``speed_table.PAGING_CHOICES``), each choice built there by an f-string from constants is read as that
    f-string, its fields blanked as live fields are; any other choice is read as written."""
    for module in (m for m, shown in DISPLAY_MODULES.items() if lesson in shown):
        if any(v is key.choices for v in vars(importlib.import_module(module)).values()):
            built = [t for _, t in module_prose(module) if "…" in t]
            return [next((t for t in built if re.fullmatch(re.escape(t).replace("…", ".+?"), str(c))), str(c))
                    for c in key.choices]
    return [str(c) for c in key.choices]


def rendered_prose(lesson: str) -> list[tuple[str, str]]:
    """``(where, markdown)`` of every piece of prose the library shows in ``lesson``: its gates' choices,
    reveal templates (live fields blanked) and misconceptions, its practices' hints and known mistakes, its
    opening lens, its learning map and its research-room items (an equation item as a formula), their
    titles, evidence and the self-checks that resolve them, except those that pose a number to try ("I
    can predict the hit for 9 tokens": a question, not a claim). Scanned
    by ``tests/test_lesson_claims.py`` and ``tests/test_lesson_references.py`` as its markdown is. The
    captions, headers and figure text of the modules that render into the lesson are `module_prose`."""
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
            out += [(f"{key.id} choices", " | ".join(_choices(key, lesson)))] if key.choices else []
            out += [(f"{key.id} reveal", _blank_fields(t)) for t in key.texts]
            out += [(f"{key.id} misconception", m) for m in key.mistakes.values()]
    for key in PRACTICE_KEYS.values():
        if key.lesson == lesson:
            out += [(f"{key.id} hint", h) for h in key.hints]
            out += [(f"{key.id} mistake", m) for m in key.mistake_texts]
    return out
