"""What autograde leaves for the instructor beside each notebook's result (``notebook_result.py``):
``status.csv`` (one row per student and assignment) and nbgrader's ``grades.csv`` with each status beside
the scores, both read from the results."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from ..course_layout import GRADES_CSV, STATUS_CSV, nbgrader
from ..notebook_result import NotebookResult, read_results


def export_grades(course_dir=".", to: str = GRADES_CSV) -> Path:
    """nbgrader's CSV export of the gradebook, with a ``status`` column from the last run's results."""
    root = Path(course_dir)
    nbgrader("export", f"--to={to}", course_dir=root)
    path, status = root / to, read_statuses(root)
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    if rows:
        for row in rows:
            known = status.get((row["student_id"], row["assignment"]))
            row["status"] = known.label if known else "not submitted"
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return path


def read_statuses(root: Path) -> dict[tuple[str, str], NotebookResult]:
    """``{(student, assignment): result}`` of the last run (none before the first autograde)."""
    return {(r.student, r.assignment): r for r in read_results(root)}


def write_status(root: Path) -> None:
    """``status.csv`` from the last run's results: student_id, assignment, status (ok or the problems), details."""
    with open(Path(root) / STATUS_CSV, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "status", "details"])
        for st in read_results(root):
            w.writerow([st.student, st.assignment, st.label, " | ".join(st.details)])


def status_table(statuses: list[NotebookResult]) -> str:
    """The statuses as a Markdown table, details cut at 300 characters (:func:`print_summary` prints it
    after the command line's autograde; the class report builds its own table from the results)."""
    rows = ["| student | assignment | status | details |", "|---|---|---|---|"]
    for st in statuses:
        details = " / ".join(st.details).replace("|", "\\|")
        rows.append(f"| {st.student} | {st.assignment} | {st.label} | {details[:300]} |")
    return "\n".join(rows)


def print_summary(statuses: list[NotebookResult], out=sys.stdout) -> None:
    print(status_table(statuses), file=out)
    bad = [s for s in statuses if s.problems]
    print(f"\n{len(statuses)} notebooks graded, {len(bad)} with problems (see {STATUS_CSV}).", file=out)
