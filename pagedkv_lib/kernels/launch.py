"""What both compiled decode kernels need around them: numpy views of tensors, and plain threads.

:mod:`.fused_decode` (paged) and :mod:`.contiguous_decode` (contiguous) launch one compiled
program per request, each on ``torch.get_num_threads()`` plain Python threads that take the next
request until none is left; the programs release the GIL, so the threads run at once.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

SIXTEEN_BIT = (torch.float16, torch.bfloat16)
"""Cache dtypes passed to numba as their uint16 bit patterns (numba has no float16)."""


def on_threads(run, items: list, num_threads: int) -> None:
    """``run(item)`` for every item, each taken by the next free one of ``num_threads`` threads (the caller's too).

    Threads are started per call and joined before it returns; an exception in any is raised here.
    Nothing is shared between calls: no pool, no lock outside the call, so forks and concurrent
    calls are alike.
    """
    lock, errors, queue = threading.Lock(), [], iter(items)

    def worker():
        try:
            while True:
                with lock:
                    item = next(queue, None)
                if item is None or errors:
                    return
                run(item)
        except BaseException as exc:  # noqa: BLE001  (handed to the caller below)
            errors.append(exc)

    helpers = [threading.Thread(target=worker, daemon=True) for _ in range(min(num_threads, len(items)) - 1)]
    for t in helpers:
        t.start()
    worker()
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]


def as_array(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view of a CPU tensor (a copy only if it is strided); fp16/bf16 as uint16 bit patterns."""
    t = t.detach()
    if t.dtype in SIXTEEN_BIT:
        t = t.view(torch.int16)
    a = np.ascontiguousarray(t.numpy())
    return a.view(np.uint16) if a.dtype == np.int16 else a
