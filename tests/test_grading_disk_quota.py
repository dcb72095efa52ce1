"""Each kernel's writable space has a quota: writing past it fails inside the sandbox, the status says
``disk limit``, and nothing lands on the grader's disk (issue 28: a kernel wrote 12 x 64 MiB into its
scratch home without error)."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from classroom import answered, course_copy, solutions_by_cell
from conftest import REPO
from pagedkv_lib import course
from pagedkv_lib.course.instructor.grading import kernel_sandbox as sandbox
from pagedkv_lib.course.instructor.grading.grading_limits import KernelLimits

needs_root_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                      reason="bubblewrap, run as root (CI installs it in .ci/run)")

QUOTA = 32 * 2**20
#: Writes 8 MiB files into home and /tmp, alternately, until 80 MiB are written or a write fails.
WRITER = r"""
import errno, json, os
written, error = 0, None
for i in range(10):
    path = os.path.join(os.path.expanduser("~") if i % 2 else "/tmp", f"f{i}")
    try:
        with open(path, "wb") as f:
            for _ in range(8):
                f.write(b"x" * 2**20)
                f.flush()
                written += 2**20
    except OSError as err:
        error = errno.errorcode.get(err.errno, str(err.errno))
        break
print(json.dumps({"written": written, "error": error}))
"""


def _write_in_sandbox(disk_bytes: int | None) -> tuple[dict, int]:
    """What the writer managed inside a sandbox whose scratch has ``disk_bytes`` (None: no quota), and how
    many bytes the scratch folder held on the grader's side while it was still there."""
    uid, gid = sandbox.KERNEL_UIDS[2], sandbox.grader_ids()[1]
    scratch = sandbox.new_scratch(uid, gid, disk_bytes)
    env = {"HOME": str(scratch / "home"), "PATH": "/usr/bin:/bin"}
    try:
        limits = KernelLimits(disk_bytes=disk_bytes or KernelLimits().disk_bytes)
        argv = sandbox.bwrap_argv(scratch, None, uid, gid, env, limits) + [sys.executable, "-c", WRITER]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        on_host = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
        return json.loads(proc.stdout.strip().splitlines()[-1]), on_host
    finally:
        sandbox.remove_scratch(scratch)
        assert not scratch.exists()


@needs_root_bwrap
def test_writing_past_the_quota_fails_inside_the_sandbox_and_only_then():
    bounded, on_host = _write_in_sandbox(QUOTA)
    assert bounded["error"] == "ENOSPC" and QUOTA - 2**21 <= bounded["written"] <= QUOTA, bounded
    assert on_host <= QUOTA
    unbounded, _ = _write_in_sandbox(None)  # the same writer without the quota: /tmp is bwrap's --size tmpfs
    assert unbounded["error"] is None or unbounded["written"] > QUOTA, unbounded
    assert unbounded["written"] > bounded["written"], "without the quota the writer gets further"


@needs_root_bwrap
def test_a_full_quota_is_seen_and_an_unmounted_folder_is_never_full(tmp_path):
    assert not sandbox.disk_full(tmp_path)
    scratch = sandbox.new_scratch(sandbox.KERNEL_UIDS[3], sandbox.grader_ids()[1], 4 * 2**20)
    try:
        assert os.path.ismount(scratch) and not sandbox.disk_full(scratch)
        with open(scratch / "home" / "fill", "wb") as f:
            with pytest.raises(OSError):
                f.write(b"x" * 5 * 2**20)
                f.flush()
        assert sandbox.disk_full(scratch)
    finally:
        sandbox.remove_scratch(scratch)
    assert not scratch.exists()


FILLER = ("import os\ntry:\n    with open(os.path.expanduser('~/big'), 'wb') as f:\n"
          "        for _ in range(64):\n            f.write(b'x' * 2**20)\n            f.flush()\n"
          "except OSError as err:\n    print('write failed:', err)\n")


@pytest.mark.slow
@pytest.mark.xdist_group("nbgrader-class")
@needs_root_bwrap
def test_a_kernel_that_fills_its_quota_is_graded_and_its_status_says_disk_limit(tmp_path):
    name = "ps2_math"
    root = course_copy(tmp_path / "course", name)
    with open(root / "nbgrader_config.py", "a", encoding="utf-8") as f:
        f.write(f"\nc.KernelLimits.disk_bytes = {QUOTA}\n")  # a setting, read from the course's config
    release = json.loads((root / course.RELEASE / name / f"{name}.ipynb").read_text(encoding="utf-8"))
    good = solutions_by_cell(json.loads((REPO / course.SOURCE / name / f"{name}.ipynb").read_text(encoding="utf-8")))
    for student, answers in {"filler": {**good, "q7_answer": FILLER + good["q7_answer"]}, "honest": good}.items():
        folder = root / course.SUBMITTED / student / name
        folder.mkdir(parents=True)
        (folder / f"{name}.ipynb").write_text(json.dumps(answered(release, answers)), encoding="utf-8")
    statuses = {s.student: s for s in course.autograde(root, timeout_s=20, workers=2, progress=False)}
    assert statuses["filler"].label == "disk limit", statuses["filler"]
    assert "32 MiB" in " ".join(statuses["filler"].details)
    assert statuses["honest"].label == "ok", statuses["honest"]
    grades = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader((root / "grades.csv").open())}
    assert grades["filler"] == grades["honest"] > 0, "the filled quota failed a write, and cost nothing else"
