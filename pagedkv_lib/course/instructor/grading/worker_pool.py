"""Autograde a class with nbgrader, a few notebooks at a time, so that no submission can stop the others.

Each thread of the pool owns a warm worker process (``grading_worker.py``) that runs nbgrader's autograde for
one notebook at a time. The gradebook is one sqlite file: nbgrader opens it only briefly (to record
the student, the submission and, at the end, the scores), never while a notebook runs, and every
worker waits up to ``DB_WAIT_S`` for sqlite's write lock, so writes are serialised by sqlite itself. A
worker that fails or overruns its wall-clock budget is killed with its kernel, that student's grades
are set to 0 with the reason in the status, and the next notebook gets a fresh worker.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ...protocol import EventKind as E
from ..course_layout import CACHE_DIR, db_url, nbgrader_env
from ..notebook_result import NotebookResult
from .grading_job import GradingJob
from .grading_limits import WorkerLimits
from .grading_worker import Worker, WorkerTimeout

LOG_DIR = "grading-logs"  # <assignment>/<student>.log: each worker's nbgrader log, for the instructor


_LABELS = {E.TIMEOUT: "timed out", E.STUCK: "timed out", E.KERNEL_DIED: "kernel died", E.TAMPERED: "tampered",
           E.CELLS_MISSING: "cells missing", E.HUGE_OUTPUT: "huge output", E.EXITED: "sys.exit",
           E.FORGED: "forged record", E.DENIED: "reaches outside", E.MEMORY: "memory limit",
           E.MALFORMED_OUTPUT: "malformed output", E.DISK: "disk limit", E.HIDDEN_CALLED: "library implementation"}
_NOTES = {E.RESTARTED}  # events that are details only, not problems


def _describe(event: dict) -> str:
    if event["kind"] == E.CELLS_MISSING:
        return f"nbgrader put back the test cells {', '.join(event['cells'])}"
    if event["kind"] == E.RESTARTED:
        return f"a fresh sandboxed kernel replayed the cells before {event['cell']} and grading went on"
    if event["kind"] == E.MEMORY:
        return (f"the kernel's processes used more than {event['limit'] / 2**30:g} GiB together; "
                f"the sandbox killed {event['killed']} of them")
    if event["kind"] == E.DISK:
        return (f"the kernel filled its {event['limit'] / 2**20:g} MiB of writable space (home and /tmp); "
                "writes past it failed inside the sandbox")
    if event["kind"] == E.HIDDEN_CALLED:
        return (f"the kernel called {', '.join(event['functions'])}, which this set asks you to write: the grader "
                "hides the library's own, so the call raised")
    if event["kind"] == E.DENIED:
        more = f" and {event['more']} more" if event.get("more") else ""
        return f"the sandbox denied {'; '.join(event['calls'])}{more}"
    rest = ", ".join(f"{k}={v}" for k, v in event.items() if k != "kind")
    return f"{event['kind']}: {rest}"


def grade_one(worker: Worker, root: Path, assignment: str, student: str, budget_s: float,
              job: GradingJob | None = None) -> NotebookResult:
    """Autograde one student's ``assignment`` in ``worker``; kill the worker (and its kernel) past ``budget_s``.

    ``job`` holds what nbgrader's hooks need for this notebook (sandboxed or not, the hidden library,
    the student's key); it is written to the job's folder before the worker is asked, and the events
    the hooks record there become the status. None: the defaults (``GradingJob.read``).
    """
    status, start = NotebookResult(student, assignment), time.perf_counter()
    job = job or GradingJob.read(root, assignment, student)
    job.write()
    try:
        result = worker.autograde(assignment, student, budget_s)
    except WorkerTimeout:
        result = {"success": False, "log": "", "error": ""}
        status.problems.append("time budget")
        status.details.append(f"grading took more than its budget of {budget_s:.0f} s of a worker and was stopped")
    log = result["log"] + result["error"]
    logs = root / LOG_DIR / assignment
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{student}.log").write_text(log, encoding="utf-8")
    for event in job.events():
        if event["kind"] not in _NOTES:
            status.problems.append(_LABELS.get(event["kind"], event["kind"]))
        status.details.append(_describe(event))
    if not result["success"] and not status.problems:
        worker.close()  # whatever went wrong in it, the next notebook (or the retry) gets a fresh worker
        status.problems.append("grader error")
        errors = [ln.strip() for ln in log.splitlines() if re.match(r"\s*\w+(Error|Exception):", ln)]
        status.details.append(errors[-1] if errors else "nbgrader failed with no error message")
    status.failed = not result["success"]
    status.seconds = time.perf_counter() - start
    return status


def grade_one_retrying(worker: Worker, root: Path, assignment: str, student: str, budget_s: float,
                       job: GradingJob | None = None, retries: int = WorkerLimits().grader_retries) -> NotebookResult:
    """:func:`grade_one`, run again up to ``retries`` times while it reports only a grader error (e.g. a
    kernel that died before replying to ``kernel_info``: parallel kernels can race for the same ports)."""
    for attempt in range(retries + 1):
        status = grade_one(worker, root, assignment, student, budget_s, job)
        if status.problems != ["grader error"]:
            break
    if attempt:
        status.details.append(f"graded on try {attempt + 1} after a grader error")
    return status


def zero_grades(root: Path, assignment: str, student: str) -> None:
    """Give ``student`` 0 on every graded cell of ``assignment`` (what nbgrader does for a missing notebook)."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning
    with warnings.catch_warnings(), Gradebook(db_url(root)) as gb:
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission trips an autoflush warning
        gb.update_or_create_student(student)
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            submission = gb.add_submission(assignment, student)
        for nb in submission.notebooks:
            for grade in nb.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
        gb.db.commit()


