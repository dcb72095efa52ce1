"""How long autograding takes: one student's four problem sets, and a synthetic class.

The course ships one problem set (ps2_math), so "four sets" are four copies of it under other names, each
its own nbgrader assignment. The class mixes perfect, untouched and half-right notebooks. Both are graded
serially (1 worker) and in parallel (one worker per core), interleaved, in one process, on a scratch copy
of the course. Also measured: the fixed costs inside one worker (starting nbgrader, executing the
notebook alone with nbclient).

    python benchmarks/grading.py [--class-size 30] [--repeats 3] [--timeout 30]

"Cold" runs start without a gradebook, so the released copies are generated first (once per
assignment); "warm" runs regrade with the gradebook and grading-cache/ in place.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from classroom import WRONG, answered, solutions_by_cell  # noqa: E402
from pagedkv_lib import course  # noqa: E402
from pagedkv_lib.course.grade import nbgrader_env  # noqa: E402

NAME = "ps2_math"


def _course(dst: Path, sets: list[str]) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(REPO / "nbgrader_config.py", dst)
    for s in sets:
        (dst / "solutions" / s).mkdir(parents=True)
        shutil.copy(REPO / "solutions" / NAME / f"{NAME}.ipynb", dst / "solutions" / s / f"{s}.ipynb")
    course.generate(dst, sets)
    return dst


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


def _fixed_costs(root: Path, assignment: str) -> dict:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nbgrader", "--version"], env=nbgrader_env(), capture_output=True, check=True)
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
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    release = json.loads((REPO / "exercises" / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / "solutions" / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    good = solutions_by_cell(solution)
    with tempfile.TemporaryDirectory() as scratch:
        sets = [f"ps{i}_bench" for i in range(1, 5)]
        four = _course(Path(scratch) / "four", sets)
        for s in sets:
            nb = json.loads(json.dumps(answered(release, good)).replace(NAME, s))
            _submit(four, "alice", s, nb)
        print("fixed costs in one worker:", _fixed_costs(four, sets[0]))
        print(f"one student, four sets, cold (releases generated), {cores} workers: "
              f"{_grade(four, cores, args.timeout, cold=True)[0]:.1f} s")
        runs = {1: [], cores: []}
        for _ in range(args.repeats):
            for w in runs:
                runs[w].append(_grade(four, w, args.timeout)[0])
        for w, xs in runs.items():
            print(f"one student, four sets, warm, {w} worker(s): {_summary(xs)}")
        klass = _course(Path(scratch) / "class", [NAME])
        kinds = [answered(release, good), release, answered(release, {**good, **WRONG})]
        for i in range(args.class_size):
            _submit(klass, f"s{i:02d}", NAME, kinds[i % 3])
        for w in (1, cores) if args.class_size else ():
            total, per = _grade(klass, w, args.timeout, cold=True)
            print(f"class of {args.class_size}, {w} worker(s): {total:.1f} s total; per notebook {_summary(per)}")


if __name__ == "__main__":
    main()
