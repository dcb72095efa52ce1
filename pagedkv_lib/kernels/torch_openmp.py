"""Run a compiled function on torch's own OpenMP threads, so that one process has one thread pool.

After each parallel op, torch's OpenMP workers spin for several milliseconds before they sleep
(measured on the course's 2-core machine: about 9 ms of CPU after a matmul or an SDPA call). A
second pool started right after (numba's, say) then shares the cores with them: the fused
decode kernel took 7.9 ms right after per-request SDPA on its own numba threads and 5.1 ms on
torch's (``benchmarks/RESULTS.md``). Handing the work to torch's pool instead uses the very
threads that are spinning.

The hand-over is ``GOMP_parallel(fn, data, num_threads, 0)``, the entry point GCC's OpenMP
runtime (``libgomp``, in Linux torch wheels) exports and LLVM's ``libomp`` (macOS torch) also
provides: every thread of the team calls ``fn(data)`` once, and the call returns when all have.
``fn`` is a C function pointer, e.g. a ``numba.cfunc``'s ``address``; it must not raise.

:func:`parallel_entry` returns None, and callers use their own threads, when torch's parallel
backend is not OpenMP, when the entry point is not found (e.g. Windows), and in a process forked
from one that imported this module: there, libgomp's pool belongs to threads the fork did not
copy, and the child's first parallel region never returns (measured: a forked child's first
parallel torch op hangs here after its parent ran one). A process forked *before* it imported
this module cannot be told from any other; if its parent had run parallel torch ops, its own
torch ops hang there too, and so would this hand-over.
"""
from __future__ import annotations

import ctypes
import os

import torch

__all__ = ["parallel_entry", "run_on_torch_threads"]

_FORKED = False


def _forget_after_fork() -> None:
    global _FORKED
    _FORKED = True


os.register_at_fork(after_in_child=_forget_after_fork)


def _lookup():
    """torch's ``GOMP_parallel`` as a ctypes function, or None where it cannot be used."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        entry = ctypes.CDLL(torch._C.__file__).GOMP_parallel   # found among torch's own libraries
    except (OSError, AttributeError):
        return None
    entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    entry.restype = None
    return entry


_ENTRY = _lookup()


def parallel_entry():
    """The OpenMP entry point to call, or None (no OpenMP in torch, or a forked process)."""
    return None if _FORKED else _ENTRY


def run_on_torch_threads(fn_address: int, data_address: int) -> None:
    """Call ``fn(data)`` once on each of ``torch.get_num_threads()`` torch threads; return when all have.

    Only where :func:`parallel_entry` is not None (else RuntimeError). ctypes releases the GIL for
    the call, so ``fn`` must not touch Python objects.
    """
    entry = parallel_entry()
    if entry is None:
        raise RuntimeError("torch's OpenMP threads cannot be borrowed here (see torch_openmp.parallel_entry)")
    entry(fn_address, data_address, torch.get_num_threads(), 0)
