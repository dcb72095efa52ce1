"""Each learner's server is bounded by cgroups (hub/learner_limits.py): a fork bomb and a memory hog of one
user stop at that user's bounds. Real cgroups and a real system user; needs root, as ``make hub`` does."""
from __future__ import annotations

import os
import pwd
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hub"))
from learner_limits import Bounds, bound, release, user_groups  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes cgroups and a system user: needs root")

BOMB = """
import os, sys, time
sys.stdin.readline()
born = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        born += 1
    except OSError:
        break
print(born, flush=True)
"""
HOG = """
import sys
sys.stdin.readline()
held = [bytearray(64 * 2**20) for _ in range(16)]   # 1 GiB, page by page
print("survived", flush=True)
"""


@pytest.fixture
def learner():
    name = f"pkvlim{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", name], check=True)
    yield name
    left = release(name)
    subprocess.run(["userdel", name], check=False)
    assert left == [] and not any(p.exists() for p in user_groups(name).values()), left


def _bounded_run(user: str, code: str, bounds: Bounds) -> subprocess.CompletedProcess:
    """``code`` run as ``user``, moved into the user's groups before it goes past its first line."""
    info = pwd.getpwnam(user)
    proc = subprocess.Popen(["/usr/bin/python3", "-c", code], user=info.pw_uid, group=info.pw_gid, cwd="/",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        bound(user, proc.pid, bounds)
    except OSError as err:
        proc.kill()
        pytest.skip(f"this machine lets no cgroup be made here: {err}")
    out, err = proc.communicate("go\n", timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_fork_bomb_stops_at_the_users_process_bound(learner):
    done = _bounded_run(learner, BOMB, Bounds(512 * 2**20, 1.0, 20))
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 20, "forked past the bound"
    assert all(p.exists() for p in user_groups(learner).values())


def test_a_memory_hog_is_stopped_inside_its_users_bound(learner):
    done = _bounded_run(learner, HOG, Bounds(256 * 2**20, 1.0, 64))
    assert done.returncode == -9 and "survived" not in done.stdout, (done.returncode, done.stdout, done.stderr[-500:])
