"""Paged decode attention as one fused CPU kernel, compiled by numba, that reads blocks in place.

Same contract as :func:`pagedkv_lib.attention.spec.paged_decode_online` and the Triton kernel in
:mod:`pagedkv_lib.attention.triton_decode`, and the same shape of program: one program per
request, a loop over that request's blocks through its block table, an online softmax. Torch
cannot follow a block table inside a matmul, so the torch versions copy each step's blocks
first; this kernel reads every K/V row where it lies, so paging costs it no copy.

This module is the checked entry, the launch and the fallback; the compiled program is
:func:`.numba_kernel.decode_request`.

* **Optional, and never in the way.** Importing this module imports neither numba nor anything
  that changes the process. The first call (or :func:`warm_up`) imports numba and compiles the
  kernel, 3-8 s per cache dtype (fp32, or 16-bit), or loads it from numba's disk cache in under a
  second. If *anything* in that fails (numba missing or broken, a compile or lowering error), one
  warning line says why and :func:`paged_decode_numba` computes with the torch version
  :func:`pagedkv_lib.attention.fast.paged_decode_online_fast` instead: same result to
  :data:`~pagedkv_lib.attention.spec.TOLERANCES`. :func:`kernel_unavailable` says which runs.
* **Threads.** ``torch.get_num_threads()`` plain Python threads (the caller among them) each take
  the next request, longest first, until none is left, so a thread slowed down by another
  process simply runs fewer. The kernel releases the GIL (``nogil``), so they run at once. Nothing
  is shared between launches: no thread pool, no lock, no numba threading layer, so concurrent
  calls, forks and every platform are alike. Right after torch work on several threads, torch's
  OpenMP workers spin for a few ms on the cores these threads need (measured 1.4-2x slower at two
  threads, ``benchmarks/RESULTS.md``); ``OMP_WAIT_POLICY=PASSIVE``, set before torch starts, stops that.
* **Pages.** On the OS's default 4 KiB pages every K/V row (at 8 KV heads x 128 x fp32) is a page's worth
  of bytes, each page an address translation; caches on huge pages (:func:`.huge_pages.on_huge_pages`)
  took less time here, at one thread and two (``benchmarks/RESULTS.md``). The program asks for rows
  :data:`.prefetch.PREFETCH_TOKENS` tokens before it reads them: the next block's lie anywhere.
* **Layout.** q becomes fp32 and the tables int64, and a strided cache is copied once to a
  contiguous one, so the kernel has one compiled version per cache dtype. numba has no float16:
  fp16 and bf16 caches are passed as their 16-bit patterns with a table of their fp32 values.
* No bounds checks inside the kernel: :func:`paged_decode_numba` checks every argument first, the tables'
  bounds by one compiled pass (:func:`.table_bounds.tables_fit`) where they are int64 tensors already.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch

from ..attention.batch import random_paged_batch
from ..attention.fast import paged_decode_online_fast
from ..attention.validation import check_decode_inputs, check_decode_tensors, check_scale
from .launch import as_array, compiled_or_why_not, on_threads

__all__ = ["paged_decode_numba", "kernel_unavailable", "warm_up", "STEP_TOKENS"]

STEP_TOKENS = 32
"""Tokens between online-softmax updates, rounded to whole blocks (32 measured 5-13% faster than 64)."""

_F16_TO_F32 = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
_BF16_TO_F32 = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
_UPCAST = {torch.float16: _F16_TO_F32, torch.bfloat16: _BF16_TO_F32}


def paged_decode_numba(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                       seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """Decode attention for a batch whose K/V live in paged blocks, by the fused kernel.

    ``q [B, H_q, D]`` (one new token per request); ``k_cache``, ``v_cache [num_blocks, S, H_kv, D]``
    in fp32, fp16 or bf16, on the CPU; ``block_tables [B, max_blocks]`` lists each request's
    physical blocks in logical order (entries past ``ceil(T / S)`` are never read);
    ``seq_lens [B]`` tokens. Returns ``[B, H_q, D]`` in q's dtype; bad arguments raise the same
    TypeError/ValueError as :func:`pagedkv_lib.attention.spec.paged_decode_online`.

    Precision: scores, softmax, accumulator and the weights of V are fp32; the result is rounded
    to q's dtype once. Where :func:`kernel_unavailable` the torch version computes it instead.
    """
    check_decode_tensors(q, k_cache, v_cache)
    devices = sorted({str(t.device) for t in (q, k_cache, v_cache)} - {"cpu"})
    compiled = not devices and kernel_unavailable(k_cache.dtype) is None
    tables, lens = (_checked_tables if compiled else check_decode_inputs)(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    if devices:
        raise ValueError(f"paged_decode_numba runs on the CPU, but q and the caches are on {devices}: "
                         "move them with .cpu(), or use pagedkv_lib.attention.triton_decode on a GPU")
    if not compiled:
        return paged_decode_online_fast(q, k_cache, v_cache, tables, lens, scale=scale)
    return _launch(q, k_cache, v_cache, tables, lens, scale)


def kernel_unavailable(dtype: torch.dtype = torch.float32) -> str | None:
    """None when the compiled kernel for caches of ``dtype`` is ready; else the one line that says why not.

    The first call per cache kind imports numba and compiles (or loads) that version; a failure
    is warned once, in that line, and :func:`paged_decode_numba` then uses the torch version.
    """
    return _ready(dtype in _UPCAST)


def warm_up(dtypes=(torch.float32,)) -> float:
    """Get the kernel ready for caches of ``dtypes`` ahead of the first call; returns the seconds it took.

    A fresh environment compiles for about 6 s per dtype (fp16 and bf16 share one version);
    later processes load it from numba's disk cache in well under a second.
    """
    start = time.perf_counter()
    for dtype in dtypes:
        kernel_unavailable(dtype)
    return time.perf_counter() - start


@functools.cache
def _ready(sixteen_bit: bool) -> str | None:
    """Compile (or load) one version by running it on a tiny batch; None, or why it failed, warned once."""
    batch = random_paged_batch([3, 1], block_size=2, dtype=torch.float16 if sixteen_bit else torch.float32)

    def run_tiny():
        from . import numba_kernel        # noqa: F401  (imports numba)
        q, k_cache, v_cache, tables, lens = batch.args()
        _launch(q, k_cache, v_cache, *_checked_tables(q, k_cache, v_cache, tables, lens), scale=0.5)
    return compiled_or_why_not("fused kernel", run_tiny, "pagedkv_lib.attention.fast.paged_decode_online_fast")


def _checked_tables(q, k_cache, v_cache, block_tables, seq_lens) -> tuple[torch.Tensor, torch.Tensor]:
    """``check_decode_inputs(...)``'s checked ``(block_tables, seq_lens)``, q and the caches checked already, the
    kernel ready.

    Where both are int64 CPU tensors of a batch's shapes, one compiled pass checks their bounds
    (:func:`.table_bounds.tables_fit`); anything else, or anything out of bounds, goes to
    :func:`~pagedkv_lib.attention.validation.check_decode_inputs`, which converts or says what is wrong.
    """
    from .table_bounds import tables_fit
    if (all(isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.device.type == "cpu"
            and t.layout == torch.strided and t.dim() == dim for t, dim in ((block_tables, 2), (seq_lens, 1)))
            and block_tables.shape[0] == seq_lens.shape[0] == q.shape[0]
            and tables_fit(as_array(block_tables), as_array(seq_lens), k_cache.shape[0], k_cache.shape[1])):
        return block_tables, seq_lens
    return check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)


def _launch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
            seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The kernel on checked CPU arguments: every request's program, on ``torch.get_num_threads()`` threads.

    Private: out-of-range lengths or block ids here read out of bounds instead of raising.
    """
    from .numba_kernel import decode_request
    from .prefetch import PREFETCH_TOKENS
    out = np.empty(q.shape, dtype=np.float32)
    lens = as_array(seq_lens.to(torch.int64))
    args = (_UPCAST[q.dtype][as_array(q)] if q.dtype in _UPCAST else as_array(q),   # fp32 either way
            as_array(k_cache), as_array(v_cache), as_array(block_tables.to(torch.int64)), lens,
            np.float32(scale), _UPCAST.get(k_cache.dtype), max(1, STEP_TOKENS // k_cache.shape[1]),
            PREFETCH_TOKENS, out)
    longest_first = np.argsort(-lens, kind="stable").tolist()
    on_threads(lambda b: decode_request(b, *args), longest_first, torch.get_num_threads())
    return torch.from_numpy(out).to(q.dtype)
