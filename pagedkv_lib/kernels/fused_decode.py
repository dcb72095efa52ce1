"""Paged decode attention as one fused CPU kernel, compiled by numba, that reads blocks in place.

Same contract as :func:`pagedkv_lib.attention.spec.paged_decode_online` and the Triton kernel in
:mod:`pagedkv_lib.attention.triton_decode`, and the same shape of program: one program per request,
a loop over that request's blocks through its block table, an online softmax. Torch cannot
follow a block table inside a matmul, so the torch versions copy each step's blocks first; this
kernel reads every K/V row where it lies, so paging costs it no copy. What is left is the cost
of jumping from block to block, which ``benchmarks/attention.py`` measures by running the kernel
on shuffled blocks and on the same blocks in logical order.

Optional dependency: ``pip install 'pagedkv_lib[fast]'`` (numba). Without numba this module
still imports, :data:`NUMBA_MISSING` says why, :func:`paged_decode_numba` raises ImportError
and :func:`decode_function` falls back to ``paged_decode_online`` with one warning line.

The compiled kernel and what it does for speed on a CPU are in :mod:`pagedkv_lib.kernels.numba_kernel`;
this module is the checked entry, the launch, and the fallback. Pitfalls, and what is done about each:

* Compile time: the first call compiles for 3-8 s per cache dtype (fp32, or 16-bit).
  ``cache=True`` keeps the machine code on disk (under a second to load): in the package's
  ``__pycache__`` when that is writable, else in numba's per-user cache folder, or wherever
  ``NUMBA_CACHE_DIR`` points. Signatures are kept to two: q and the tables are normalised to
  fp32 and int64 on the host. :func:`warm_up` compiles (or loads) them ahead of time.
* numba's disk cache ignores jit options: two ``njit`` of one function with different
  ``fastmath`` share one cache entry. So the kernel is compiled with one set of options only.
* numba has no float16 arrays: fp16 and bf16 caches are passed as their 16-bit patterns and
  upcast in the kernel through a 65,536-entry fp32 table of every pattern's value.
* Threads: the kernel runs on torch's own OpenMP threads (:mod:`pagedkv_lib.kernels.torch_openmp`),
  so ``torch.set_num_threads`` sets how many. After a parallel op torch's OpenMP workers spin
  for several milliseconds before they sleep; a second pool started then shares the cores with
  them (on 2 cores, right after per-request SDPA: 7.9 ms on numba's threads, 5.1 ms on torch's).
  For the same reason the checks and the launch avoid parallel torch ops: the block-id check
  does without boolean indexing (elementwise ops stay serial below torch's grain size, 32,768
  table entries), and a half-precision q is upcast in numpy. Each thread takes the next request, longest first,
  from a shared atomic counter, so a thread that shares its core simply runs fewer.
* Where torch's threads cannot be borrowed (torch without OpenMP, e.g. on Windows; a forked
  child, where libgomp's pool never answers), or with :data:`PREFER_TORCH_THREADS` False, the
  kernel runs on numba's threads (``numba.set_num_threads``), on its ``workqueue`` layer: no
  extra library, every platform, and it survives forks. ``omp`` loads a second libgomp beside
  torch's and aborts a process that forks after using it; ``tbb`` needs a separate package.
  ``workqueue`` aborts when two Python threads launch at once, so every launch holds
  :data:`_LAUNCH_LOCK`; it splits a ``prange`` into one equal run per thread whatever
  ``parallel_chunksize`` says, hence the counter. An explicit ``NUMBA_THREADING_LAYER`` is respected.
* No bounds checks inside the kernel: :func:`paged_decode_numba` checks every argument first.
* Fast math without ``nnan``/``ninf``: reassociation (vectorised dot products) but NaN and
  infinity keep their meaning; the prototype this kernel grew from measured full
  ``fastmath=True`` no faster, and no fast math at all 3x slower.
"""
from __future__ import annotations

