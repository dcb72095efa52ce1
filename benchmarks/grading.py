"""How long autograding takes: one student's four problem sets, and a synthetic class.

"Four sets" are the course's four problem sets (ps1_intuition, ps2_math, ps3_code, ps4_demo), each
answered with its solutions, as one student hands them in. The class hands in every set (or only
ps2_math, ``--class-sets ps2_math``), mixing perfect, untouched and half-right notebooks. Every kernel runs
in the sandbox (bubblewrap), as ``autograde`` runs it. The four sets are graded serially (1 worker) and
in parallel (one worker per core), interleaved, in one process, on a scratch copy of the course; the
class with ``--class-workers`` (default: both). The load average is printed before and after. Also
measured: the fixed costs inside one worker (starting nbgrader, executing the notebook alone with nbclient),
the peak resident memory of the grader's processes during the class, and, after it, copy detection's
peak memory on each set's judged records, held together versus read one student at a time.

    python benchmarks/grading.py [--class-size 30] [--class-sets all] [--repeats 3] [--timeout 30]

"Cold" runs start without a gradebook, so the released copies are generated first (once per
assignment); "warm" runs regrade with the gradebook and grading-cache/ in place.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from classroom import WRONG, answered, solutions_by_cell  # noqa: E402
from pagedkv_lib import course  # noqa: E402
from pagedkv_lib.course.instructor.course_layout import nbgrader  # noqa: E402

NAME = "ps2_math"  # the set the class answers wrong (others: half-answered), and the fixed-cost run's


def _course(dst: Path, sets: list[str]) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(REPO / "nbgrader_config.py", dst)
    for s in sets:
        shutil.copytree(REPO / "solutions" / s, dst / "solutions" / s)
    course.generate(dst, sets)
    return dst


def _load(folder: str, name: str) -> dict:
    return json.loads((REPO / folder / name / f"{name}.ipynb").read_text(encoding="utf-8"))


def _scores(root: Path) -> dict:
    """{(student, assignment): raw score} from the grades.csv autograde wrote."""
    with (root / "grades.csv").open(encoding="utf-8") as f:
        return {(r["student_id"], r["assignment"]): float(r["raw_score"]) for r in csv.DictReader(f)}


def _submit(root: Path, student: str, assignment: str, nb: dict) -> None:
    dst = root / "submitted" / student / assignment / f"{assignment}.ipynb"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb), encoding="utf-8")


def _grade(root: Path, workers: int, timeout: int, cold: bool = False) -> tuple[float, list[float]]:
    """Autograde everything in ``root``; ``cold`` first drops the gradebook (so releases are regenerated)."""
    shutil.rmtree(root / "autograded", ignore_errors=True)
    if cold:
        (root / "gradebook.db").unlink(missing_ok=True)
    start = time.perf_counter()
    statuses = course.autograde(root, timeout_s=timeout, workers=workers, progress=False)
    return time.perf_counter() - start, [s.seconds for s in statuses]


class GraderMemory:
    """Peak resident memory (MiB) of the grader's own processes while it runs: this process and each
    grading worker (its children with ``grading_worker`` in the command line), sampled every ``every_s`` s from
    /proc (the sandboxed kernels, which run as other uids with limits of their own, are not counted)."""

    def __init__(self, every_s: float = 0.25):
        self.every_s, self.parent, self.worker, self.total = every_s, 0.0, 0.0, 0.0
        self._stop = threading.Event()

    @staticmethod
    def _rss_mib(pid: str) -> float:
        try:
            line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmRSS:"))
        except (OSError, StopIteration):
            return 0.0
        return int(line.split()[1]) / 1024

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            parent = self._rss_mib(str(os.getpid()))
            workers = []
            for proc in Path("/proc").iterdir():  # this process's own children only: a worker's forks are not it
                try:
                    if (proc.name.isdigit() and b"grading_worker" in (proc / "cmdline").read_bytes()
                            and (proc / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid())):
                        workers.append(self._rss_mib(proc.name))
                except (OSError, IndexError):
                    continue
            self.parent = max(self.parent, parent)
            self.worker = max([self.worker, *workers])
            self.total = max(self.total, parent + sum(workers))

    def __enter__(self) -> "GraderMemory":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def __str__(self) -> str:
        return (f"grader's peak resident memory: {self.total:.0f} MiB in all (this process {self.parent:.0f} MiB, "
                f"largest worker {self.worker:.0f} MiB)")


def copy_detection_memory(root: Path, assignment: str) -> tuple[float, float]:
    """Copy detection's peak Python memory (MiB, tracemalloc) over ``assignment``'s judged records in
    ``root``: the class's records held together (as it was) and read one student at a time (as it is)."""
    import gc
    import tracemalloc
    from pagedkv_lib.course.instructor.course_layout import db_url
    from pagedkv_lib.course.instructor.grading.judge import trusted_from_gradebook
    from pagedkv_lib.course.instructor.reporting import copy_detection
    trusted, peaks = trusted_from_gradebook(db_url(root), assignment, assignment), []
    saved = copy_detection.SavedRecords(root, assignment)
    keys = {s: "" for s in saved}
    for records in (lambda: dict(saved), lambda: saved):
        gc.collect()
        tracemalloc.start()
        copy_detection.find(trusted, records(), keys)
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return peaks[0], peaks[1]


