"""A warm grading worker: one trusted process that imports nbgrader once and autogrades many notebooks.

Starting nbgrader costs about 2 s, and the judge's first import of the reference code (torch, for
ps3) about as much again; a fresh ``nbgrader autograde`` per notebook paid both every time. A
:class:`Worker` keeps one process (``python -m pagedkv_lib.course.instructor.grading.grading_worker``) and sends it
one job at a time; the process runs nbgrader's own ``NbGraderAPI.autograde`` for it and answers.

The worker never runs learner code: the notebook runs in a sandboxed kernel that the worker starts
and stops per job (nbgrader's ``Execute``, through ``nbgrader_hooks.GuardedExecute``), and the judge reads only
JSON records from it. So nothing one submission does can reach the next job's worker state.

A job past its wall-clock budget kills the worker's process group (the kernel's sandbox dies with its
parent, ``--die-with-parent``); the next job starts a fresh worker. A worker is also replaced after
``jobs_per_worker`` jobs (``WorkerLimits``), which bounds any memory nbgrader keeps between jobs, and
its own address space is bounded by ``WorkerLimits.memory_bytes`` (a soft ``RLIMIT_AS``: past it the
notebook fails as a grader error and the worker is replaced; its kernels get their own limits).

Protocol: one JSON line per job on the worker's stdin, ``{"id", "assignment", "student"}`` (the job's
own parameters are in its job file, ``grading_job.py``, written before it is sent); one
JSON line per answer on the file descriptor named by its ``--answers-fd`` (its stdout is the log's, since
nbgrader and the kernels print there), ``{"id", "success", "log", "error"}``. The worker makes that
descriptor non-inheritable before it starts anything, so no kernel holds it; and the parent takes only
a well-formed answer that carries the job's own random ``id``, so a line written by anyone else
(a kernel given the descriptor by a launcher that keeps descriptors open) cannot end a job.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .kernel_sandbox import remove_scratch
from .memory_cgroup import remove_group


class WorkerTimeout(Exception):
    """The job ran past its budget; its worker was killed."""


class Worker:
    """The parent's handle on one worker process, started on first use and restarted when needed.

    ``log`` is an open file for the process's own output (nbgrader's and its kernels' stderr);
    ``jobs_per_worker`` the jobs one process grades before a fresh one replaces it.
    """

    def __init__(self, root: Path, timeout_s: int, db_url: str, env: dict, log, jobs_per_worker: int = 50,
                 memory_bytes: int = 0):
        self.root, self.timeout_s, self.db_url, self.env, self.log = Path(root), timeout_s, db_url, env, log
        self.jobs_per_worker, self.memory_bytes = jobs_per_worker, memory_bytes
        self.proc: subprocess.Popen | None = None
        self.jobs = 0

    def _start(self) -> None:
        read, write = os.pipe()
        self.tmp = tempfile.mkdtemp(prefix="pkv-worker-")  # its kernels' scratch folders, removed in close()
        cmd = [sys.executable, "-m", __name__, str(self.root.resolve()), f"--timeout={self.timeout_s}",
               f"--db-url={self.db_url}", f"--answers-fd={write}", f"--memory-bytes={self.memory_bytes}"]
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=dict(self.env, TMPDIR=self.tmp), stdin=subprocess.PIPE,
                                     stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(write,),
                                     start_new_session=True)
        os.close(write)
        self.answers, self.buffer, self.jobs = read, b"", 0

    def autograde(self, assignment: str, student: str, budget_s: float) -> dict:
        """nbgrader's autograde result for one notebook; raise :class:`WorkerTimeout` past ``budget_s``."""
        if self.proc is None or self.proc.poll() is not None or self.jobs >= self.jobs_per_worker:
            self.close()
            self._start()
        self.jobs += 1
        job_id = secrets.token_hex(16)
        job = json.dumps({"id": job_id, "assignment": assignment, "student": student}) + "\n"
        try:
            self.proc.stdin.write(job.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.close()
            return {"success": False, "log": "", "error": "the grading worker exited before the job was sent"}
        deadline = time.monotonic() + budget_s
        while True:
            line = self._read_line(deadline)
            if line is None:
                self.close()
                return {"success": False, "log": "", "error": "the grading worker exited during the job"}
            answer = _answer(line, job_id)
            if answer is not None:
                return answer

    def _read_line(self, deadline: float) -> bytes | None:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(now=True)
                raise WorkerTimeout
            ready, _, _ = select.select([self.answers], [], [], left)
            if ready:
                chunk = os.read(self.answers, 1 << 16)
                if not chunk:
                    return None
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self, now: bool = False) -> None:
        """Stop the worker process, and everything in its process group; a no-op when none runs.

        An idle worker is asked to end (its stdin closes) and given a few seconds; ``now`` (a job past
        its budget) or a worker that does not end is killed."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            if not now:
                self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        os.close(self.answers)
        for scratch in Path(self.tmp).glob("pkv-kernel-*"):  # what a killed worker's kernels could not clean up
            remove_scratch(scratch)
            remove_group(scratch.name)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.proc = None


def _answer(line: bytes, job_id: str) -> dict | None:
    """The worker's answer to job ``job_id`` in ``line``, or None for anything else (not JSON, another id,
    fields of the wrong type)."""
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    if (isinstance(answer, dict) and answer.get("id") == job_id and isinstance(answer.get("success"), bool)
            and isinstance(answer.get("log"), str) and isinstance(answer.get("error"), str)):
        return answer
    return None


def serve(root: Path, timeout_s: int, db_url: str, answers) -> None:
    """The worker process: answer each job read from stdin with nbgrader's result, until stdin closes."""
    os.chdir(root)  # nbgrader reads nbgrader_config.py from the working folder, as its command line does
    from nbgrader.apps import NbGrader, NbGraderAPI
    app = NbGrader()
    app.load_config_file()
    app.config.CourseDirectory.root = str(root)
    app.config.CourseDirectory.db_url = db_url
    app.config.Execute.timeout = timeout_s
    api = NbGraderAPI(parent=app)
    for line in sys.stdin:
        job = json.loads(line)
        result = api.autograde(job["assignment"], job["student"], force=True, create=True)
        answer = {"id": job["id"], "success": bool(result.get("success")),
                  **{k: str(result.get(k) or "") for k in ("log", "error")}}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the course's warm grading worker (started by autograde)")
    ap.add_argument("root")
    ap.add_argument("--timeout", type=int, required=True)
    ap.add_argument("--db-url", required=True)
    ap.add_argument("--answers-fd", type=int, required=True)
    ap.add_argument("--memory-bytes", type=int, default=0, help="soft limit on this process's address space (0: none)")
    args = ap.parse_args(argv)
    if args.memory_bytes:  # soft only: the kernels' own prlimit may set theirs above it
        resource.setrlimit(resource.RLIMIT_AS, (args.memory_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    os.set_inheritable(args.answers_fd, False)  # nothing this process starts (kernels, tracers) may hold it
    with os.fdopen(args.answers_fd, "w", encoding="utf-8") as answers:
        serve(Path(args.root), args.timeout, args.db_url, answers)


if __name__ == "__main__":
    main()
