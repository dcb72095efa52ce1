"""The tracer outside the sandbox sees a call of a hidden graded function however it was imported, and
its log stays bounded however many failed calls a kernel makes.

Each test runs real code under the real tracer and bubblewrap (``sandbox_denials.tracer`` +
``kernel_sandbox.bwrap_argv``), as a graded kernel runs, with the sandbox's library copy on its path."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pagedkv_lib.course.instructor.grading import kernel_sandbox as ks
from pagedkv_lib.course.instructor.grading.sandbox_denials import (MAX_LOG_BYTES, TRUNCATED, _working_strace,
                                                                   hidden_calls, tracer)

needs_tools = pytest.mark.skipif(_working_strace() is None or shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs strace, bubblewrap and root (the grader's setting)")


def _sandboxed(tmp_path: Path, library: Path, code: str, log: Path,
               max_bytes: int = MAX_LOG_BYTES) -> subprocess.CompletedProcess:
    uid, gid = ks.grader_ids()
    scratch = ks.new_scratch(ks.KERNEL_UIDS[0], gid)
    try:
        env = {"HOME": str(scratch / "home"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
               "PYTHONPATH": str(library), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "agg", "TMPDIR": "/tmp",
               "TRITON_INTERPRET": "1"}
        argv = tracer(log, max_bytes) + ks.bwrap_argv(scratch, library, ks.KERNEL_UIDS[0], gid, env) + [
            sys.executable, "-c", code]
        return subprocess.run(argv, capture_output=True, text=True, timeout=900)
    finally:
        ks.remove_scratch(scratch)


SETUP = "from pagedkv_lib.course.learner.variants import for_set\nV = for_set('ps2_math', '')\n"
#: ps2 Q6's route: the set's own setup imports ``accounting`` (so opening the module says nothing), and the
#: name is computed, so no reading of the source sees which function is reached.
ATTACK = ("import importlib\nacc = importlib.import_module('pagedkv_lib.' + 'acc' + 'ounting')\n"
          "try:\n    getattr(acc, 'expected_slack' + '_per_request')(16)\nexcept NotImplementedError as e:\n    print(e)\n")
HIDDEN = ["pagedkv_lib.accounting:expected_slack_per_request", "pagedkv_lib.blocks.hybrid_manager:HybridBlockManager"]


@needs_tools
def test_a_call_of_a_hidden_function_through_a_computed_import_is_seen_and_honest_cells_are_not(tmp_path):
    os.chmod(tmp_path, 0o755)
    library = ks.hidden_library(tmp_path / "lib", HIDDEN)
    honest, attack = tmp_path / "honest.log", tmp_path / "attack.log"
    done = _sandboxed(tmp_path, library, SETUP + "print(V.key)\n", honest)
    assert done.returncode == 0, done.stderr
    done = _sandboxed(tmp_path, library, SETUP + ATTACK + "from pagedkv_lib.blocks import hybrid_manager\ntry:\n    hybrid_manager.HybridBlockManager()\n"
                      "except NotImplementedError:\n    pass\n", attack)
    assert done.returncode == 0 and "is hidden while this problem set is graded" in done.stdout, done.stderr
    assert hidden_calls(honest) == []
    assert hidden_calls(attack) == HIDDEN  # a function and a class, in the order called


@needs_tools
def test_without_the_mark_in_the_stub_the_same_call_goes_unseen(tmp_path, monkeypatch):
    """The attack the mark defends against: a stub that only raises leaves nothing in the trace."""
    os.chmod(tmp_path, 0o755)
    monkeypatch.setattr(ks, "_stub", lambda kind, name, where: [f"def {name}(*args, **kwargs):",
                                                                 "    raise NotImplementedError('hidden')"])
    library = ks.hidden_library(tmp_path / "lib", HIDDEN[:1])
    log = tmp_path / "attack.log"
    done = _sandboxed(tmp_path, library, SETUP + ATTACK, log)
    assert done.returncode == 0 and "hidden" in done.stdout, done.stderr
    assert hidden_calls(log) == []


@pytest.mark.long
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