import os
import threading
import time
import warnings

import numpy as np
import torch

from ..attention.spec import check_decode_inputs, check_scale, paged_decode_online
from . import numba_kernel, torch_openmp
from .numba_kernel import NUMBA_IMPORT_ERROR, STEP_TOKENS, numba

NUMBA_MISSING: str | None = None
"""None when numba imported; otherwise the one line that says what is missing and how to get it."""
if numba is None:
    NUMBA_MISSING = (f"numba is not installed ({NUMBA_IMPORT_ERROR}): `pip install 'pagedkv_lib[fast]'` "
                     "for the fused paged decode kernel")
else:
    from numba.np.ufunc import parallel as _numba_parallel
    # The layer is chosen at the first parallel launch in the process; a user's choice stands.
    if "NUMBA_THREADING_LAYER" not in os.environ and not _numba_parallel._is_initialized:
        numba.config.THREADING_LAYER = "workqueue"

__all__ = ["NUMBA_MISSING", "paged_decode_numba", "launch_unchecked", "warm_up",
           "decode_function", "threading_layer"]

_LAUNCH_LOCK = threading.Lock()
PREFER_TORCH_THREADS = True
"""Run the kernel on torch's own OpenMP threads where torch allows (:mod:`pagedkv_lib.kernels.torch_openmp`);
False: always on numba's threads (``numba.set_num_threads`` then sets their number)."""
_LAST_POOL: str | None = None


def _after_fork_in_child() -> None:
    """A forked child starts with the launch lock free and no launch of its own yet."""
    global _LAST_POOL
    _LAUNCH_LOCK.release()
    _LAST_POOL = None


# a fork waits for a launch in another thread to end, so that the child never inherits a held lock
os.register_at_fork(before=_LAUNCH_LOCK.acquire, after_in_parent=_LAUNCH_LOCK.release,
                    after_in_child=_after_fork_in_child)

_F16_TO_F32 = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
_BF16_TO_F32 = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
_UPCAST = {torch.float16: _F16_TO_F32, torch.bfloat16: _BF16_TO_F32}


