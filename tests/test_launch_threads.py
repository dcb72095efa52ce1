"""The fused kernels' plain threads (:func:`pagedkv_lib.kernels.launch.on_threads`): every item run exactly once,
every helper finished before the call returns, an exception in any thread raised to the caller."""
from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.kernels.launch import on_threads


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 24), st.integers(1, 4), st.integers(0, 3))
def test_every_item_runs_exactly_once_and_all_have_finished_when_it_returns(n_items, num_threads, pause_every):
    ran, finished, lock = [], [], threading.Lock()

    def run(item):
        with lock:
            ran.append((item, threading.get_ident()))
        if pause_every and item % pause_every == 0:
            time.sleep(0.001)                          # a slow item: others must not be taken twice meanwhile
        with lock:
            finished.append(item)

    on_threads(run, list(range(n_items)), num_threads)
    assert sorted(item for item, _ in ran) == list(range(n_items))
    assert sorted(finished) == list(range(n_items))    # nothing still running after the return
    assert len({ident for _, ident in ran}) <= max(1, min(num_threads, n_items))


@pytest.mark.parametrize("num_threads", [1, 2, 3])
@pytest.mark.parametrize("bad", [0, 5, 11])
def test_an_exception_in_any_thread_is_raised_to_the_caller_and_the_rest_stop(num_threads, bad):
    ran = []

    def run(item):
        ran.append(item)
        if item == bad:
            raise ArithmeticError(f"item {item}")
        time.sleep(0.002)

    with pytest.raises(ArithmeticError, match=f"item {bad}"):
        on_threads(run, list(range(12)), num_threads)
    if num_threads == 1:
        assert ran == list(range(bad + 1))             # nothing after the failing item
    elif bad == 0:
        assert 0 in ran and len(ran) < 12              # the other threads stopped taking items


def test_no_thread_outlives_the_call():
    """Counted in Linux's ``/proc/self/task``: helpers end once their worker returns (a thread left waiting
    for more work would leak one per launch)."""
    tasks = lambda: len(os.listdir("/proc/self/task"))   # noqa: E731
    before = tasks()
    for _ in range(20):
        on_threads(lambda item: None, list(range(50)), 3)
    deadline = time.monotonic() + 2.0
    while tasks() > before and time.monotonic() < deadline:
        time.sleep(0.01)                              # a helper's last instructions after releasing its lock
    assert tasks() <= before                          # (another test's thread may end meanwhile)


def test_when_the_os_gives_no_more_threads_the_ones_it_gave_do_the_work(monkeypatch):
    import pagedkv_lib.kernels.launch as launch
    real, started = launch._thread.start_new_thread, []

    def one_thread_only(function, args):
        if started:
            raise RuntimeError("can't start new thread")
        started.append(1)
        return real(function, args)

    monkeypatch.setattr(launch._thread, "start_new_thread", one_thread_only)
    ran = []
    on_threads(lambda item: ran.append(item), list(range(40)), 4)
    assert sorted(ran) == list(range(40)) and started == [1]
