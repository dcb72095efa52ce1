"""What a sandboxed kernel costs, as graded and without each of three things the grader adds to it.

Each run executes one problem set's solution notebook (default ps2_math) under nbclient in a kernel
started by ``SandboxKernelManager`` (bubblewrap, as ``autograde`` runs it; run as root, as CI grades),
timing from the kernel's start to its end (nbclient stops it after the last cell). Four arms,
interleaved, in this one process:

- as graded: matplotlib's font list seeded into the kernel's config folder, strace watching it, and
  the kernel ended 0.2 s after its shutdown request (``SandboxKernelManager.shutdown_wait_time``);
- without the font list (matplotlib then runs ``fc-list`` and rebuilds it in every kernel);
- without strace (``denials.py``: the report of what the sandbox denied the kernel);
- with jupyter_client's own shutdown wait (5 s: SIGTERM only after 2.5 s).

Another arm was tried on 2026-12-02 and dropped: the hidden library compiled to bytecode (the kernel
may not write ``__pycache__`` there). It gained nothing measurable on ps2_math (median 1.43 s against
1.31 s without, n=5).

    python benchmarks/sandbox_kernel.py [--notebook ps2_math] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

from pagedkv_lib.course.instructor.grading import kernel_sandbox as sandbox

REPO = Path(__file__).resolve().parents[1]


def _run(nb_path: Path, library: Path, arm: str) -> float:
    real_seed, real_tracer = sandbox.seed_font_cache, sandbox.tracer
    config = Config()
    if arm == "no font list":
        sandbox.seed_font_cache = lambda config_dir: config_dir.mkdir(parents=True, exist_ok=True)
    if arm == "no strace":
        sandbox.tracer = lambda log: []
    if arm == "5 s shutdown":
        config.SandboxKernelManager.shutdown_wait_time = 5.0
    try:
        nb = nbformat.read(nb_path, as_version=4)
        config.SandboxKernelManager.library = str(library)
        start = time.perf_counter()  # the client owns its kernel manager, so it stops the kernel at the end
        NotebookClient(nb, kernel_manager_class=sandbox.SandboxKernelManager, kernel_name="python3",
                       timeout=120, config=config).execute()
        return time.perf_counter() - start
    finally:
        sandbox.seed_font_cache, sandbox.tracer = real_seed, real_tracer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notebook", default="ps2_math")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    nb_path = REPO / "solutions" / args.notebook / f"{args.notebook}.ipynb"
    print("load average before:", os.getloadavg())
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)
        library = sandbox.hidden_library(Path(scratch) / "lib", [])
        arms = {"as graded": [], "no font list": [], "no strace": [], "5 s shutdown": []}
        _run(nb_path, library, "as graded")  # warm the page cache and the grader's own font list
        for _ in range(args.repeats):
            for arm, times in arms.items():
                times.append(_run(nb_path, library, arm))
    print(f"{args.notebook} in a sandboxed kernel, start to end, n={args.repeats} each:")
    for arm, times in arms.items():
        print(f"  {arm:13}: median {statistics.median(times):.2f} s, mean {statistics.mean(times):.2f} s "
              f"(range {min(times):.2f}-{max(times):.2f}; {sum(t > 3 for t in times)} over 3 s)")
    print("load average after:", os.getloadavg())


if __name__ == "__main__":
    main()
