"""The untimed read between timed calls leaves every core idle (issue 39).

After a parallel region, torch's OpenMP workers spin for a few ms waiting for the next one, on the cores that
the fused kernels' plain threads then need. :func:`pagedkv_lib.kernels.timing.quiet_read` reads with numpy on
the calling thread, for longer than they spin, so the next timed call starts with them asleep. Measured as the
state of the process's other threads right after the read (Linux's ``/proc/self/task/*/stat``: R runs or waits
for a core, S sleeps); the control shows that a torch read instead leaves a worker running.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import pytest
import torch

from pagedkv_lib.kernels.timing import QUIET_READ_BYTES, QUIET_READ_SECONDS, quiet_read

TASKS = Path("/proc/self/task")
SAMPLES, EVERY_S = 20, 0.0001
"""The other threads' states are read this many times, this far apart, right after a read (a few ms in all)."""


def others_running() -> bool:
    """Whether any thread of this process but the caller's is running or waiting for a core (state R):
    a spinning OpenMP worker is; one asleep on its futex is S. Unlike CPU time, load does not change it."""
    me = threading.get_native_id()
    for task in TASKS.iterdir():
        if int(task.name) != me:
            try:
                stat = (task / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):    # a thread that ended meanwhile
                continue
            if stat[stat.rindex(")") + 2] == "R":
                return True
    return False


def busy_after(read) -> float:
    """The share of :data:`SAMPLES` in which another thread was running, in the few ms right after ``read()``."""
    torch.ones(4_000_000).sum()                 # a parallel region: the workers spin after it
    read()
    busy = 0
    for _ in range(SAMPLES):
        busy += others_running()
        time.sleep(EVERY_S)
    return busy / SAMPLES


@pytest.fixture
def two_torch_threads():
    if not (TASKS / str(threading.get_native_id()) / "stat").exists():
        pytest.skip("no /proc/self/task here (Linux only)")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no second core for a worker to spin on")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_quiet_read_leaves_torchs_workers_asleep_where_a_torch_read_leaves_them_spinning(two_torch_threads):
    torch_read = torch.ones(QUIET_READ_BYTES // 4).sum
    spinning = statistics.median(busy_after(torch_read) for _ in range(7))
    if spinning < 0.2:
        pytest.skip(f"torch's OpenMP workers did not spin after a torch read here (another thread running in "
                    f"{spinning:.0%} of the samples): nothing for the quiet read to guard against")
    left = [busy_after(quiet_read(1)) for _ in range(7)]
    assert statistics.median(left) < 0.1, (f"another thread was running in {[f'{x:.0%}' for x in left]} of the "
                                           f"samples after the quiet read (after a torch read: {spinning:.0%})")


def test_quiet_read_reads_at_least_its_floor_and_for_at_least_its_time():
    read = quiet_read(1)
    start = time.perf_counter()
    read()
    assert time.perf_counter() - start >= QUIET_READ_SECONDS
    data = read.__closure__[0].cell_contents
    assert data.nbytes == QUIET_READ_BYTES
    assert quiet_read(QUIET_READ_BYTES + 4096).__closure__[0].cell_contents.nbytes == QUIET_READ_BYTES + 4096
