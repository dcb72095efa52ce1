"""Each learner's server is bounded by cgroups (hub/learner_limits.py): a fork bomb and a memory hog of one
user stop at that user's bounds, the server is inside its groups from its first instruction, and a bound that
does not take refuses the start. Real cgroups and a real system user; needs root, as ``make hub`` does."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hub"))
from cgroup_tree import CONTROLLERS, ROOT, CgroupError, is_v2  # noqa: E402
from learner_limits import Bounds, LimitedSpawner, prepare, release, user_groups  # noqa: E402


def _no_tree() -> str:
    """Why this machine has no writable cgroup tree with memory, cpu and pids for the bounds; "" if it has one."""
    if os.geteuid() != 0:
        return "makes cgroups and a system user: needs root"
    if is_v2():
        have = set((ROOT / "cgroup.controllers").read_text().split())
        return "" if set(CONTROLLERS) <= have and os.access(ROOT, os.W_OK) else \
            f"cgroup v2 at {ROOT} offers {sorted(have)}, not all of {list(CONTROLLERS)}, or is read-only"
    folders = [ROOT / c for c in ("memory", "cpu", "pids")]
    lacking = [str(f) for f in folders if not (f / "cgroup.procs").exists() or not os.access(f, os.W_OK)]
    return f"neither cgroup v2 at {ROOT} nor writable v1 trees ({', '.join(lacking)} missing or read-only)" \
        if lacking else ""


pytestmark = pytest.mark.skipif(bool(_no_tree()), reason=_no_tree() or "-")

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


def _spawned(user: str, argv: list[str], bounds: Bounds, **popen) -> subprocess.Popen:
    """``argv`` started as the hub's LimitedSpawner starts a server: groups made, then Popen with its preexec."""
    prepare(user, bounds)
    return subprocess.Popen(argv, preexec_fn=LimitedSpawner().make_preexec_fn(user), start_new_session=True,
                            cwd="/", text=True, **popen)


def _bounded_run(user: str, code: str, bounds: Bounds) -> subprocess.CompletedProcess:
    proc = _spawned(user, ["/usr/bin/python3", "-c", code], bounds,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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


def test_the_server_is_in_its_users_groups_from_its_first_instruction(learner):
    """The first program the spawner execs reads its own cgroups: a server that joined after it started would
    read the hub's (and this one has exited by then)."""
    proc = _spawned(learner, ["/bin/cat", "/proc/self/cgroup"], Bounds(256 * 2**20, 1.0, 64), stdout=subprocess.PIPE)
    seen = dict(line.split(":", 2)[1:] for line in proc.communicate(timeout=30)[0].splitlines())
    for controller, folder in user_groups(learner).items():
        mount = ROOT / controller if controller else ROOT
        name = next(n for n in seen if controller in n.split(",")) if controller else ""
        assert seen[name] == "/" + str(folder.relative_to(mount)), (controller, seen)
    who = _spawned(learner, ["/usr/bin/id", "-un"], Bounds(256 * 2**20, 1.0, 64), stdout=subprocess.PIPE)
    assert who.communicate(timeout=30)[0].strip() == learner


def test_a_bound_the_kernel_refuses_names_the_learner_and_leaves_nothing(learner):
    with pytest.raises(CgroupError) as refused:
        prepare(learner, Bounds(256 * 2**20, 1.0, 2**40))   # past any kernel's pid limit
    assert learner in str(refused.value) and "pids.max" in str(refused.value) and "unbounded" in str(refused.value)
    assert not any(p.exists() for p in user_groups(learner).values())


@pytest.mark.parametrize("field, value", [("memory_bytes", 0), ("cpus", -1.0), ("processes", 0)])
def test_bad_bounds_are_named(field, value):
    given = {"memory_bytes": 2**30, "cpus": 1.0, "processes": 64, field: value}
    with pytest.raises(ValueError, match=rf"Bounds\.{field} is {value!r}: it must be at least"):
        Bounds(**given)
