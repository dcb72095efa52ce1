"""Autograde a class with nbgrader, a few notebooks at a time, so that no submission can stop the others.

Each thread of the pool owns a warm worker process (``worker.py``) that runs nbgrader's autograde for
one notebook at a time. The gradebook is one sqlite file: nbgrader opens it only briefly (to record
the student, the submission and, at the end, the scores), never while a notebook runs, and every
worker waits up to ``DB_WAIT_S`` for sqlite's write lock, so writes are serialised by sqlite itself. A
worker that fails or overruns its wall-clock budget is killed with its kernel, that student's grades
are set to 0 with the reason in the status, and the next notebook gets a fresh worker.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import PagedKVError
from .events import EVENTS_ENV, read_events
from .sandbox import MODE_ENV
from .worker import Worker, WorkerTimeout

SOURCE, RELEASE, SUBMITTED = "solutions", "exercises", "submitted"
CACHE_DIR = "grading-cache"  # generated releases, and the hash of the sources they came from
LOG_DIR = "grading-logs"  # <assignment>/<student>.log: each worker's nbgrader log, for the instructor
DB_WAIT_S = 120  # seconds a worker waits for sqlite's write lock before giving up
DEFAULT_TIMEOUT_S = 30  # per-cell execution limit; a problem-set cell needs well under a second


@dataclass
class Status:
    """How one student's notebook for one assignment went; ``problems`` empty means ok."""

    student: str
    assignment: str
    problems: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    failed: bool = False  # the worker did not finish: its grades were set to 0
    seconds: float = 0.0  # wall-clock time of this student's grading worker

    @property
    def label(self) -> str:
        return "ok" if not self.problems else ", ".join(dict.fromkeys(self.problems))


def nbgrader_env(extra: dict | None = None) -> dict:
    """The environment nbgrader needs: this interpreter's ``bin`` first on PATH (it runs ``alembic``)."""
    path = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ, PATH=path, **(extra or {}))


def nbgrader(*args: str, course_dir=".") -> str:
    """Run ``nbgrader ARGS`` in ``course_dir`` and return its log; raise with the log's tail on failure."""
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course_dir, env=nbgrader_env(),
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise PagedKVError(f"nbgrader {' '.join(args)} failed (exit {proc.returncode}):\n{log[-3000:]}")
    return log


def assignments(course_dir=".") -> list[str]:
    """Names of the assignments in ``solutions/`` (folders holding at least one notebook)."""
    src = Path(course_dir) / SOURCE
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def generate(course_dir=".", names=None, release_dir: str | None = None, workers: int = 1) -> list[str]:
    """Generate ``<release_dir or exercises>/<name>/`` from ``solutions/<name>/`` (all assignments by default).

    With ``workers > 1`` the assignments after the first are generated in parallel (the first one
    alone, since it may create the gradebook's tables).
    """
    names = list(names) if names else assignments(course_dir)
    extra = [f"--CourseDirectory.release_directory={release_dir}",
             f"--CourseDirectory.db_url={db_url(Path(course_dir))}"] if release_dir else []

    def one(name):
        nbgrader("generate_assignment", name, "--force", *extra, course_dir=course_dir)
    if names:
        one(names[0])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, names[1:]))
    return names


def _digest(root: Path, name: str) -> str:
    """A hash of what generating ``name`` reads: its source folder and the nbgrader config."""
    h = hashlib.sha256()
    for path in sorted((root / SOURCE / name).rglob("*")) + [root / "nbgrader_config.py"]:
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def cached_releases(root: Path, names: list[str], workers: int = 1) -> Path:
    """Generated copies of ``names`` in ``grading-cache/releases/``, regenerated only when needed.

    Generating also records the assignment's cells in the gradebook, so it is redone when the source
    folder or the config changed, or when the gradebook is new.
    """
    cache = root / CACHE_DIR
    stamp, releases = cache / "sources.json", cache / "releases"
    known = json.loads(stamp.read_text()) if stamp.exists() and (root / "gradebook.db").exists() else {}
    digest = {n: _digest(root, n) for n in names}
    stale = [n for n in names if known.get(n) != digest[n] or not (releases / n).is_dir()]
    if stale:  # generate() with no names generates every assignment
        generate(root, stale, release_dir=str(releases.resolve()), workers=workers)
    known.update({n: digest[n] for n in stale})
    cache.mkdir(exist_ok=True)
    stamp.write_text(json.dumps(known, indent=1), encoding="utf-8")
    return releases


def db_url(root: Path) -> str:
    """The course's gradebook, with every connection waiting up to ``DB_WAIT_S`` for sqlite's write lock."""
    return f"sqlite:///{(root / 'gradebook.db').resolve()}?timeout={DB_WAIT_S}"


