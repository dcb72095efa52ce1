"""One learner's fork bomb leaves another learner able to start processes (what their kernel does to run a shell
command or a worker pool), on a machine made small enough to be filled: the "hub" runs inside a pids group of
40 tasks, as if that were the whole machine, and starts both learners as LimitedSpawner does (learner_limits.py,
real cgroups, two real system users). With the bomb held at its learner's bound (20) the other learner starts
all 10 of theirs; the control, the same bomb with no bound of its own, fills the box and the other learner can
start nothing. Processes only, cgroup v1's pids tree (this machine's); memory and CPU isolation are not covered."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

HUB = Path(__file__).resolve().parents[2] / "hub"
sys.path.insert(0, str(HUB))
from cgroup_tree import ROOT, is_v2, own_group  # noqa: E402
from learner_limits import release  # noqa: E402

BOX_TASKS, HOG_BOUND, VICTIM_CHILDREN = 40, 20, 10
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or is_v2() or not os.access(ROOT / "pids", os.W_OK),
    reason="makes a pids box in cgroup v1's tree and two system users: needs root and v1's pids tree (this test "
           "does not build the box under v2)")

# The hub in its box: starts the hog's bomb, waits until it has forked all it may, then the victim's work.
HUB_IN_A_BOX = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from learner_limits import Bounds, LimitedSpawner, prepare, release
hog, victim, hog_bound, children = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
BOMB = '''
import os, sys, time
born = 0
while born < 10000:
    try:
        if os.fork() == 0:
            time.sleep(120); os._exit(0)
        born += 1
    except OSError:
        break
print(born, flush=True); sys.stdin.readline()
'''
WORK = '''
import os, sys
born = 0
for _ in range(int(sys.argv[1])):
    try:
        if os.fork() == 0:
            os._exit(0)
        born += 1
        os.wait()
    except OSError:
        break
print(born)
'''
def spawn(user, code, processes, *args):
    prepare(user, Bounds(256 * 2**20, 1.0, processes))
    return subprocess.Popen(["/usr/bin/python3", "-c", code, *args], preexec_fn=LimitedSpawner().make_preexec_fn(user),
                            cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
bomb = spawn(hog, BOMB, hog_bound)
born = int(bomb.stdout.readline())
try:
    work = spawn(victim, WORK, 64, str(children))
    done = int(work.communicate(timeout=120)[0] or 0)
except OSError:   # the hub itself could not fork the victim's server
    done = 0
print(born, done)
left = release(hog) + release(victim)   # their groups are in this box: only this process finds them
assert not left, left
"""


@pytest.fixture
def two_learners():
    names = [f"pkviso{secrets.token_hex(3)}" for _ in range(2)]
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--user-group", name], check=True)
    yield names
    for name in names:
        assert release(name) == [], name
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def box():
    """A pids group of BOX_TASKS tasks under this process's own: the whole "machine" of the hub put in it."""
    folder = own_group(ROOT, "pids") / f"pagedkv-box-{secrets.token_hex(3)}"
    folder.mkdir()
    (folder / "pids.max").write_text(str(BOX_TASKS))
    yield folder
    folder.rmdir()   # the hub in it released the learners' groups, and has ended


def _run_box(box: Path, hog: str, victim: str, hog_bound: int) -> tuple[int, int]:
    """(tasks the hog forked, children the victim started) with the hub in ``box``."""
    run = subprocess.run([sys.executable, "-c", HUB_IN_A_BOX, str(HUB), hog, victim, str(hog_bound),
                          str(VICTIM_CHILDREN)], preexec_fn=lambda: (box / "cgroup.procs").write_text(str(os.getpid())),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    born, done = map(int, run.stdout.split())
    return born, done


def test_a_bombs_bound_leaves_the_other_learner_room_to_start_processes(box, two_learners):
    hog, victim = two_learners
    born, done = _run_box(box, hog, victim, HOG_BOUND)
    assert born < HOG_BOUND and done == VICTIM_CHILDREN, (born, done)


def test_control_without_the_bombs_bound_the_other_learner_starts_nothing(box, two_learners):
    hog, victim = two_learners
    born, done = _run_box(box, hog, victim, 10 * BOX_TASKS)
    assert born < BOX_TASKS and done == 0, (born, done)
