"""Paged decode attention as one fused CPU kernel, compiled by numba, that reads blocks in place.

Same contract as :func:`pagedkv_lib.attention.paged_decode_online` and the Triton kernel in
:mod:`pagedkv_lib.triton_attention`, and the same shape of program: one program per request,
a loop over that request's blocks through its block table, an online softmax. Torch cannot
follow a block table inside a matmul, so the torch versions copy each step's blocks first; this
kernel reads every K/V row where it lies, so paging costs it no copy. What is left is the cost
of jumping from block to block, which ``benchmarks/attention.py`` measures by running the kernel
on shuffled blocks and on the same blocks in logical order.

Optional dependency: ``pip install 'pagedkv_lib[fast]'`` (numba). Without numba this module
still imports, :data:`NUMBA_MISSING` says why, :func:`paged_decode_numba` raises ImportError
and :func:`decode_function` falls back to ``paged_decode_online`` with one warning line.

Pitfalls, and what this module does about each:

* Compile time: the first call compiles for 3-7 s per cache dtype (fp32, or 16-bit).
  ``cache=True`` keeps the machine code on disk (under a second to load): in the package's
  ``__pycache__`` when that is writable, else in numba's per-user cache folder, or wherever
  ``NUMBA_CACHE_DIR`` points. Signatures are kept to two: q and the tables are normalised to
  fp32 and int64 on the host. :func:`warm_up` compiles (or loads) them ahead of time.
* numba's disk cache ignores jit options: two ``njit`` of one function with different
  ``fastmath`` share one cache entry. So the kernel is compiled with one set of options only.
* numba has no float16 arrays: fp16 and bf16 caches are passed as their 16-bit patterns and
  upcast in the kernel through a 65,536-entry fp32 table of every pattern's value.
* Threading layer: ``workqueue``, numba's own (no extra library, every platform). ``omp``
  loads a second libgomp beside torch's and aborts a process that forks after using it, and
  ``tbb`` needs a separate package. ``workqueue`` aborts when two Python threads launch at
  once, so every launch holds :data:`_LAUNCH_LOCK`; ragged batches are scheduled one request
  at a time (``parallel_chunksize(1)``), longest first. An explicit ``NUMBA_THREADING_LAYER``
  is respected.
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

from .attention import check_decode_inputs, check_scale, paged_decode_online

try:
    import numba
    import numba.extending
    from numba import njit, prange
    from numba.np.ufunc import parallel as _numba_parallel
    NUMBA_MISSING: str | None = None
    """None when numba imported; otherwise the one line that says what is missing and how to get it."""
except ImportError as exc:
    numba = None
    NUMBA_MISSING = (f"numba is not installed ({exc}): `pip install 'pagedkv_lib[fast]'` "
                     "for the fused paged decode kernel")
else:
    # The layer is chosen at the first parallel launch in the process; a user's choice stands.
    if "NUMBA_THREADING_LAYER" not in os.environ and not _numba_parallel._is_initialized:
        numba.config.THREADING_LAYER = "workqueue"

__all__ = ["NUMBA_MISSING", "paged_decode_numba", "launch_unchecked", "warm_up", "decode_function",
           "threading_layer"]

# LLVM fast-math flags: reorder sums (vectorised dot products), fuse multiply-adds, approximate
# reciprocals and exp. Without 'nnan' and 'ninf' NaN and infinity keep IEEE meaning.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}
_STEP_TOKENS = 32  # tokens between online-softmax updates, rounded to whole blocks
_LINE_BYTES = 64   # a cache line: the unit a prefetch requests
_LAUNCH_LOCK = threading.Lock()
_F16_TO_F32 = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
_BF16_TO_F32 = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
_UPCAST = {torch.float16: _F16_TO_F32, torch.bfloat16: _BF16_TO_F32}


def _jit(**options):
    """``numba.njit(**options)`` with numba present; without it, leave the function uncompiled."""
    return njit(**options) if numba is not None else (lambda fn: fn)


def _block(cache, block, n, upcast, buf):
    """Physical ``block`` of a K or V cache as ``[S, H_kv, D]`` fp32, its first ``n`` rows valid; in kernels only.

    numba compiles one of two versions by the type of ``upcast`` (:func:`_block_versions`): an fp32
    cache (``upcast is None``) is read where it lies; the ``n`` rows of a 16-bit cache are upcast
    into ``buf`` through the table ``upcast``, of every bit pattern's fp32 value.
    """
    raise TypeError("_block runs only inside numba-compiled kernels")


def _prefetch(address):
    """Ask the CPU to start loading the cache line at ``address`` (bytes); in kernels only, never faults."""
    raise TypeError("_prefetch runs only inside numba-compiled kernels")


if numba is not None:
    from llvmlite import ir
    from numba.core import cgutils

    @numba.extending.overload(_block, jit_options={"fastmath": _FASTMATH}, inline="always")
    def _block_versions(cache, block, n, upcast, buf):
        """numba picks one of :func:`_block`'s two branches by the type of ``upcast``, at compile time."""
        if isinstance(upcast, numba.types.NoneType):
            return lambda cache, block, n, upcast, buf: cache[block]

        def upcast_block(cache, block, n, upcast, buf):
            for s in range(n):
                for h in range(buf.shape[1]):
                    for d in range(buf.shape[2]):
                        buf[s, h, d] = upcast[cache[block, s, h, d]]
            return buf
        return upcast_block

    @numba.extending.intrinsic
    def _prefetch_intrinsic(typingctx, address):
        """LLVM's ``llvm.prefetch`` (read, keep in all cache levels, data) of one address."""
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            pointer = builder.inttoptr(args[0], ir.PointerType(ir.IntType(8)))
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]), "llvm.prefetch.p0")
            builder.call(fn, [pointer, i32(0), i32(3), i32(1)])
            return context.get_dummy_value()
        return numba.types.void(numba.types.intp), codegen

    @numba.extending.overload(_prefetch, inline="always")
    def _prefetch_versions(address):
        return lambda address: _prefetch_intrinsic(address)