SECONDS = "seconds.json"  # in CACHE_DIR: each assignment's median grading time (s) in the last run


def longest_first(root: Path, jobs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``jobs`` with the assignments that took longest in the last run first, else in the order given.

    A long notebook started last holds up the end of the run while the other workers sit idle; started
    first, it runs beside the short ones (longest-processing-time-first scheduling)."""
    try:
        seconds = json.loads((root / CACHE_DIR / SECONDS).read_text(encoding="utf-8"))
        order = {a: -float(seconds.get(a, 0.0)) for a, _ in jobs}
    except (OSError, ValueError, TypeError, AttributeError):  # no run yet, or a damaged file: keep the order
        return list(jobs)
    return sorted(jobs, key=lambda job: order[job[0]])


def _remember_seconds(root: Path, done: list[NotebookResult]) -> None:
    times: dict[str, list[float]] = {}
    for st in done:
        times.setdefault(st.assignment, []).append(st.seconds)
    path = root / CACHE_DIR / SECONDS
    try:
        seconds = json.loads(path.read_text(encoding="utf-8"))
        seconds = seconds if isinstance(seconds, dict) else {}
    except (OSError, ValueError):
        seconds = {}
    seconds.update({a: statistics.median(ts) for a, ts in times.items()})
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(seconds, indent=1, sort_keys=True), encoding="utf-8")


def grade_all(root: Path, jobs: list[GradingJob], timeout_s: int, budget_s: float, workers: int,
              progress: bool = True, limits: WorkerLimits | None = None) -> list[NotebookResult]:
    """Grade every job, ``workers`` at a time, with a progress bar over the class.

    ``timeout_s`` is nbgrader's per-cell limit, ``budget_s`` the most seconds of a worker one notebook
    may use. Whatever happens while one notebook is graded, even in this process, becomes its status.
    """
    from tqdm import tqdm
    limits = limits or WorkerLimits()
    done, mine, started = [], threading.local(), []
    (root / LOG_DIR).mkdir(exist_ok=True)
    by_name = {(job.assignment, job.student): job for job in jobs}

    def run(assignment: str, student: str) -> NotebookResult:
        try:
            if not hasattr(mine, "worker"):  # one warm worker per thread of the pool
                mine.worker = Worker(root, timeout_s, db_url(root), nbgrader_env(), log, limits.jobs_per_worker,
                                     limits.memory_bytes)
                started.append(mine.worker)
            return grade_one_retrying(mine.worker, root, assignment, student, budget_s,
                                      by_name[(assignment, student)], limits.grader_retries)
        except Exception as err:  # the grader's own failure on this notebook: its status, never the class's
            if hasattr(mine, "worker"):
                mine.worker.close()  # the next notebook gets a fresh worker process
            return NotebookResult(student, assignment, ["grader error"], [f"{type(err).__name__}: {err}"[:300]],
                                  failed=True)

    with open(root / LOG_DIR / "workers.log", "ab") as log, ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        try:
            futures = [pool.submit(run, a, s) for a, s in longest_first(root, list(by_name))]
            for fut in tqdm(as_completed(futures), total=len(futures), desc="autograde", unit="notebook",
                            disable=not progress, file=sys.stderr):
                status = fut.result()
                if status.failed:  # this loop runs in one thread, so gradebook writes here never overlap
                    try:
                        zero_grades(root, status.assignment, status.student)
                    except Exception as err:  # noqa: BLE001 (said in the status; the class goes on)
                        status.problems.append("grader error")
                        status.details.append(f"its grades could not be set to 0: {type(err).__name__}: {err}"[:300])
                done.append(status)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for worker in started:
                worker.close()
    _remember_seconds(root, done)
    return sorted(done, key=lambda s: (s.assignment, s.student))
