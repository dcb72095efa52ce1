"""The sandbox's memory cgroup: a kernel's processes together stay under one limit.

Per-process limits (``prlimit --as``) let a kernel that forks use its allowance once per process.
Here a sandboxed program starts three children that each touch 300 MiB: without the group all three
hold their memory at once (900 MiB); in a group limited to 512 MiB the out-of-memory killer stops
some of them, inside the group, and the group is gone after ``remove``. A graded kernel runs in such a
group (and is out of it once it has ended).
"""
import asyncio
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from pagedkv_lib.course.instructor.grading import kernel_sandbox as sandbox, memory_cgroup as cgroup

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs bubblewrap and root (as CI grades)"),
              pytest.mark.skipif(not cgroup.available(), reason="this machine lets no process make a memory cgroup")]

HOGS = r"""
import json, os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = bytearray(300 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1  # touched, so it is really held
        time.sleep(3)  # all three hold theirs at once
        os._exit(0)
    children.append(pid)
codes = [os.waitpid(pid, 0)[1] for pid in children]
print(json.dumps({"killed": sum(os.WIFSIGNALED(c) for c in codes)}))
"""


def _run_hogs(group) -> dict:
    uid, gid = sandbox.KERNEL_UIDS[1], sandbox.grader_ids()[1]
    scratch = sandbox.new_scratch(uid, gid)
    env = {"HOME": str(scratch / "home"), "PATH": "/usr/bin:/bin"}
    try:
        argv = cgroup.join_prefix(group) + sandbox.bwrap_argv(scratch, None, uid, gid, env) + [sys.executable, "-c", HOGS]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_without_a_group_three_processes_hold_three_allowances():
    assert _run_hogs(None) == {"killed": 0}


def test_a_group_bounds_them_together_and_is_removed_after():
    group = cgroup.memory_group(512 * 2**20)
    try:
        seen = _run_hogs(group)
        assert seen["killed"] >= 1 and group.limit_kills() >= 1, seen
    finally:
        group.remove()
    assert not group.path.exists()


def test_a_graded_kernel_runs_in_its_group(tmp_path, monkeypatch):
    library = sandbox.hidden_library(tmp_path / "lib", [])
    library.chmod(0o755)

    async def run() -> tuple[list[int], int]:
        km = sandbox.SandboxKernelManager(kernel_name="python3")
        km.library = str(library)
        assert km.memory is not None
        await km.start_kernel()
        try:
            kc = km.client()
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
            kc.stop_channels()
            members = [int(p) for p in km.memory.procs.read_text().split()]
            return members, km.provisioner.process.pid
        finally:
            await km.shutdown_kernel(now=False)
            await km.cleanup_resources()
            assert not km.memory.path.exists()

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: an earlier test in this worker may leave one running
        members, launched = pool.submit(asyncio.run, run()).result()
    assert launched in members and len(members) >= 3  # the tracer, bwrap and the kernel at least
