"""What autograde leaves for the instructor: ``status.csv`` (one row per student and assignment) and
nbgrader's ``grades.csv`` with each status beside the scores."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from ..course_layout import GRADES_CSV, STATUS_CSV, nbgrader
from ..submission_status import Status


def export_grades(course_dir=".", to: str = GRADES_CSV) -> Path:
    """nbgrader's CSV export of the gradebook, with a ``status`` column from ``status.csv`` where known."""
    root = Path(course_dir)
    nbgrader("export", f"--to={to}", course_dir=root)
    path, status = root / to, read_statuses(root)
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    if rows:
        for row in rows:
            row["status"] = status.get((row["student_id"], row["assignment"]), {}).get("status", "not submitted")
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return path


def read_statuses(root: Path) -> dict:
    """``{(student, assignment): row of status.csv}`` (none before the first autograde)."""
    path = root / STATUS_CSV
    if not path.exists():
        return {}
    return {(r["student_id"], r["assignment"]): r for r in csv.DictReader(path.open(encoding="utf-8"))}


def write_status(path: Path, statuses: list[Status]) -> None:
    """``status.csv``: student_id, assignment, status (ok or the problems), details."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "status", "details"])
        for st in statuses:
            w.writerow([st.student, st.assignment, st.label, " | ".join(st.details)])


def status_table(statuses: list[Status]) -> str:
    """The statuses as a Markdown table, details cut at 300 characters (:func:`print_summary` prints it
    after the command line's autograde; the class report builds its own table from ``status.csv``)."""
    rows = ["| student | assignment | status | details |", "|---|---|---|---|"]
    for st in statuses:
        details = " / ".join(st.details).replace("|", "\\|")
        rows.append(f"| {st.student} | {st.assignment} | {st.label} | {details[:300]} |")
    return "\n".join(rows)


def print_summary(statuses: list[Status], out=sys.stdout) -> None:
    print(status_table(statuses), file=out)
    bad = [s for s in statuses if s.problems]
    print(f"\n{len(statuses)} notebooks graded, {len(bad)} with problems (see {STATUS_CSV}).", file=out)