@_jit(inline="always")
def _prefetch_row(cache, block, slot, num_bytes):
    """Request the first ``num_bytes`` of token ``slot``'s row in physical ``block``, line by line.

    All of a row (``cache.strides[1]``: 4 KiB, 64 lines, at 8 x 128 fp32) is requested one pass
    before it is read. One line of it (``_LINE_BYTES``) is requested a pass earlier still: at
    4 KiB a row is a page of memory, and its first touch waits for the address translation.
    """
    row = cache.ctypes.data + block * cache.strides[0] + slot * cache.strides[1]
    for offset in range(0, num_bytes, _LINE_BYTES):
        _prefetch(row + offset)


@_jit(parallel=True, cache=True, fastmath=_FASTMATH)
def _paged_decode_kernel(q, k_cache, v_cache, block_tables, seq_lens, order, scale, upcast,
                         step_blocks, out):
    """One program = one request ``b``, serving all its query heads from each K/V row it reads.

    What program b touches, for T = seq_lens[b] tokens in N = ceil(T / S) blocks::

        q[b]                         [H_q, D], scaled once
        block_tables[b, 0:N]         one block id per block j:  [ 7 | 2 | 9 | junk.. ]
                                                                  |   |   |
        k_cache / v_cache  block 2   [ # # # # ]  j = 1  <--------+---'   |
                           block 7   [ # # # # ]  j = 0  <--------'       |
                           block 9   [ # # # . ]  j = 2  <----------------'
                                       each # is one token's [H_kv, D] row, read in place;
                                       slots with j*S + s >= T are never read
        out[b]                       [H_q, D], written once

    Every K row is dotted with the G query heads of each KV head (GQA). Every ``step_blocks``
    blocks, a running max ``m`` and sum ``l`` per query head (fp32) rescale the accumulator when
    the max grows; then that step's V rows are added in, weighted by their probabilities.

    The Triton kernel runs one program per (request, KV head) and reads ``[S, D]`` tiles. On a
    CPU a program per request is faster: in this layout one token's KV heads are adjacent (a
    4 KiB row at 8 x 128 fp32), while one head's consecutive tokens sit a row apart. And where a
    GPU hides memory latency with thousands of threads, a core asks for rows before it needs them:
    the V rows of a step while it computes that step's scores, the next step's K rows while it
    adds this step's V rows (:func:`_prefetch_row`).
    """
    batch, num_q_heads, head_dim = q.shape
    S, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    for i in prange(batch):
        b = order[i]
        T = seq_lens[b]
        qs = q[b] * scale
        m = np.full(num_q_heads, -np.inf, dtype=np.float32)  # running max of scores
        l = np.zeros(num_q_heads, dtype=np.float32)          # running sum of exp(score - m)
        acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)  # running sum of exp(..) * v
        p = np.empty((num_q_heads, step_blocks * S), dtype=np.float32)
        two_k = np.empty(step_blocks * S, dtype=np.int32)    # scratch of _exp_shifted
        buf = np.empty((S, num_kv_heads, head_dim), dtype=np.float32)
        num_blocks = (T + S - 1) // S
        for j0 in range(0, num_blocks, step_blocks):     # a step: blocks j0 .. j1 - 1
            j1 = min(j0 + step_blocks, num_blocks)
            n = _scores(qs, k_cache, v_cache, block_tables[b], T, j0, j1, upcast, buf, p)
            _online_softmax(p, n, m, l, acc, two_k)
            _add_values(p, v_cache, k_cache, block_tables[b], T, j0, j1, upcast, buf, acc)
        for hq in range(num_q_heads):
            for d in range(head_dim):
                out[b, hq, d] = acc[hq, d] / l[hq]


