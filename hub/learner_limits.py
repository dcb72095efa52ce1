"""Per-user bounds on the class hub: memory, CPU and processes of each user's server, by cgroups.

JupyterHub's LocalProcessSpawner enforces no limit (its ``mem_limit`` and ``cpu_limit`` are only
advertised), so one learner's memory hog or fork bomb could take the machine from the class. Where systemd
runs, The Littlest JupyterHub's SystemdSpawner gives each user a slice; here no systemd runs, so
:class:`LimitedSpawner` makes the same bounds itself: one cgroup per user and controller (cgroup v2's
single tree, or v1's ``memory``, ``cpu`` and ``pids`` trees), under the hub's own group, with
``memory.max``/``memory.limit_in_bytes``, ``cpu.max``/``cpu.cfs_quota_us`` and ``pids.max``, and moves the
user's server into them as it starts: every kernel and terminal it starts is born there. Past the memory
bound the kernel's out-of-memory killer stops a process of that user only; past the process bound their
fork fails; their CPU share is capped. A user's home disk is not bounded here (that needs quotas on the
file system).
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

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Bounds:
    """One user's bounds: ``memory_bytes`` (bytes, swap included where the kernel counts it), ``cpus`` (cores
    of CPU time per wall second) and ``processes`` (tasks at once)."""

    memory_bytes: int
    cpus: float
    processes: int


def _own_group(controller: str) -> Path:
    """This process's own cgroup folder for ``controller`` (v1), or in the single v2 tree ("" controller)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, where = line.split(":", 2)
        if controller in names.split(",") or (not controller and not names):
            return (ROOT / controller / where.lstrip("/")) if controller else ROOT / where.lstrip("/")
    raise OSError(f"no {controller or 'v2'} cgroup for this process")


def user_groups(user: str) -> dict[str, Path]:
    """``{controller: folder}`` of ``user``'s groups (v2: one folder under the key ``""``)."""
    if (ROOT / "cgroup.controllers").exists():
        return {"": _own_group("") / f"pagedkv-{user}"}
    return {c: _own_group(c) / f"pagedkv-{user}" for c in ("memory", "cpu", "pids")}


def bound(user: str, pid: int, bounds: Bounds) -> dict[str, Path]:
    """Make ``user``'s groups with ``bounds`` and move process ``pid`` (and so all it starts) into them.
    Raises OSError naming the file when the machine does not allow it (no root, no controller)."""
    groups = user_groups(user)
    quota_us, period_us = int(bounds.cpus * 100_000), 100_000
    for controller, folder in groups.items():
        folder.mkdir(exist_ok=True)
        if controller == "":
            parent = folder.parent / "cgroup.subtree_control"
            parent.write_text("+memory +cpu +pids")
            values = {"memory.max": bounds.memory_bytes, "memory.swap.max": 0, "pids.max": bounds.processes,
                      "cpu.max": f"{quota_us} {period_us}"}
        elif controller == "memory":
            values = {"memory.limit_in_bytes": bounds.memory_bytes}
            if (folder / "memory.memsw.limit_in_bytes").exists():
                values["memory.memsw.limit_in_bytes"] = bounds.memory_bytes
        elif controller == "cpu":
            values = {"cpu.cfs_period_us": period_us, "cpu.cfs_quota_us": quota_us}
        else:
            values = {"pids.max": bounds.processes}
        for name, value in values.items():
            (folder / name).write_text(str(value))
        (folder / "cgroup.procs").write_text(str(pid))
    return groups


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
    """LocalProcessSpawner whose server runs inside its user's cgroups (see the module docstring)."""

    memory_bytes = Integer(4 * 2**30, help="Memory of one user's server and all it starts, in bytes").tag(config=True)
    cpus = Float(1.0, help="CPU time of one user's server and all it starts, in cores").tag(config=True)
    processes = Integer(1024, help="Processes and threads one user's server may run at once (torch starts a "
                        "thread per core in each kernel)").tag(config=True)
    bounded = Bool(True, help="Whether this server is bounded (jupyterhub_config.py: learners' are)").tag(config=True)

    async def start(self):
        where = await super().start()
        if not self.bounded:
            return where
        try:
            bound(self.user.name, self.pid, Bounds(self.memory_bytes, self.cpus, self.processes))
        except OSError as err:   # no bound is worse than a refused start: stop it and say why
            await super().stop(now=True)
            raise RuntimeError(f"could not bound {self.user.name}'s server by cgroups ({err}); "
                               "run the hub as root where cgroups can be made") from err
        return where

    async def stop(self, now=False):
        await super().stop(now=now)
        if self.bounded:   # in a thread: it may wait for the server's last processes to go
            left = await asyncio.to_thread(release, self.user.name)
            if left:
                self.log.warning("cgroups of %s still busy, left in place: %s", self.user.name, left)
