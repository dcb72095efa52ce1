"""The learners' parent group under cgroup v2 (hub/cgroup_tree.py), on the real kernel: a hub whose group holds
processes is moved into a leaf so that controllers can be enabled for the learners (the "no internal processes"
rule refuses them otherwise), and a hub given no controllers is told so. Runs on whatever cgroup v2 tree this
machine mounts (the whole tree, or the unified one beside v1's trees) with a controller it offers there."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

HUB = Path(__file__).resolve().parents[2] / "hub"
sys.path.insert(0, str(HUB))
from cgroup_tree import CONTROLLERS, HUB_LEAF, LEARNERS  # noqa: E402


def _v2() -> tuple[Path | None, str]:
    """(the cgroup v2 mount, a controller its root offers), or (None, why not)."""
    if os.geteuid() != 0:
        return None, "makes cgroups: needs root"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1] == "cgroup2" and fields[3] == "/":
            mount = Path(fields[4])
            offered = (mount / "cgroup.controllers").read_text().split()
            pick = [c for c in CONTROLLERS if c in offered] or offered
            if pick and os.access(mount, os.W_OK):
                return mount, pick[0]
            return None, f"cgroup v2 at {mount} offers no controller, or is read-only"
    return None, "no cgroup v2 tree is mounted"


MOUNT, CONTROLLER = _v2()
pytestmark = pytest.mark.skipif(MOUNT is None, reason=CONTROLLER)

# The hub stand-in: in its group with a child of its own, it asks for the learners' parent, then reports.
HUB_STANDIN = """
import subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from cgroup_tree import learners_parent
child = subprocess.Popen(["sleep", "60"])
try:
    print(learners_parent(Path(sys.argv[2]), (sys.argv[3],)))
except OSError as err:
    print("refused:", err)
for pid in ("self", child.pid):
    print(next(l for l in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if l.startswith("0::"))[3:])
child.kill()
"""


def _join(group: Path):
    return lambda: (group / "cgroup.procs").write_text(str(os.getpid()))


@pytest.fixture
def busy_group():
    """A fresh group under the v2 mount that offers CONTROLLER to its children's children; removed after."""
    control = MOUNT / "cgroup.subtree_control"
    turned_on = CONTROLLER not in control.read_text().split()
    if turned_on:
        control.write_text(f"+{CONTROLLER}")
    group = MOUNT / f"pagedkv-test-{secrets.token_hex(3)}"
    group.mkdir()
    yield group
    for folder in sorted(group.rglob("*"), key=lambda p: -len(p.parts)):
        if folder.is_dir():
            folder.rmdir()
    group.rmdir()
    if turned_on:
        control.write_text(f"-{CONTROLLER}")


def _standin(group: Path) -> list[str]:
    run = subprocess.run([sys.executable, "-c", HUB_STANDIN, str(HUB), str(MOUNT), CONTROLLER],
                         preexec_fn=_join(group), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_a_hub_in_a_busy_group_moves_to_a_leaf_and_its_learners_get_the_controller(busy_group):
    parent, hub_after, child_after = _standin(busy_group)
    assert parent == str(busy_group / LEARNERS)
    leaf = "/" + str((busy_group / HUB_LEAF).relative_to(MOUNT))
    assert hub_after == leaf and child_after == leaf   # the hub and what it had started
    assert (busy_group / "cgroup.procs").read_text() == ""
    for group in (busy_group, busy_group / LEARNERS):
        assert CONTROLLER in (group / "cgroup.subtree_control").read_text().split()
    assert (busy_group / LEARNERS / "x").mkdir() is None and CONTROLLER in \
        (busy_group / LEARNERS / "x" / "cgroup.controllers").read_text().split()


def test_a_controller_the_hubs_parent_lacks_is_given_down_the_path(busy_group):
    inner = busy_group / "inner"   # busy_group enables nothing for its children
    inner.mkdir()
    assert _standin(inner)[0] == str(inner / LEARNERS)
    assert CONTROLLER in (busy_group / "cgroup.subtree_control").read_text().split()


def test_a_group_on_the_way_that_holds_processes_is_named_with_what_to_change(busy_group):
    inner = busy_group / "inner"
    inner.mkdir()
    squatter = subprocess.Popen(["sleep", "60"], preexec_fn=_join(busy_group))   # so busy_group may enable nothing
    try:
        said = _standin(inner)[0]
    finally:
        squatter.kill()
        squatter.wait()
    assert said.startswith("refused:") and f"{busy_group / 'cgroup.subtree_control'} refused them" in said, said
    assert "Delegate=yes" in said