@_jit(cache=True, fastmath=_FASTMATH)
def _scores(qs, k_cache, v_cache, table, T, j0, j1, upcast, buf, p):
    """``p[:, t] = qs . k_t`` for the step's tokens ``t``, block by block; returns their count (>= 1).

    Also requests each token's V row, which :func:`_add_values` reads next, and the first line
    of the next step's K rows.
    """
    S, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = qs.shape[0] // num_kv_heads
    ahead = j1 - j0                                        # block j + ahead: the same place, next step
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)                              # slots past T are never read
        k = _block(k_cache, table[j], n, upcast, buf)
        for slot in range(n):
            _prefetch_row(v_cache, table[j], slot, v_cache.strides[1])
            if (j + ahead) * S + slot < T:
                _prefetch_row(k_cache, table[j + ahead], slot, _LINE_BYTES)
            for h in range(num_kv_heads):
                for hq in range(h * group, (h + 1) * group):   # the G query heads of KV head h
                    s = np.float32(0.0)
                    for d in range(head_dim):
                        s += qs[hq, d] * k[slot, h, d]
                    p[hq, t + slot] = s
        t += n
    return t


@_jit(cache=True, fastmath=_FASTMATH)
def _online_softmax(p, n, m, l, acc, two_k):
    """Fold ``n`` new scores per query head into ``m``, ``l``; rescale ``acc``; scores become weights."""
    for hq in range(p.shape[0]):
        m_new = m[hq]
        for t in range(n):
            m_new = max(m_new, p[hq, t])
        alpha = np.exp(m[hq] - m_new)                      # 0 on the first step, where m = -inf
        l[hq] = l[hq] * alpha + _exp_shifted(p[hq], n, m_new, two_k)
        m[hq] = m_new
        for d in range(acc.shape[1]):
            acc[hq, d] *= alpha


@_jit(cache=True, fastmath=_FASTMATH, inline="always")
def _exp_shifted(x, n, shift, two_k):
    """``x[:n] = exp(x[:n] - shift)`` for ``x <= shift``, in loops LLVM vectorises; returns their sum.

    libm's ``expf`` is one scalar call per score. Here ``e**y = 2**k * e**r`` with
    ``k = round(y / ln 2)`` and ``|r| <= ln(2) / 2``: ``e**r`` by its Taylor series to ``r**7``
    (truncation error below 6e-9, relative), ``2**k`` from its exponent bits, written as int32 into
    ``two_k`` and read back as fp32. ``y`` is clamped at -87 (``e**-87`` is 1.6e-38, still a normal
    fp32), so a weight that should underflow to 0 is at most that; NaN passes through.
    """
    total = np.float32(0.0)
    for t in range(n):
        y = x[t] - shift
        y = y if not y < np.float32(-87.0) else np.float32(-87.0)   # NaN compares false: kept
        k = np.floor(y * np.float32(1.442695) + np.float32(0.5))
        r = y - k * np.float32(0.6931472)
        e_r = np.float32(1.0) + r * (np.float32(1.0) + r * (np.float32(1 / 2) + r * (np.float32(1 / 6) + r * (
            np.float32(1 / 24) + r * (np.float32(1 / 120) + r * (np.float32(1 / 720) + r * np.float32(1 / 5040)))))))
        two_k[t] = (np.int32(k) + np.int32(127)) << np.int32(23)  # the fp32 bits of 2**k, k >= -126
        x[t] = e_r
    two_k_f32 = two_k.view(np.float32)
    for t in range(n):
        x[t] *= two_k_f32[t]
        total += x[t]
    return total


