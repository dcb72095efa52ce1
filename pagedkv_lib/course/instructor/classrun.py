"""``autograde`` for a whole class: prepare every submission, grade in parallel, write grades and status.

Outputs, beside ``submitted/``: ``gradebook.db`` (nbgrader's), ``autograded/``, ``grades.csv`` (nbgrader's
export) and ``status.csv`` (one row per student and assignment: ok, or each problem found, with details).
"""
from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from pathlib import Path

from ...errors import PagedKVError
from .intake import COLLECT_LOG, release_notebooks
from . import copies
from .grade import DEFAULT_TIMEOUT_S, SOURCE, SUBMITTED, Status, assignments, cached_releases, db_url, grade_all, zero_grades
from .judge import trusted_from_gradebook
from .nbclean import Unreadable, cell_text, missing_note, normalise
from . import cgroup
from .class_report import STATUS_CSV, export
from .keys import key_for, key_problem
from .nbhooks import MAX_RESTARTS
from .sandbox import LIBRARY_ENV, MODE_ENV, check_available, hidden_library
from .scan import grader_names_used, library_calls, reaches


def graded_functions(root: Path, assignment: str) -> list[str]:
    """The library definitions ``assignment`` asks learners to write (its solution's ``pagedkv.graded_functions``)."""
    nb = json.loads((root / SOURCE / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return list(nb.get("metadata", {}).get("pagedkv", {}).get("graded_functions", []))


def _submissions(sub_root: Path, known: list[str]) -> list[tuple[str, str, Path]]:
    found = sorted({(p.parent.name, p.parent.parent.name, p.parent) for p in sub_root.glob("*/*/*.ipynb")})
    unknown = sorted({a for a, _, _ in found if a not in known})
    if unknown:
        raise PagedKVError(f"submissions for unknown assignments {unknown}; known: {known}")
    return found


def prepare(folder: Path, assignment: str, release: dict, status: Status, graded: list[str] = ()) -> bool:
    """Clean one submission folder in place; False (and the reason in ``status``) if it cannot be graded."""
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
        norm = normalise(want.read_text(encoding="utf-8", errors="replace"), release, str(want))
    except Unreadable as err:
        want.rename(want.with_suffix(".ipynb.unreadable"))  # nbgrader must not try it
        status.problems.append("unreadable")
        status.details.append(str(err))
        return False
    want.write_text(json.dumps(norm.nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if norm.missing:
        status.problems.append("cells missing")
        if missing_note(norm.missing) not in status.details:
            status.details.append(missing_note(norm.missing))
    if mismatch := key_problem(folder.parents[2], status.student, norm.nb):  # submitted/<student>/<assignment>
        status.problems.append("key mismatch")
        if mismatch not in status.details:  # collect may have said so already
            status.details.append(mismatch)
    answers = [c for c in norm.nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"]
    touched = {c["metadata"]["nbgrader"]["grade_id"]: grader_names_used(cell_text(c["source"])) for c in answers}
    for gid, names in touched.items():
        if names:
            status.problems.append("tampered")
            status.details.append(f"answer cell {gid} uses the grader's names: {', '.join(names)}")
    for cell in answers:
        gid = cell["metadata"]["nbgrader"]["grade_id"]
        if reached := reaches(cell_text(cell["source"])):
            status.problems.append("reaches outside")
            status.details.append(f"answer cell {gid} reaches for {'; '.join(reached)}")
        if used := library_calls(cell_text(cell["source"]), graded):
            status.problems.append("library implementation")
            status.details.append(f"answer cell {gid} calls the library's own {', '.join(used)} (hidden while grading)")
    return True


def _collect_log(root: Path) -> dict:
    path = root / COLLECT_LOG
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def autograde(course_dir=".", grades_csv: str = "grades.csv", timeout_s: int = DEFAULT_TIMEOUT_S,
              workers: int | None = None, progress: bool = True, trust_submissions: bool = False) -> list[Status]:
    """Grade every submission in ``submitted/``; write ``grades_csv`` and ``status.csv``; return the statuses.

    ``timeout_s`` is the per-cell limit (seconds); ``workers`` the number of students graded at once
    (default: one per CPU core). Whatever a submission does, every student gets a row and a status.
    Every kernel runs in the sandbox (``sandbox.py``); without bubblewrap this refuses, unless
    ``trust_submissions``, which runs them unsandboxed and says so in every status.
    """
    root = Path(course_dir)
    if not trust_submissions:
        check_available()
        if not cgroup.available():
            print("autograde: no memory cgroup can be made here, so each kernel's memory is limited per process "
                  "only (see course/instructor/cgroup.py)", file=sys.stderr)
    sub_root = root / SUBMITTED
    if not sub_root.is_dir():
        raise PagedKVError(f"nothing to grade: {sub_root} does not exist "
                           f"(expected {SUBMITTED}/<student>/<assignment>/<notebook>.ipynb; see `collect`)")
    known = assignments(root)
    subs = _submissions(sub_root, known)
    log, workers = _collect_log(root), workers or os.cpu_count() or 1
    named = {a for a, _, _ in subs} | {k.split("/", 1)[1] for k in log.get("unreadable", {})}
    releases = release_notebooks(cached_releases(root, sorted(named & set(known)), workers))
    statuses, jobs = {}, []
    for assignment, student, folder in subs:
        st = statuses[(assignment, student)] = Status(student, assignment)
        st.details += log.get("problems", {}).get(f"{student}/{assignment}", [])
        if prepare(folder, assignment, releases[assignment], st, graded_functions(root, assignment)):
            jobs.append((assignment, student))
    code_cells = max((sum(c["cell_type"] == "code" for c in r["cells"]) for r in releases.values()), default=0)
    copies.clear(root)
    with tempfile.TemporaryDirectory(prefix="pkv-sandbox-lib-") as libs:
        os.chmod(libs, 0o755)
        sandboxes = None if trust_submissions else {
            a: {MODE_ENV: "bwrap", LIBRARY_ENV: str(hidden_library(Path(libs) / a, graded_functions(root, a)))}
            for a in {a for a, _ in jobs}}
        graded = grade_all(root, jobs, timeout_s, timeout_s * (MAX_RESTARTS + 1) * code_cells + 120, workers, progress,
                           sandboxes)
    if trust_submissions:
        for st in graded:
            st.problems.append("unsandboxed")
            st.details.append("graded with --trust-submissions: the kernel ran outside the sandbox")
    result = _merge(root, statuses, graded, log.get("unreadable", {}))
    _flag_copies(root, result)
    write_status(root / STATUS_CSV, result)
    export(root, grades_csv)
    return result


def _flag_copies(root: Path, result: list[Status]) -> None:
    """Say in each status which failed answers are right for another learner's numbers (``copies.py``)."""
    by_job = {(st.assignment, st.student): st for st in result}
    keys = {st.student: key_for(root, st.student) for st in result}
    for assignment in sorted({st.assignment for st in result}):
        saved = copies.load(root, assignment)
        if not saved:
            continue
        trusted = trusted_from_gradebook(db_url(root), assignment, assignment)
        for student, flags in copies.find(trusted, saved, keys).items():
            st = by_job.get((assignment, student))
            if st is not None:
                st.problems.append("numbers of another")
                st.details += flags


def _merge(root: Path, statuses: dict, graded: list[Status], unreadable: dict) -> list[Status]:
    """One status per (assignment, student): what preparing found, what grading found, what collect could
    not read. Unreadable notebooks are given 0 in the gradebook, so they get a grade row too."""
    for st in graded:
        mine = statuses[(st.assignment, st.student)]
        mine.problems += st.problems
        mine.details += st.details
        mine.failed, mine.seconds = st.failed, st.seconds
    for key, why in unreadable.items():
        student, assignment = key.split("/", 1)
        statuses.setdefault((assignment, student), Status(student, assignment, ["unreadable"], [why]))
    for (assignment, student), st in statuses.items():
        if "unreadable" in st.problems:
            zero_grades(root, assignment, student)
    return sorted(statuses.values(), key=lambda s: (s.assignment, s.student))


def write_status(path: Path, statuses: list[Status]) -> None:
    """``status.csv``: student_id, assignment, status (ok or the problems), details."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "status", "details"])
        for st in statuses:
            w.writerow([st.student, st.assignment, st.label, " | ".join(st.details)])


def status_table(statuses: list[Status]) -> str:
    """The statuses as a markdown table (printed at the end of autograde, and used in the report)."""
    rows = ["| student | assignment | status | details |", "|---|---|---|---|"]
    for st in statuses:
        details = " / ".join(st.details).replace("|", "\\|")
        rows.append(f"| {st.student} | {st.assignment} | {st.label} | {details[:300]} |")
    return "\n".join(rows)


def print_summary(statuses: list[Status], out=sys.stdout) -> None:
    print(status_table(statuses), file=out)
    bad = [s for s in statuses if s.problems]
    print(f"\n{len(statuses)} notebooks graded, {len(bad)} with problems (see {STATUS_CSV}).", file=out)
