"""A memory cgroup per sandboxed kernel: one bound on all its processes together.

``prlimit`` bounds each process's address space, but a kernel may start many processes (up to its
process limit), and each may use its whole allowance. A cgroup's memory limit bounds their sum: past
it, the kernel's own processes are killed by the out-of-memory killer, inside the group, and the
grading machine keeps its memory.

:func:`memory_group` makes a child of the grader's own memory cgroup, with cgroup v1's
``memory.limit_in_bytes`` or cgroup v2's ``memory.max``. Where the grader may not make one (not root,
a container without a writable cgroup file system, v2 without the memory controller delegated), it
returns None, and kernels run with the per-process limits only (:func:`available` tells which;
``autograde`` says so in one line). On cgroup v2 the grader's own group must have the memory controller
delegated to it (for example ``systemd-run --scope -p Delegate=yes make autograde``). Swap: v1 limits
memory and swap together where the kernel accounts swap (``memory.memsw``), and memory alone where it
does not; v2 gives the group no swap.
:func:`join_prefix` is the command prefix that moves a kernel's first process into the group before
anything else runs; every process it starts is born there.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryGroup:
    """One kernel's memory cgroup: its folder and the file its processes are listed in."""

    path: Path
    v1: bool

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def _counts(self, name: str) -> dict[str, int]:
        out = {}
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                out[key] = int(value) if value.strip().isdigit() else 0
        except OSError:
            pass
        return out

    def limit_kills(self) -> int:
        """Processes of the group the out-of-memory killer stopped because the group hit its own limit
        (0 where not reported; a kill by a machine-wide shortage, with the limit never reached, is not one)."""
        if self.v1:  # the group's peak reached its limit (memory.failcnt stays 0 on some kernels)
            peak, limit = (_number(self.path / f"memory.{n}") for n in ("max_usage_in_bytes", "limit_in_bytes"))
            return self._counts("memory.oom_control").get("oom_kill", 0) if 0 < limit <= peak else 0
        events = self._counts("memory.events")
        return events.get("oom_kill", 0) if events.get("oom", 0) > 0 else 0

    def remove(self) -> None:
        """Kill whatever still runs in the group, then remove it (a no-op if it is gone)."""
        for _ in range(100):
            try:
                pids = [int(p) for p in self.procs.read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                try:
                    self.path.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError:  # EBUSY: a task still leaving the group
                    pass
            for pid in pids:
                if pid > 0:  # 0: a task outside this process's PID namespace (never signal group 0)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.02)


def _own_memory_cgroup() -> tuple[Path, bool] | None:
    """The folder of this process's memory cgroup and whether it is cgroup v1, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            return ROOT / "memory" / parts[2].lstrip("/"), True
    for line in lines:  # v2: only where the memory controller is delegated to this process's own group
        own = ROOT / line[3:].lstrip("/")
        if line.startswith("0::") and "memory" in _read(own / "cgroup.subtree_control").split():
            return own, False
    return None


def _number(path: Path) -> int:
    text = _read(path).strip()
    return int(text) if text.isdigit() else 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def memory_group(limit_bytes: int, name: str | None = None) -> MemoryGroup | None:
    """A new memory cgroup ``name`` (default: a fresh one) limited to ``limit_bytes`` (bytes), or None
    where none can be made here."""
    own = _own_memory_cgroup()
    if own is None:
        return None
    parent, v1 = own
    path = parent / (name or f"pkv-group-{uuid.uuid4().hex[:12]}")
    try:
        path.mkdir()
    except OSError:
        return None
    group = MemoryGroup(path, v1)
    try:
        (path / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(int(limit_bytes)))
        swap = path / ("memory.memsw.limit_in_bytes" if v1 else "memory.swap.max")
        if swap.exists():  # where swap is accounted, it counts too (v1: memory + swap; v2: no swap)
            swap.write_text(str(int(limit_bytes)) if v1 else "0")
    except OSError:
        group.remove()
        return None
    return group


def remove_group(name: str) -> None:
    """Remove the group ``name`` made by :func:`memory_group` in this process's cgroup, if it is there
    (what a killed grading worker could not clean up), killing what still runs in it."""
    own = _own_memory_cgroup()
    if own is not None and (own[0] / name).is_dir():
        MemoryGroup(own[0] / name, own[1]).remove()


def available() -> bool:
    """Whether this process can make memory cgroups for its kernels."""
    group = memory_group(2**30)
    if group is None:
        return False
    group.remove()
    return True


def join_prefix(group: MemoryGroup | None) -> list[str]:
    """A command prefix that puts the command's process into ``group``, then runs it (empty for None)."""
    if group is None:
        return []
    # a group that cannot be joined (it vanished, or the write is refused) leaves the kernel outside it:
    # limited per process only, and graded all the same
    return ["/bin/sh", "-c", 'echo $$ 2>/dev/null > "$0"; exec "$@"', str(group.procs)]
