"""Time lesson notebooks under nbclient, the way tests/test_notebooks.py runs them.

Each round executes every notebook once, top to bottom, in a fresh kernel with
``MPLBACKEND=Agg`` (wall time including the kernel's start); rounds interleave the notebooks
(a, b, a, b, ...) so load on a shared machine hits them alike. Prints the median and range per
notebook, and the median of all of them together (the course's budget: 60 s for the lessons).

Usage: python benchmarks/notebooks.py [--rounds 3] notebooks/*.ipynb
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def run_once(path: Path) -> float:
    """Seconds to execute ``path`` in a fresh kernel; raises if a cell fails."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["MPLBACKEND"] = "Agg"
    times: dict[Path, list[float]] = {p: [] for p in args.notebooks}
    for _ in range(args.rounds):
        for path in args.notebooks:
            times[path].append(run_once(path))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    for path, ts in times.items():
        print(f"{path.stem:<14} median {statistics.median(ts):5.1f} s   range {min(ts):.1f}-{max(ts):.1f} s")
    total = [sum(ts[i] for ts in times.values()) for i in range(args.rounds)]
    print(f"{'all together':<14} median {statistics.median(total):5.1f} s   range {min(total):.1f}-{max(total):.1f} s")


if __name__ == "__main__":
    main()
