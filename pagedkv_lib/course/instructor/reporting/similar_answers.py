"""Answers identical to another student's, for the instructor's report (read from ``submitted/``; nothing runs).

Two answers are the same when their code parses to the same syntax tree (comments, spacing and blank
lines do not count). Short answers (``x = 8``) and the released stub are left out: honest students write
those alike. A pair is listed when it shares at least :data:`MIN_SHARED` such answers. The table names
both students and leaves the judgement to the instructor: it is in the report, not in anyone's status,
since the student copied from may have done nothing.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from ..intake.notebook_cleaning import cell_text, parse_notebook
from ..intake.submission_bounds import Malformed, SubmissionLimits, parse_answer, read_bounded

LIMITS = SubmissionLimits()  # the default bounds: a notebook outside the class's own was not graded

_SOLUTION = re.compile(r"[ \t]*### (BEGIN|END) SOLUTION\n?")
MIN_NODES = 25  # syntax-tree nodes an answer needs before its sameness means anything
MIN_SHARED = 2  # identical long answers a pair must share to be listed


def _shape(source: str) -> str | None:
    """The answer's syntax tree as text, if it is long enough to compare (``ast.dump`` recurses, so a
    tree outside the submission bounds is left out)."""
    try:
        tree = parse_answer(source, LIMITS)
    except Malformed:
        return None
    return ast.dump(tree) if tree is not None and sum(1 for _ in ast.walk(tree)) >= MIN_NODES else None


def _answers(nb: dict) -> dict[str, str]:
    out = {}
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and cell.get("cell_type") == "code":
            out[meta.get("grade_id")] = cell_text(cell["source"])
    return out


def similar_answers(submitted: Path, releases: dict, sources: dict) -> list[tuple[str, str, str, list[str]]]:
    """``[(assignment, student, student, [answer grade ids they share]), ...]`` over ``submitted/``.

    ``releases`` and ``sources`` map each assignment to its released and its solution notebook: the stub
    and the reference answer are what many students may write alike, so they are left out.
    """
    stubs = {(a, g): _shape(src) for a, nb in releases.items() for g, src in _answers(nb).items()}
    stubs.update({(a, g, "ref"): _shape(_SOLUTION.sub("", src)) for a, nb in sources.items() for g, src in _answers(nb).items()})
    shapes: dict = defaultdict(dict)  # assignment -> student -> {grade id: shape}
    for path in sorted(Path(submitted).glob("*/*/*.ipynb")):
        student, assignment = path.parent.parent.name, path.parent.name
        try:
            nb = parse_notebook(read_bounded(path, LIMITS, path.name), path.name, LIMITS)  # its size checked first
        except (ValueError, OSError):  # Unreadable and Malformed are ValueErrors
            continue
        for gid, source in _answers(nb).items():
            shape = _shape(source)
            if shape is not None and shape not in (stubs.get((assignment, gid)), stubs.get((assignment, gid, "ref"))):
                shapes[assignment].setdefault(student, {})[gid] = shape
    pairs = []
    for assignment, by_student in sorted(shapes.items()):
        for a, b in combinations(sorted(by_student), 2):
            shared = sorted(g for g, s in by_student[a].items() if by_student[b].get(g) == s)
            if len(shared) >= MIN_SHARED:
                pairs.append((assignment, a, b, shared))
    return pairs
