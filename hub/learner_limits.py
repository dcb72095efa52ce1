"""Per-user bounds on the class hub: memory, CPU and processes of each user's server, by cgroups.

JupyterHub's LocalProcessSpawner enforces no limit (its ``mem_limit`` and ``cpu_limit`` are only
advertised), so one learner's memory hog or fork bomb could take the machine from the class. Where systemd
runs, The Littlest JupyterHub's SystemdSpawner gives each user a slice; here no systemd runs, so
:class:`LimitedSpawner` makes the same bounds itself: one cgroup per user (cgroup v2's single tree or v1's
``memory``, ``cpu`` and ``pids`` trees; where they live: cgroup_tree.py) with ``memory.max`` and
``memory.swap.max`` 0 / ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``, ``cpu.max`` /
``cpu.cfs_quota_us`` and ``pids.max``. Every value is read back after it is written; a value that did not
take refuses the server's start, naming the learner and the file (an unbounded learner is worse than a
refused start). The server joins its groups between fork and exec, before its first instruction, so it and
every kernel and terminal it starts are born there. Past the memory bound the kernel's out-of-memory killer
stops a process of that user only; past the process bound their fork fails; their CPU share is capped. A
user's home disk is not bounded here (that needs quotas on the file system).
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Bool, Float, Integer

from cgroup_tree import ROOT, CgroupError, is_v2, learners_parent, own_group

PAGE = os.sysconf("SC_PAGE_SIZE")
PERIOD_US = 100_000   # the CPU bound's accounting period, in microseconds


@dataclass(frozen=True)
class Bounds:
    """One user's bounds: ``memory_bytes`` (bytes, no swap beyond it), ``cpus`` (cores of CPU time per wall
    second) and ``processes`` (tasks at once)."""

    memory_bytes: int
    cpus: float
    processes: int

    def __post_init__(self):
        for name, least in (("memory_bytes", PAGE), ("cpus", 0.01), ("processes", 1)):
            if not getattr(self, name) >= least:
                raise ValueError(f"Bounds.{name} is {getattr(self, name)!r}: it must be at least {least}")


def user_groups(user: str, create: bool = False) -> dict[str, Path]:
    """``{controller: folder}`` of ``user``'s groups (v2: one folder under the key ``""``); ``create`` makes the
    learners' v2 parent ready for them (cgroup_tree.learners_parent)."""
    if is_v2():
        return {"": learners_parent(create=create) / f"pagedkv-{user}"}
    return {c: own_group(ROOT, c) / f"pagedkv-{user}" for c in ("memory", "cpu", "pids")}


def _swap_total_bytes() -> int:
    """The machine's swap, in bytes (/proc/meminfo)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _values(controller: str, folder: Path, bounds: Bounds) -> dict[str, str]:
    """The files of ``folder`` (a group of ``controller``; "" for v2) to write, in order, with their values."""
    memory = str(bounds.memory_bytes // PAGE * PAGE)   # the kernel keeps whole pages: so it reads back the same
    quota = str(int(bounds.cpus * PERIOD_US))
    values = {
        "": {"memory.max": memory, "memory.swap.max": "0", "pids.max": str(bounds.processes),
             "cpu.max": f"{quota} {PERIOD_US}"},
        "memory": {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory},
        "cpu": {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": quota},
        "pids": {"pids.max": str(bounds.processes)},
    }[controller]
    swap = {"": "memory.swap.max", "memory": "memory.memsw.limit_in_bytes"}.get(controller)
    if swap and not (folder / swap).exists():   # swap accounting off: harmless only where there is no swap
        if _swap_total_bytes() > 0:
            raise CgroupError(f"{folder / swap} is missing (swap accounting off) and this machine has swap: a "
                              "learner could swap past the memory bound; boot with swap accounting, or turn swap off")
        del values[swap]
    return values


def _write_checked(user: str, path: Path, value: str) -> None:
    """Write ``value`` to ``path`` and read it back; CgroupError naming ``user`` if it did not take."""
    try:
        path.write_text(value)
        got = path.read_text().strip()
    except OSError as err:
        raise CgroupError(f"{user}'s server would be unbounded: writing {value!r} to {path} failed: {err}") from err
    if got != value:
        raise CgroupError(f"{user}'s server would be unbounded: {path} reads {got!r} after writing {value!r}")


def prepare(user: str, bounds: Bounds) -> dict[str, Path]:
    """Make ``user``'s groups with ``bounds``, each value read back. Raises CgroupError (an OSError) naming the
    learner and the file when the machine does not allow it; nothing of theirs is left then."""
    try:
        groups = user_groups(user, create=True)
        for controller, folder in groups.items():
            folder.mkdir(exist_ok=True)
            for name, value in _values(controller, folder, bounds).items():
                _write_checked(user, folder / name, value)
    except OSError:
        release(user)
        raise
    return groups


def joining(groups: dict[str, Path], then):
    """A ``preexec_fn`` for Popen: the child writes its own pid into each of ``groups`` (as root, between fork and
    exec), then runs ``then`` (JupyterHub's: become the user). A failed write fails the start."""
    procs = [str(folder / "cgroup.procs") for folder in groups.values()]

    def preexec():
        for name in procs:
            fd = os.open(name, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        then()
    return preexec


def release(user: str, wait_s: float = 10.0) -> list[Path]:
    """Remove ``user``'s groups after their server stopped: what it left running in them (a dying kernel, a
    forked child) is killed, then each group is removed once empty, waiting up to ``wait_s`` seconds.
    Returns the groups still there."""
    left = []
    for folder in user_groups(user).values():
        deadline = time.monotonic() + wait_s
        while folder.exists():
            try:
                for pid in (folder / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
                folder.rmdir()
            except (ProcessLookupError, FileNotFoundError):
                continue
            except OSError:
                if time.monotonic() > deadline:
                    left.append(folder)
                    break
                time.sleep(0.1)
    return left


class LimitedSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose server is born inside its user's cgroups (see the module docstring)."""

    memory_bytes = Integer(4 * 2**30, help="Memory of one user's server and all it starts, in bytes").tag(config=True)
    cpus = Float(1.0, help="CPU time of one user's server and all it starts, in cores").tag(config=True)
    processes = Integer(1024, help="Processes and threads one user's server may run at once (torch starts a "
                        "thread per core in each kernel)").tag(config=True)
    bounded = Bool(True, help="Whether this server is bounded (jupyterhub_config.py: learners' are)").tag(config=True)

    async def start(self):
        if self.bounded:
            try:
                await asyncio.to_thread(prepare, self.user.name, Bounds(self.memory_bytes, self.cpus, self.processes))
            except OSError as err:   # no bound is worse than a refused start: say why
                raise RuntimeError(f"could not bound {self.user.name}'s server by cgroups, so it was not started "
                                   f"({err}); run the hub as root where cgroups can be made") from err
        try:
            return await super().start()
        except BaseException:   # not started (no program, or its preexec failed): its groups go too
            if self.bounded:
                await asyncio.to_thread(release, self.user.name)
            raise

    def make_preexec_fn(self, name):
        """JupyterHub's (become ``name``), after joining ``name``'s groups when bounded."""
        become = super().make_preexec_fn(name)
        return joining(user_groups(name), become) if self.bounded else become

    async def stop(self, now=False):
        await super().stop(now=now)
        if self.bounded:   # in a thread: it may wait for the server's last processes to go
            left = await asyncio.to_thread(release, self.user.name)
            if left:
                self.log.warning("cgroups of %s still busy, left in place: %s", self.user.name, left)
