"""``autograde`` for a whole class, in three stages: intake (prepare each submission), grading (a pool of
sandboxed workers), reporting (copy detection, each notebook's result, ``status.csv``, ``grades.csv``).

Outputs, beside ``submitted/``: ``gradebook.db`` (nbgrader's), ``autograded/``, ``results/`` (one
:class:`~.notebook_result.NotebookResult` per student and assignment, written once at the end: its status,
each problem found with details, and its points), and two views of the results: ``status.csv`` and
``grades.csv`` (nbgrader's export with each status beside the scores). Whatever one submission holds or
does, every stage turns it into that submission's result.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ...errors import PagedKVError
from ..protocol import JOBS_DIR
from .course_layout import (COLLECT_LOG, DEFAULT_TIMEOUT_S, GRADES_CSV, SOURCE, SUBMITTED, assignments,
                            cached_releases, course_config, db_url)
from .grading import memory_cgroup
from .grading.grading_job import GradingJob
from .grading.grading_limits import NotebookLimits, WorkerLimits
from .grading.judge import trusted_from_gradebook
from .grading.kernel_sandbox import check_available, hidden_library
from .grading.worker_pool import grade_all, zero_grades
from .intake.collect_notebooks import VERDICTS, release_notebooks
from .intake.prepare_submission import prepare
from .intake.submission_bounds import SubmissionLimits
from .intake.variant_keys import keys_for
from .reporting import copy_detection
from .reporting.grades_export import export_grades, write_status
from .notebook_result import NotebookResult, add_points, write_results


def graded_functions(root: Path, assignment: str) -> list[str]:
    """The library definitions ``assignment`` asks learners to write (its solution's ``pagedkv.graded_functions``)."""
    nb = json.loads((root / SOURCE / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return list(nb.get("metadata", {}).get("pagedkv", {}).get("graded_functions", []))


def _submissions(sub_root: Path) -> list[tuple[str, str, Path]]:
    """``(assignment, student, folder)`` of every folder in ``submitted/`` that holds a notebook (or a file
    an earlier run set aside as unreadable or malformed)."""
    return sorted({(p.parent.name, p.parent.parent.name, p.parent) for p in sub_root.glob("*/*/*.ipynb*")})


def _collect_log(root: Path) -> dict:
    path = root / COLLECT_LOG
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def autograde(course_dir=".", grades_csv: str = GRADES_CSV, timeout_s: int = DEFAULT_TIMEOUT_S,
              workers: int | None = None, progress: bool = True,
              trust_submissions: bool = False) -> list[NotebookResult]:
    """Grade every submission in ``submitted/``; write ``results/``, ``status.csv`` and ``grades_csv``;
    return the results.

    ``timeout_s`` is the per-cell limit (seconds); ``workers`` the number of students graded at once
    (default: one per CPU core); the other limits are settings in ``nbgrader_config.py``
    (``grading/grading_limits.py``). Whatever a submission does, every student gets a row and a status.
    Every kernel runs in the sandbox (``grading/kernel_sandbox.py``); without bubblewrap this refuses,
    unless ``trust_submissions``, which runs them unsandboxed and says so in every status.
    """
    root = Path(course_dir)
    if not trust_submissions:
        check_available()
        if not memory_cgroup.available():
            print("autograde: no memory cgroup can be made here, so each kernel's memory is limited per process "
                  "only (see course/instructor/grading/memory_cgroup.py)", file=sys.stderr)
    sub_root = root / SUBMITTED
    if not sub_root.is_dir():
        raise PagedKVError(f"nothing to grade: {sub_root} does not exist "
                           f"(expected {SUBMITTED}/<student>/<assignment>/<notebook>.ipynb; see `collect`)")
    config, known = course_config(root), assignments(root)
    subs = _submissions(sub_root)
    log, workers = _collect_log(root), workers or os.cpu_count() or 1
    named = {a for a, _, _ in subs} | {k.split("/", 1)[1] for kind in VERDICTS for k in log.get(kind, {})}
    releases = release_notebooks(cached_releases(root, sorted(named & set(known)), workers))
    graded_by_set = {a: graded_functions(root, a) for a in releases}   # each solution read once
    statuses, ready = _intake(subs, releases, graded_by_set, log, SubmissionLimits(config=config))
    shutil.rmtree(root / JOBS_DIR, ignore_errors=True)  # an earlier run's jobs (a student then may not be graded now)
    with tempfile.TemporaryDirectory(prefix="pkv-sandbox-lib-") as libs:
        os.chmod(libs, 0o755)
        libraries = {} if trust_submissions else {
            a: str(hidden_library(Path(libs) / a, graded_by_set[a])) for a in {a for a, _ in ready}}
        keys = keys_for(root, {s for _, s in ready})
        jobs = [GradingJob(str(root.resolve()), a, s, sandbox=not trust_submissions, library=libraries.get(a, ""),
                           variant_key=keys[s]) for a, s in ready]
        graded = grade_all(root, jobs, timeout_s, NotebookLimits(config=config).budget_seconds, workers, progress,
                           WorkerLimits(config=config))
    if trust_submissions:
        for st in graded:
            st.problems.append("unsandboxed")
            st.details.append("graded with --trust-submissions: the kernel ran outside the sandbox")
    result = _merge(root, statuses, graded, log, set(known))
    _flag_copies(root, result)
    add_points(root, result)
    write_results(root, result)
    write_status(root)
    export_grades(root, grades_csv)
    return result


def _intake(subs: list, releases: dict, graded_by_set: dict, log: dict,
            limits: SubmissionLimits) -> tuple[dict, list[tuple[str, str]]]:
    """Each submission's status after preparing it, and the ``(assignment, student)`` jobs ready to grade
    (``graded_by_set``: each assignment's :func:`graded_functions`).
    Whatever goes wrong with one submission here, the grader's own errors included, is its status."""
    statuses, ready = {}, []
    for assignment, student, folder in subs:
        st = statuses[(assignment, student)] = NotebookResult(student, assignment)
        st.details += log.get("problems", {}).get(f"{student}/{assignment}", [])
        if assignment not in releases:
            st.problems.append("unreadable")
            st.details.append(f"{SUBMITTED}/{student}/{assignment}: no assignment {assignment!r} in {SOURCE}/")
            continue
        try:
            if prepare(folder, assignment, releases[assignment], st, graded_by_set[assignment], limits):
                ready.append((assignment, student))
        except Exception as err:  # noqa: BLE001 (the grader's own failure on this submission: its status)
            st.problems.append("grader error")
            st.details.append(f"preparing it failed: {type(err).__name__}: {str(err)[:200]}")
    return statuses, ready


def _flag_copies(root: Path, result: list[NotebookResult]) -> None:
    """Say in each status which failed answers are right for another learner's numbers (``copy_detection.py``)."""
    by_job = {(st.assignment, st.student): st for st in result}
    keys = keys_for(root, {st.student for st in result})
    for assignment in sorted({st.assignment for st in result}):
        saved = copy_detection.SavedRecords(root, assignment)  # read one student at a time
        if not saved:
            continue
        trusted = trusted_from_gradebook(db_url(root), assignment, assignment)
        failed: dict[str, str] = {}
        for student, flags in copy_detection.find(trusted, saved, keys, failed).items():
            st = by_job.get((assignment, student))
            if st is not None:
                st.problems.append("numbers of another")
                st.details += flags
        for student, why in failed.items():
            if (st := by_job.get((assignment, student))) is not None:
                st.details.append(f"copy detection could not compare this notebook ({why})")


def _merge(root: Path, statuses: dict, graded: list[NotebookResult], log: dict,
           known: set[str]) -> list[NotebookResult]:
    """One status per (assignment, student): what preparing found, what grading found, what collect could
    not take. Every known assignment's notebook that was not graded is given 0 in the gradebook, so it
    gets a grade row too."""
    for st in graded:
        mine = statuses[(st.assignment, st.student)]
        mine.problems += st.problems
        mine.details += st.details
        mine.failed, mine.seconds = st.failed, st.seconds
    for kind, problem in VERDICTS.items():  # what collect could not take
        for key, why in log.get(kind, {}).items():
            student, assignment = key.split("/", 1)
            statuses.setdefault((assignment, student), NotebookResult(student, assignment, [problem], [why]))
    ran = {(st.assignment, st.student) for st in graded}
    for (assignment, student), st in statuses.items():
        if (assignment, student) not in ran and assignment in known:
            try:
                zero_grades(root, assignment, student)
            except Exception as err:  # noqa: BLE001 (said in its status; the class goes on)
                st.problems.append("grader error")
                st.details.append(f"its grades could not be set to 0: {type(err).__name__}: {str(err)[:200]}")
    return sorted(statuses.values(), key=lambda s: (s.assignment, s.student))
