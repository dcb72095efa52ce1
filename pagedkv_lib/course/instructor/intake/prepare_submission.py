"""Make one handed-in notebook ready for nbgrader, and say in its status what it holds that matters.

:func:`prepare` checks the notebook's bounds (``submission_bounds.py``) and cleans it in place
(``notebook_cleaning.py``), then notes cells that are missing, a pasted key that is not the student's
(``variant_keys.py``) and answer cells that reach for the grader or for the library's own answers
(``answer_scan.py``), and a hand-in holding the instructor's solution markers or hidden tests
(``solution_leak.py``: flagged ``leaked solution``, graded as it is). A notebook that cannot be read, or
lies outside the bounds, is renamed so that nbgrader never opens it, and its status says why.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..course_layout import SOURCE
from ..notebook_result import NotebookResult
from .answer_scan import grader_names_used, library_calls, reaches
from .notebook_cleaning import cell_text, missing_note, normalise, parse_notebook
from .solution_leak import leak
from .submission_bounds import Malformed, SubmissionLimits, Unreadable, parse_answer, read_bounded
from .variant_keys import key_problem


def prepare(folder: Path, assignment: str, release: dict, status: NotebookResult, graded: list[str] = (),
            limits: SubmissionLimits | None = None) -> bool:
    """Clean one submission folder in place; False (and the reason in ``status``) if it cannot be graded."""
    limits = limits or SubmissionLimits()
    want = folder / f"{assignment}.ipynb"
    others = sorted(p for p in folder.glob("*.ipynb") if p != want)
    if not want.exists() and len(others) == 1:  # "ps2_math (1).ipynb", a normal download name
        others[0].rename(want)
        status.details.append(f"renamed {others[0].name} to {want.name}")
    if not want.exists():
        status.problems.append("unreadable")
        status.details.append(f"no {want.name} (found {[p.name for p in others]})")
        return False
    try:
        text = read_bounded(want, limits, want.name)
        norm = normalise(text, release, want.name, limits)
    except (Unreadable, Malformed) as err:
        problem = "unreadable" if isinstance(err, Unreadable) else "malformed"
        want.rename(want.with_suffix(f".ipynb.{problem}"))  # nbgrader must not try it
        status.problems.append(problem)
        status.details.append(str(err))
        return False
    course = folder.parents[2]   # submitted/<student>/<assignment>
    if why := leak(parse_notebook(text, want.name, limits), course / SOURCE / assignment / want.name, release):
        status.problems.append("leaked solution")
        status.details.append(f"{want.name}: {why}; graded as it is, for the instructor to judge")
    want.write_text(json.dumps(norm.nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if norm.missing:
        status.problems.append("cells missing")
        if missing_note(norm.missing) not in status.details:
            status.details.append(missing_note(norm.missing))
    if mismatch := key_problem(course, status.student, norm.nb):
        status.problems.append("key mismatch")
        if mismatch not in status.details:  # collect may have said so already
            status.details.append(mismatch)
    _scan_answers(norm.nb, status, graded, limits)
    return True


def _scan_answers(nb: dict, status: NotebookResult, graded: list[str], limits: SubmissionLimits) -> None:
    """Note each answer cell that uses the grader's names, reaches outside, or calls a graded library function.

    Each answer is parsed once (``parse_answer``) and its tree handed to the scans. An answer whose syntax
    tree is deeper than the bounds is not scanned: its status says ``malformed`` (its kernel cannot compile
    it either, so it scores nothing), and the rest is graded."""
    answers = []  # (grade id, source, syntax tree or None when the code does not parse)
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution") and cell["cell_type"] == "code":
            gid, source = cell["metadata"]["nbgrader"].get("grade_id"), cell_text(cell["source"])
            try:
                answers.append((gid, source, parse_answer(source, limits)))
            except Malformed as err:
                status.problems.append("malformed")
                status.details.append(f"answer cell {gid}: {err}")
    for gid, source, tree in answers:
        if names := grader_names_used(source, tree):
            status.problems.append("tampered")
            status.details.append(f"answer cell {gid} uses the grader's names: {', '.join(names)}")
    for gid, source, tree in answers:
        if reached := reaches(source, tree):
            status.problems.append("reaches outside")
            status.details.append(f"answer cell {gid} reaches for {'; '.join(reached)}")
        if used := library_calls(source, graded, tree):
            status.problems.append("library implementation")
            status.details.append(f"answer cell {gid} calls the library's own {', '.join(used)} (hidden while grading)")
