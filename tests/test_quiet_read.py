"""The untimed read between timed calls leaves every core idle (issue 39).

After a parallel region, torch's OpenMP workers spin for a few ms waiting for the next one, on the cores
that the fused kernels' plain threads then need. :func:`pagedkv_lib.kernels.timing.quiet_read` reads with
numpy on the calling thread, for longer than they spin, so the next timed call starts with them asleep.
Measured as the CPU time the process's other threads use in a window after the read (Linux's per-thread
``schedstat``, in ns); the control shows that a torch read instead leaves them busy in that window.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch

from pagedkv_lib.kernels.timing import QUIET_READ_BYTES, quiet_read

TASKS = Path("/proc/self/task")
WINDOW_S = 0.03
"""How long the other threads are watched after the read: longer than libgomp's spin."""


def others_cpu_ns() -> int:
    """CPU time so far of every thread of this process but the caller's, in ns."""
    me, total = threading.get_native_id(), 0
    for task in TASKS.iterdir():
        if int(task.name) != me:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):    # a thread that ended meanwhile
                pass
    return total


def busy_after(read) -> int:
    """CPU ns the other threads use during a busy wait of ``WINDOW_S`` that starts right after ``read()``."""
    torch.ones(4_000_000).sum()                 # a parallel region: the workers spin after it
    read()
    start_ns, start = others_cpu_ns(), time.perf_counter()
    while time.perf_counter() - start < WINDOW_S:
        pass
    return others_cpu_ns() - start_ns


@pytest.fixture
def two_torch_threads():
    if not (TASKS / str(threading.get_native_id()) / "schedstat").exists():
        pytest.skip("no per-thread schedstat here (Linux with schedstats)")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no second core for a worker to spin on")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_quiet_read_leaves_torchs_workers_asleep_where_a_torch_read_leaves_them_spinning(two_torch_threads):
    torch_read = torch.ones(QUIET_READ_BYTES // 4).sum
    spinning = max(busy_after(torch_read) for _ in range(3))
    if spinning < 2e6:
        pytest.skip(f"torch's OpenMP workers did not spin after a torch read here ({spinning / 1e6:.1f} ms of CPU "
                    f"in {WINDOW_S * 1e3:.0f} ms): nothing for the quiet read to guard against")
    quiet = quiet_read(1)
    left = [busy_after(quiet) for _ in range(3)]
    assert max(left) < 1e6, (f"other threads used {[f'{n / 1e6:.1f}' for n in left]} ms of CPU after the quiet read "
                             f"(after a torch read: {spinning / 1e6:.1f} ms)")


def test_quiet_read_reads_at_least_its_floor_and_at_least_what_it_is_asked():
    assert quiet_read(1).__self__.nbytes == QUIET_READ_BYTES
    assert quiet_read(QUIET_READ_BYTES + 4096).__self__.nbytes == QUIET_READ_BYTES + 4096