def paged_decode_numba(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                       seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """Decode attention for a batch whose K/V live in paged blocks, by the fused numba kernel.

    ``q [B, H_q, D]`` (one new token per request); ``k_cache``, ``v_cache [num_blocks, S, H_kv, D]``
    in fp32, fp16 or bf16, on the CPU; ``block_tables [B, max_blocks]`` lists each request's
    physical blocks in logical order (entries past ``ceil(T / S)`` are never read);
    ``seq_lens [B]`` tokens. Returns ``[B, H_q, D]`` in q's dtype; bad arguments raise the same
    TypeError/ValueError as :func:`pagedkv_lib.attention.spec.paged_decode_online`.

    Precision: scores, softmax, accumulator and the probabilities that weight V are all fp32;
    the result is rounded to q's dtype once (within :data:`pagedkv_lib.attention.spec.TOLERANCES`).
    """
    if numba is None:
        raise ImportError(NUMBA_MISSING)
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    devices = sorted({str(t.device) for t in (q, k_cache, v_cache)} - {"cpu"})
    if devices:
        raise ValueError(f"paged_decode_numba runs on the CPU, but q and the caches are on {devices}: "
                         "move them with .cpu(), or use pagedkv_lib.attention.triton_decode on a GPU")
    return launch_unchecked(q, k_cache, v_cache, tables, lens, scale)


def launch_unchecked(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The kernel launch alone, for arguments :func:`paged_decode_numba` accepts (CPU, checked).

    Bad arguments here read out of bounds instead of raising. The caches are viewed in place as
    numpy arrays (a strided cache is copied once to a contiguous one); q becomes fp32 and the
    tables int64, so the kernel has one compiled version per cache dtype.
    """
    if numba is None:
        raise ImportError(NUMBA_MISSING)
    out = np.empty(q.shape, dtype=np.float32)
    batch = q.shape[0]
    if batch:
        upcast = _UPCAST.get(k_cache.dtype)
        kc, vc = _as_array(k_cache), _as_array(v_cache)
        lens = _as_array(seq_lens.to(torch.int64))
        tables = _as_array(block_tables.to(torch.int64))
        order = np.argsort(-lens, kind="stable")          # longest first: see numba_kernel._run_programs
        step_blocks = max(1, STEP_TOKENS // k_cache.shape[1])
        qs = _UPCAST[q.dtype][_as_array(q)] if q.dtype in _UPCAST else _as_array(q)   # fp32 either way
        next_program = np.zeros(1, dtype=np.int64)          # the kernel's shared counter
        scale = np.float32(scale)
        with _LAUNCH_LOCK:                                  # workqueue: one launch at a time
            _launch(qs, kc, vc, tables, lens, order, scale, upcast, step_blocks, next_program, out)
    return torch.from_numpy(out).to(q.dtype)


def _launch(qs, kc, vc, tables, lens, order, scale, upcast, step_blocks, next_program, out) -> None:
    """Run the kernel on torch's OpenMP threads where :data:`PREFER_TORCH_THREADS` and torch allow, else on numba's."""
    global _LAST_POOL
    if PREFER_TORCH_THREADS and torch_openmp.parallel_entry() is not None:
        record = numba_kernel.launch_record(qs, kc, vc, tables, lens, order, out, next_program, scale,
                                            upcast, step_blocks)
        entry = numba_kernel.torch_thread_entry(sixteen_bit=upcast is not None)
        torch_openmp.run_on_torch_threads(entry.address, record.ctypes.data)
        _LAST_POOL = "torch-openmp"
        return
    chunk = numba.set_parallel_chunksize(1)                 # omp/tbb: one worker per thread
    try:
        numba_kernel._paged_decode_kernel(qs, kc, vc, tables, lens, order, scale, upcast, step_blocks,
                                          numba.get_num_threads(), next_program, out)
    finally:
        numba.set_parallel_chunksize(chunk)
    _LAST_POOL = numba.threading_layer()


def _as_array(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view of a CPU tensor; fp16/bf16 as their uint16 bit patterns."""
    t = t.detach()
    if t.dtype in _UPCAST:
        t = t.view(torch.int16)
    a = np.ascontiguousarray(t.numpy())
    return a.view(np.uint16) if a.dtype == np.int16 else a


def warm_up(dtypes=(torch.float32,)) -> float:
    """Compile (or load from numba's disk cache) the kernel for caches of ``dtypes``; returns seconds.

    The first call in a fresh environment compiles for about 6 s per dtype (fp16 and bf16 share
    one version); later processes load it in well under a second. Raises ImportError without numba.
    """
    from ..attention.batch import random_paged_batch
    start = time.perf_counter()
    for dtype in dtypes:
        paged_decode_numba(*random_paged_batch([1, 3], block_size=2, dtype=dtype).args())
    return time.perf_counter() - start


def threading_layer() -> str:
    """The threads this process's last launch ran on: ``"torch-openmp"``, or numba's layer (e.g. ``"workqueue"``)."""
    if numba is None:
        raise ImportError(NUMBA_MISSING)
    return _LAST_POOL or numba.threading_layer()


def decode_function(fused: bool = True):
    """The decode function a lesson or a model should call: the fused kernel when numba is present.

    Without numba (or with ``fused=False``) returns :func:`pagedkv_lib.attention.spec.paged_decode_online`,
    warning once, in one line, that the fused kernel is missing and how to install it.
    """
    if not fused:
        return paged_decode_online
    if numba is None:
        warnings.warn(f"{NUMBA_MISSING}; using pagedkv_lib.attention.spec.paged_decode_online instead",
                      stacklevel=2)
        return paged_decode_online
    return paged_decode_numba