def _fixed_costs(root: Path, assignment: str) -> dict:
    t0 = time.perf_counter()
    nbgrader("--version")
    t1 = time.perf_counter()
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(root / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    return {"nbgrader_start_s": t1 - t0, "execute_notebook_s": time.perf_counter() - t1}


def _summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.1f} s (range {min(xs):.1f}-{max(xs):.1f}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--class-size", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the four-set run (the class runs once per mode)")
    ap.add_argument("--timeout", type=int, default=30, help="per-cell timeout (s)")
    ap.add_argument("--class-sets", default="all", help="'all', or the one set the class hands in")
    ap.add_argument("--class-workers", default="", help="comma-separated worker counts for the class (default 1 and cores)")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print("load average before:", os.getloadavg())
    with tempfile.TemporaryDirectory() as scratch:
        sets = course.assignments(REPO)
        four = _course(Path(scratch) / "four", sets)
        for s in sets:
            _submit(four, "alice", s, answered(_load("exercises", s), solutions_by_cell(_load("solutions", s))))
        print(f"sets: {', '.join(sets)}")
        print("fixed costs in one worker:", _fixed_costs(four, NAME))
        print(f"one student, {len(sets)} sets, cold (releases generated), {cores} workers: "
              f"{_grade(four, cores, args.timeout, cold=True)[0]:.1f} s")
        print("raw scores (auto-graded points):", {a: v for (_, a), v in sorted(_scores(four).items())})
        scores = _scores(four)
        runs = {1: [], cores: []}
        for _ in range(args.repeats):
            for w in runs:
                runs[w].append(_grade(four, w, args.timeout)[0])
                assert _scores(four) == scores, f"a warm run with {w} worker(s) scored {_scores(four)}, not {scores}"
        for w, xs in runs.items():
            print(f"one student, {len(sets)} sets, warm, {w} worker(s): {_summary(xs)}")
        class_sets = sets if args.class_sets == "all" else [args.class_sets]
        klass = _course(Path(scratch) / "class", class_sets)
        for s in class_sets:
            release, good = _load("exercises", s), solutions_by_cell(_load("solutions", s))
            half = {g: src for i, (g, src) in enumerate(sorted(good.items())) if i % 2 == 0}
            wrong = {**good, **WRONG} if s == NAME else half  # half right: every other answer written
            kinds = [answered(release, good), release, answered(release, wrong)]
            for i in range(args.class_size):
                _submit(klass, f"s{i:03d}", s, kinds[i % 3])
        class_workers = [int(w) for w in args.class_workers.split(",") if w] or [1, cores]
        for w in class_workers if args.class_size else ():
            with GraderMemory() as memory:
                total, per = _grade(klass, w, args.timeout, cold=True)
            print(f"class of {args.class_size} on {len(class_sets)} set(s), {w} worker(s): {total:.1f} s total "
                  f"({len(per)} notebooks); per notebook {_summary(per)}; {memory}")
        for s in class_sets if args.class_size and class_workers else ():
            held, streamed = copy_detection_memory(klass, s)
            print(f"copy detection's peak memory on {s}'s judged records: {held:.1f} MiB with the class's records "
                  f"held together, {streamed:.1f} MiB read one student at a time")
    print("load average after:", os.getloadavg())


if __name__ == "__main__":
    main()