_LABELS = {"timeout": "timed out", "stuck": "timed out", "kernel_died": "kernel died",
           "tampered": "tampered", "cells_missing": "cells missing", "huge_output": "huge output",
           "exited": "sys.exit", "forged": "forged record", "denied": "reaches outside",
           "memory": "memory limit", "malformed_output": "malformed output"}
_NOTES = {"restarted"}  # events that are details only, not problems


def _describe(event: dict) -> str:
    if event["kind"] == "cells_missing":
        return f"nbgrader put back the test cells {', '.join(event['cells'])}"
    if event["kind"] == "restarted":
        return f"a fresh sandboxed kernel replayed the cells before {event['cell']} and grading went on"
    if event["kind"] == "memory":
        return (f"the kernel's processes used more than {event['limit'] / 2**30:g} GiB together; "
                f"the sandbox killed {event['killed']} of them")
    if event["kind"] == "denied":
        more = f" and {event['more']} more" if event.get("more") else ""
        return f"the sandbox denied {'; '.join(event['calls'])}{more}"
    rest = ", ".join(f"{k}={v}" for k, v in event.items() if k != "kind")
    return f"{event['kind']}: {rest}"


def grade_one(worker: Worker, root: Path, assignment: str, student: str, budget_s: float,
              sandbox: dict | None = None) -> Status:
    """Autograde one student's ``assignment`` in ``worker``; kill the worker (and its kernel) past ``budget_s``.

    ``sandbox`` is the environment that tells nbgrader's kernels how to run (``sandbox.MODE_ENV`` and
    the hidden library for this assignment); None runs them unsandboxed (trusted submissions).
    """
    status, start = Status(student, assignment), time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        events = Path(scratch) / "events.jsonl"
        try:
            env = {EVENTS_ENV: str(events), **(sandbox or {MODE_ENV: "none"})}
            result = worker.autograde(assignment, student, env, budget_s)
        except WorkerTimeout:
            result = {"success": False, "log": "", "error": ""}
            status.problems.append("timed out")
            status.details.append(f"grading took more than {budget_s:.0f} s and was stopped")
        log = result["log"] + result["error"]
        logs = root / LOG_DIR / assignment
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{student}.log").write_text(log, encoding="utf-8")
        for event in read_events(events):
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


GRADER_RETRIES = 2
"""Extra tries for a student whose run failed with no sign of the student's own doing (e.g. a kernel that
died before replying to ``kernel_info``: parallel kernels can race for the same ports)."""


def grade_one_retrying(worker: Worker, root: Path, assignment: str, student: str, budget_s: float,
                       sandbox: dict | None = None) -> Status:
    """:func:`grade_one`, run again up to :data:`GRADER_RETRIES` times while it reports only a grader error."""
    for attempt in range(GRADER_RETRIES + 1):
        status = grade_one(worker, root, assignment, student, budget_s, sandbox)
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


def _remember_seconds(root: Path, done: list[Status]) -> None:
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


def grade_all(root: Path, jobs: list[tuple[str, str]], timeout_s: int, budget_s: float, workers: int,
              progress: bool = True, sandboxes: dict | None = None) -> list[Status]:
    """Grade every ``(assignment, student)`` job, ``workers`` at a time, with a progress bar over the class.

    ``sandboxes`` maps each assignment to its sandbox environment (see :func:`grade_one`); None: unsandboxed.
    """
    from tqdm import tqdm
    done, mine, started = [], threading.local(), []
    (root / LOG_DIR).mkdir(exist_ok=True)

    def run(assignment: str, student: str) -> Status:
        if not hasattr(mine, "worker"):  # one warm worker per thread of the pool
            mine.worker = Worker(root, timeout_s, db_url(root), nbgrader_env(), log)
            started.append(mine.worker)
        return grade_one_retrying(mine.worker, root, assignment, student, budget_s,
                                  None if sandboxes is None else sandboxes[assignment])

    with open(root / LOG_DIR / "workers.log", "ab") as log, ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        try:
            futures = [pool.submit(run, a, s) for a, s in longest_first(root, jobs)]
            for fut in tqdm(as_completed(futures), total=len(futures), desc="autograde", unit="notebook",
                            disable=not progress, file=sys.stderr):
                status = fut.result()
                if status.failed:  # this loop runs in one thread, so gradebook writes here never overlap
                    zero_grades(root, status.assignment, status.student)
                done.append(status)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for worker in started:
                worker.close()
    _remember_seconds(root, done)
    return sorted(done, key=lambda s: (s.assignment, s.student))
