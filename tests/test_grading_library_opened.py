"""The tracer outside the sandbox sees a computed import of a module holding a graded function, and its log
stays bounded however many failed calls a kernel makes.

Each test runs real code under the real tracer and bubblewrap (``sandbox_denials.tracer`` +
``kernel_sandbox.bwrap_argv``), as a graded kernel runs, with the sandbox's library copy on its path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from pagedkv_lib.course.instructor.grading import kernel_sandbox as ks
from pagedkv_lib.course.instructor.grading.sandbox_denials import MAX_LOG_BYTES, TRUNCATED, _working_strace, tracer

ROOT = Path(__file__).resolve().parents[1]
needs_tools = pytest.mark.skipif(_working_strace() is None or shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs strace, bubblewrap and root (the grader's setting)")


def _sandboxed(tmp_path: Path, library: Path, code: str, log: Path, max_bytes: int = MAX_LOG_BYTES,
               files: dict | None = None) -> subprocess.CompletedProcess:
    uid, gid = ks.grader_ids()
    scratch = ks.new_scratch(ks.KERNEL_UIDS[0], gid)
    try:
        for name, source in (files or {}).items():
            shutil.copy(source, scratch / "home" / name)
            os.chmod(scratch / "home" / name, 0o644)
        env = {"HOME": str(scratch / "home"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
               "PYTHONPATH": str(library), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "agg", "TMPDIR": "/tmp",
               "TRITON_INTERPRET": "1"}
        argv = tracer(log, library, max_bytes) + ks.bwrap_argv(scratch, library, ks.KERNEL_UIDS[0], gid, env) + [
            sys.executable, "-c", code]
        return subprocess.run(argv, capture_output=True, text=True, timeout=900)
    finally:
        ks.remove_scratch(scratch)


def _notebook(tmp_path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "set.ipynb"
    nbformat.write(nb, path)
    return path


SETUP = "from pagedkv_lib.course.learner.variants import for_set\nV = for_set('ps1_intuition', '')\n"
#: ``accounting`` would be the issue's example, but every set's setup reaches it (``variants`` imports it for
#: one draw), so an import of it at run time opens nothing new; ``ledger`` is reached by no setup cell.
ATTACK = "import importlib\nled = importlib.import_module('pagedkv_lib.' + 'led' + 'ger')\nprint(led.without_sharing)\n"


@needs_tools
def test_a_computed_import_of_a_graded_module_is_flagged_and_the_honest_cells_are_not(tmp_path):
    os.chmod(tmp_path, 0o755)
    library = ks.hidden_library(tmp_path / "lib", ["pagedkv_lib.ledger:allocate"])
    notebook = _notebook(tmp_path, [SETUP, "answer = V.q1_block_table[0]"])
    assert "pagedkv_lib.ledger" not in ks.needed_modules(library, notebook)
    honest, attack = tmp_path / "honest.log", tmp_path / "attack.log"
    done = _sandboxed(tmp_path, library, SETUP, honest)
    assert done.returncode == 0, done.stderr
    done = _sandboxed(tmp_path, library, SETUP + ATTACK, attack)
    assert done.returncode == 0 and "without_sharing" in done.stdout, done.stderr
    assert ks.library_opened(honest, library, notebook) == []
    assert ks.library_opened(attack, library, notebook) == ["pagedkv_lib.ledger"]
    # a set whose own cells import the module needs it: its opening is then not flagged
    assert ks.library_opened(attack, library, _notebook(tmp_path, [SETUP, "from pagedkv_lib import ledger"])) == []


@needs_tools
@pytest.mark.parametrize("assignment", ["ps1_intuition", "ps2_math"])
def test_the_honest_solution_opens_no_watched_module(tmp_path, assignment):
    """Every code cell of the solution (hidden tests included) runs in the sandbox under the tracer, with
    the set's own library copy: nothing it opens is flagged."""
    os.chmod(tmp_path, 0o755)
    source = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    graded = json.loads(source.read_text(encoding="utf-8"))["metadata"].get("pagedkv", {}).get("graded_functions", [])
    library = ks.hidden_library(tmp_path / "lib", graded)
    log = tmp_path / "trace.log"
    run = ("import runpy, sys\nsys.argv = ['stub_evidence.py', 'capture', 'set.ipynb', '/tmp/out.pkl', '']\n"
           "runpy.run_path('stub_evidence.py', run_name='__main__')\n")
    done = _sandboxed(tmp_path, library, run, log, files={"set.ipynb": source, "stub_evidence.py":
                                                           ROOT / "tests" / "stub_evidence.py"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert ks.library_opened(log, library, source) == []


@needs_tools
def test_millions_of_failed_opens_cannot_grow_the_log_past_its_cap(tmp_path):
    os.chmod(tmp_path, 0o755)
    library = ks.hidden_library(tmp_path / "lib", [])
    log, cap = tmp_path / "flood.log", 256 << 10
    flood = "import os\nfor i in range(1_000_000):\n    try:\n        os.open('/srv/x%d' % i, 0)\n    except OSError:\n        pass\nprint('done')\n"
    done = _sandboxed(tmp_path, library, flood, log, max_bytes=cap)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    size = log.stat().st_size
    assert size <= cap + len(TRUNCATED) + 1, size
    assert log.read_text(encoding="utf-8").rstrip("\n").endswith(TRUNCATED)
