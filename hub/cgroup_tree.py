"""Where the learners' cgroups live, and making their parent legal: cgroup v2's single tree or v1's trees.

cgroup v2 gives a group's children a controller only when the group holds no process of its own (the "no
internal processes" rule; the machine's real root is exempt): writing ``+memory`` into the
``cgroup.subtree_control`` of the hub's own group fails with EBUSY while the hub runs in it. So, as container
runtimes and systemd's delegated units do, the hub keeps its own group as a parent with no processes: if the
write is refused, every process in it (the hub, and what it started) moves into the leaf
``<hub's group>/pagedkv-hub``, then the controllers are enabled (where the hub's group was not given them, first
in every group from the tree's root down to it) and the learners' groups live in
``<hub's group>/pagedkv-learners/pagedkv-<user>``. v1 has no such rule: ``<hub's group in each
tree>/pagedkv-<user>``.
Every write here is read back; what did not take raises :class:`CgroupError` naming the file.
"""
from __future__ import annotations

import errno
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "cpu", "pids")
HUB_LEAF, LEARNERS = "pagedkv-hub", "pagedkv-learners"


class CgroupError(OSError):
    """A cgroup could not be made or set as asked: the bound it was for would not hold."""


def is_v2(root: Path = ROOT) -> bool:
    """Whether ``root`` is a cgroup v2 tree (it has ``cgroup.controllers``); else v1 trees are under it."""
    return (root / "cgroup.controllers").exists()


def own_group(root: Path = ROOT, controller: str = "") -> Path:
    """This process's cgroup folder: in v1's ``controller`` tree under ``root``, or, with no controller, in the
    v2 tree mounted at ``root``."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, where = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and not names):
            return (root / controller if controller else root) / where.lstrip("/")
    raise CgroupError(errno.ENOENT, f"this process is in no {controller or 'cgroup v2'} group")


def hub_group(root: Path = ROOT) -> Path:
    """The hub's v2 group: its own, or the parent of the ``pagedkv-hub`` leaf it was moved into."""
    own = own_group(root)
    return own.parent if own.name == HUB_LEAF else own


def _words(path: Path) -> set[str]:
    return set(path.read_text().split())


def enable(group: Path, controllers: tuple[str, ...]) -> None:
    """Give ``group``'s children ``controllers`` (v2), then check they are on. Raises OSError (EBUSY while
    ``group`` holds processes), or CgroupError when the file does not show them afterwards."""
    control = group / "cgroup.subtree_control"
    missing = [c for c in controllers if c not in _words(control)]
    if missing:
        control.write_text(" ".join(f"+{c}" for c in missing))
    if not set(controllers) <= _words(control):
        raise CgroupError(errno.EIO, f"{control} reads {sorted(_words(control))} after enabling {missing}")


def evacuate(group: Path, tries: int = 5) -> Path:
    """Move every process of ``group`` into its leaf ``pagedkv-hub``; ``tries`` rounds for those forked meanwhile.
    Returns the leaf."""
    leaf = group / HUB_LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(tries):
        pids = (group / "cgroup.procs").read_text().split()
        if not pids:
            return leaf
        for pid in pids:
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except ProcessLookupError:   # it ended meanwhile
                pass
    raise CgroupError(errno.EBUSY, f"processes keep arriving in {group}; cannot empty it into {leaf}")


def give_down(root: Path, group: Path, controllers: tuple[str, ...]) -> None:
    """Enable ``controllers`` in every group from the tree's ``root`` down to ``group``'s parent, so that
    ``group`` has them. Raises CgroupError saying what the operator must change where one is refused (a group
    on the way that holds processes)."""
    for ancestor in reversed(group.parents):
        if ancestor == root or root in ancestor.parents:
            try:
                enable(ancestor, controllers)
            except OSError as err:
                raise CgroupError(errno.EPERM, f"cgroup v2 controllers {list(controllers)} are not given to the hub's "
                                  f"group {group}, and {ancestor / 'cgroup.subtree_control'} refused them "
                                  f"({err.strerror or err}), so learners cannot be bounded: enable them there, or "
                                  "under systemd run the hub in a unit with Delegate=yes") from err


def learners_parent(root: Path = ROOT, controllers: tuple[str, ...] = CONTROLLERS, create: bool = True) -> Path:
    """The v2 group whose children are the learners' groups, with ``controllers`` enabled for them (``create``:
    made so now: given down the path from the tree's root, and the hub moved into its leaf if the rule asks;
    else only the path). Raises CgroupError saying what the operator must change where the kernel refuses."""
    hub = hub_group(root)
    parent = hub / LEARNERS
    if not create:
        return parent
    lacking = tuple(sorted(set(controllers) - _words(hub / "cgroup.controllers")))
    if lacking:
        give_down(root, hub, lacking)
    try:
        enable(hub, controllers)
    except OSError as err:
        if err.errno != errno.EBUSY:
            raise
        evacuate(hub)
        enable(hub, controllers)
    parent.mkdir(exist_ok=True)
    enable(parent, controllers)
    return parent
