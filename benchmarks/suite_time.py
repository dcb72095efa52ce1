"""How long the README's test command takes on a fresh clone, quiet or beside a CPU hog.

A newcomer clones the repository and runs ``make test`` (set-up included). This script does the same in
a new temporary folder, optionally while ``--hogs`` busy loops (one Python process each, ``while True:
pass``) hold the cores for the whole run, and prints the wall time, pytest's summary line, its 15 slowest
tests and the 1-minute load average sampled every 30 s. The hogs are stopped by their PIDs, the clone is removed.

    python benchmarks/suite_time.py [--hogs 4] [--target test] [--keep]

Run it from a committed state: the clone takes HEAD, not the working tree. Nothing else should run
beside a quiet measurement (``--hogs 0``); the load it prints says whether that held.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOG = "while True:\n    pass\n"


def sample_load(samples: list[float], stop: threading.Event, every_s: float = 30.0) -> None:
    """Append the 1-minute load average to ``samples`` every ``every_s`` seconds until ``stop`` is set."""
    while not stop.wait(every_s):
        samples.append(os.getloadavg()[0])


def run_suite(hogs: int, target: str, keep: bool) -> int:
    parent = Path(tempfile.mkdtemp(prefix="pagedkv-suite-"))
    os.chmod(parent, 0o755)   # make hub needs every folder above a checkout searchable by others
    clone = parent / "pagedkv"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    busy = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    samples, stop = [os.getloadavg()[0]], threading.Event()
    sampler = threading.Thread(target=sample_load, args=(samples, stop), daemon=True)
    sampler.start()
    start = time.monotonic()
    try:
        proc = subprocess.run(["make", target], cwd=clone, env=dict(os.environ, CI="1", PYTEST_ADDOPTS="--durations=15"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        wall_s = time.monotonic() - start
        stop.set()
        for p in busy:
            p.kill()
            p.wait()
    log = proc.stdout
    (parent / "make.log").write_text(log)
    summary = [line for line in log.splitlines() if re.match(r"=+ .*(passed|failed|error).* in [\d.]+s", line)]
    print(f"commit {head}, `make {target}` with {hogs} busy loop(s) on {os.cpu_count()} cores: exit {proc.returncode}, "
          f"{wall_s:.0f} s wall (clone set-up included)")
    print("pytest: " + (summary[-1].strip("= ") if summary else "no summary line (see the log)"))
    print(f"1-minute load: min {min(samples):.1f}, median {sorted(samples)[len(samples) // 2]:.1f}, "
          f"max {max(samples):.1f} over {len(samples)} samples")
    lines = log.splitlines()
    slowest = next((i for i, line in enumerate(lines) if "slowest 15 durations" in line), None)
    if slowest is not None:
        print("\n".join(lines[slowest:slowest + 16]))
    if proc.returncode != 0:
        print("\n".join(lines[-40:]))
    if keep:
        print(f"kept: {clone} (log: {parent / 'make.log'})")
    else:
        shutil.rmtree(parent, ignore_errors=True)
    return proc.returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hogs", type=int, default=0, help="busy loops beside the run (0: a quiet run; 4: load 4)")
    p.add_argument("--target", default="test", help="the make target (default: test, the README's command)")
    p.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = p.parse_args(argv)
    if args.hogs < 0:
        p.error(f"--hogs must be 0 or more, got {args.hogs}")
    return run_suite(args.hogs, args.target, args.keep)


if __name__ == "__main__":
    sys.exit(main())