@_jit(cache=True, fastmath=_FASTMATH)
def _add_values(p, v_cache, k_cache, table, T, j0, j1, upcast, buf, acc):
    """``acc += p @ V`` over the step's tokens, reading each V row in place.

    Also requests the K rows of the next step, which :func:`_scores` reads next, and the first
    line of its V rows.
    """
    S, num_kv_heads, head_dim = v_cache.shape[1], v_cache.shape[2], v_cache.shape[3]
    group = acc.shape[0] // num_kv_heads
    ahead = j1 - j0                                        # block j + ahead: the same place, next step
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)
        v = _block(v_cache, table[j], n, upcast, buf)
        for slot in range(n):
            if (j + ahead) * S + slot < T:
                _prefetch_row(k_cache, table[j + ahead], slot, k_cache.strides[1])
                _prefetch_row(v_cache, table[j + ahead], slot, _LINE_BYTES)
            for h in range(num_kv_heads):
                for hq in range(h * group, (h + 1) * group):
                    w = p[hq, t + slot]
                    for d in range(head_dim):
                        acc[hq, d] += w * v[slot, h, d]
        t += n


def paged_decode_numba(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables,
                       seq_lens, *, scale: float | None = None) -> torch.Tensor:
    """Decode attention for a batch whose K/V live in paged blocks, by the fused numba kernel.

    ``q [B, H_q, D]`` (one new token per request); ``k_cache``, ``v_cache [num_blocks, S, H_kv, D]``
    in fp32, fp16 or bf16, on the CPU; ``block_tables [B, max_blocks]`` lists each request's
    physical blocks in logical order (entries past ``ceil(T / S)`` are never read);
    ``seq_lens [B]`` tokens. Returns ``[B, H_q, D]`` in q's dtype; bad arguments raise the same
    TypeError/ValueError as :func:`pagedkv_lib.attention.paged_decode_online`.

    Precision: scores, softmax, accumulator and the probabilities that weight V are all fp32;
    the result is rounded to q's dtype once (within :data:`pagedkv_lib.attention.TOLERANCES`).
    """
    if numba is None:
        raise ImportError(NUMBA_MISSING)
    tables, lens = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    devices = sorted({str(t.device) for t in (q, k_cache, v_cache)} - {"cpu"})
    if devices:
        raise ValueError(f"paged_decode_numba runs on the CPU, but q and the caches are on {devices}: "
                         "move them with .cpu(), or use pagedkv_lib.triton_attention on a GPU")
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
        order = np.argsort(-lens, kind="stable")          # longest first: no long request starts last
        step_blocks = max(1, _STEP_TOKENS // k_cache.shape[1])
        qs = _as_array(q.detach().float())
        with _LAUNCH_LOCK:                                  # workqueue: one launch at a time
            chunk = numba.set_parallel_chunksize(1)         # ragged batches: one request at a time
            try:
                _paged_decode_kernel(qs, kc, vc, tables, lens, order, np.float32(scale), upcast,
                                     step_blocks, out)
            finally:
                numba.set_parallel_chunksize(chunk)
    return torch.from_numpy(out).to(q.dtype)


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
    from .testing import random_paged_batch
    start = time.perf_counter()
    for dtype in dtypes:
        paged_decode_numba(*random_paged_batch([1, 3], block_size=2, dtype=dtype).args())
    return time.perf_counter() - start


def threading_layer() -> str:
    """The numba threading layer this process launched kernels on (call after a launch)."""
    if numba is None:
        raise ImportError(NUMBA_MISSING)
    return numba.threading_layer()


def decode_function(fused: bool = True):
    """The decode function a lesson or a model should call: the fused kernel when numba is present.

    Without numba (or with ``fused=False``) returns :func:`pagedkv_lib.attention.paged_decode_online`,
    warning once, in one line, that the fused kernel is missing and how to install it.
    """
    if not fused:
        return paged_decode_online
    if numba is None:
        warnings.warn(f"{NUMBA_MISSING}; using pagedkv_lib.attention.paged_decode_online instead",
                      stacklevel=2)
        return paged_decode_online
    return paged_decode_numba
