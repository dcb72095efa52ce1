"""What both compiled decode kernels need around them: numpy views of tensors, plain threads, and one
way to compile them or say in one line why not.

:mod:`.fused_decode` (paged) and :mod:`.contiguous_decode` (contiguous) launch one compiled
program per request, each on ``torch.get_num_threads()`` plain Python threads that take the next
request until none is left; the programs release the GIL, so the threads run at once.
"""
from __future__ import annotations

import _thread
import threading
import warnings
from typing import Callable

import numpy as np
import torch

SIXTEEN_BIT = (torch.float16, torch.bfloat16)
"""Cache dtypes passed to numba as their uint16 bit patterns (numba has no float16)."""


def on_threads(run, items: list, num_threads: int) -> None:
    """``run(item)`` for every item, each taken by the next free one of ``num_threads`` threads (the caller's too).

    Threads are started per call and waited for before it returns; an exception in any is raised here,
    and the others take no new item after it. Nothing is shared between calls: no pool, no lock outside
    the call, so forks and concurrent calls are alike. The caller starts on the items at once:
    ``threading.Thread.start`` would first wait until the new thread runs, and a thread's start and join
    took about 0.4 ms on an idle virtual machine's other core. ``_thread.start_new_thread`` does not wait;
    each helper releases its own lock when it is done. (Such helpers are not traced by
    ``threading.settrace``: a debugger or coverage sees the caller's items only.)
    """
    lock, errors, queue = threading.Lock(), [], iter(items)

    def worker(helper_running=None):
        try:
            while True:
                with lock:
                    item = next(queue, None)
                if item is None or errors:
                    return
                run(item)
        except BaseException as exc:  # noqa: BLE001  (handed to the caller below)
            errors.append(exc)
        finally:
            if helper_running is not None:
                helper_running.release()

    helpers_running = []
    try:
        for _ in range(min(num_threads, len(items)) - 1):
            helper_running = threading.Lock()
            helper_running.acquire()                       # released when that helper's worker returns
            try:
                _thread.start_new_thread(worker, (helper_running,))
            except RuntimeError:                           # the OS gave no more threads: fewer helpers
                break
            helpers_running.append(helper_running)
        worker()
        for helper_running in helpers_running:
            helper_running.acquire()
    except BaseException as exc:  # noqa: BLE001  (Ctrl-C while waiting): the helpers take no new item
        errors.append(exc)
        raise
    if errors:
        raise errors[0]


def as_array(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view of a CPU tensor (a copy only if it is strided); fp16/bf16 as uint16 bit patterns."""
    t = t.detach()
    if t.dtype in SIXTEEN_BIT:
        t = t.view(torch.int16)
    a = np.ascontiguousarray(t.numpy())
    return a.view(np.uint16) if a.dtype == np.int16 else a


def compiled_or_why_not(kernel: str, run_tiny: Callable[[], object], fallback: str) -> str | None:
    """Compile ``kernel`` (or load it from numba's disk cache) by calling ``run_tiny``, which imports numba
    and launches the kernel on a tiny batch. None when that ran; else the one line that says why not,
    also warned (RuntimeWarning) naming ``fallback``, what the caller runs instead. Call it once per kernel
    (the callers cache it), so the warning is given once."""
    try:
        run_tiny()
        return None
    except ImportError as exc:
        reason = f"numba is not installed ({exc}): `python -m pip install numba` for the {kernel}"
    except Exception as exc:  # noqa: BLE001  (any failure of numba's: compile, lowering, its own bugs)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = f"numba could not compile the {kernel} ({type(exc).__name__}: {first[:200]})"
    warnings.warn(f"{reason}; using {fallback} instead", RuntimeWarning, stacklevel=5)
    return reason
