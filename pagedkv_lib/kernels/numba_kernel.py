"""The compiled half of :mod:`pagedkv_lib.kernels.fused_decode`: the fused paged decode kernel and its parts.

Everything here runs inside numba-compiled code (but :func:`launch_record` and
:func:`torch_thread_entry`, which prepare a launch), on arguments that
:func:`pagedkv_lib.kernels.fused_decode.paged_decode_numba` has checked: nothing here checks bounds.
Without numba this module still imports, with ``numba`` set to None.

The kernel keeps the Triton kernel's shape: a program per request (:func:`_decode_request`: a
loop over blocks, an online softmax with ``m``, ``l``, ``acc``), and a grid of programs that
threads take one at a time (:func:`_run_programs`), on torch's OpenMP threads
(:func:`torch_thread_entry`) or numba's (:func:`_paged_decode_kernel`). Three things in the
program are for the CPU, each kept because it measured faster in paired rounds in the same
process (``benchmarks/RESULTS.md``, "Fused paged decode with numba, made faster"): rows are
requested a pass before they are read (:func:`_prefetch_row`); the exponentials are computed in
vectorised loops (:func:`_exp_shifted`) rather than one libm call per score; and the softmax is
updated every :data:`STEP_TOKENS` tokens.
"""
from __future__ import annotations

import functools

import numpy as np

try:
    import numba
    import numba.extending
    from numba import njit, prange
    NUMBA_IMPORT_ERROR: ImportError | None = None
    """None when numba imported; otherwise the ImportError that importing it raised."""
except ImportError as exc:
    numba = None
    NUMBA_IMPORT_ERROR = exc

# LLVM fast-math flags: reorder sums (vectorised dot products), fuse multiply-adds, approximate
# reciprocals and exp. Without 'nnan' and 'ninf' NaN and infinity keep IEEE meaning.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}
STEP_TOKENS = 32   # tokens between online-softmax updates, rounded to whole blocks
_LINE_BYTES = 64   # a cache line: the unit a prefetch requests


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
            fn = builder.module.declare_intrinsic(      # named llvm.prefetch.p0 (or .p0i8 on older LLVM)
                "llvm.prefetch", [pointer.type], ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]))
            builder.call(fn, [pointer, i32(0), i32(3), i32(1)])
            return context.get_dummy_value()
        return numba.types.void(numba.types.intp), codegen

    @numba.extending.overload(_prefetch, inline="always")
    def _prefetch_versions(address):
        return lambda address: _prefetch_intrinsic(address)

    # Three LLVM instructions numba has no Python spelling for; callable in kernels only.
    @numba.extending.intrinsic
    def _take_next(typingctx, counter):
        """``counter[0] += 1`` (an int64 array) as one atomic step (``atomicrmw add``), returning the value before.

        Threads that call it at once each get a different number: the next program to run.
        """
        def codegen(context, builder, signature, args):
            array = context.make_array(signature.args[0])(context, builder, args[0])
            return builder.atomic_rmw("add", array.data, ir.Constant(ir.IntType(64), 1), "monotonic")
        return numba.types.int64(counter), codegen

    @numba.extending.intrinsic
    def _address(typingctx, address):
        """The int64 ``address`` as a ``void *`` (``inttoptr``), for ``numba.carray``."""
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(numba.types.voidptr))
        return numba.types.voidptr(numba.types.int64), codegen

    @numba.extending.intrinsic
    def _float32_from_bits(typingctx, bits):
        """The fp32 number whose bit pattern is the low 32 bits of the int64 ``bits``."""
        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
        return numba.types.float32(numba.types.int64), codegen


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


@_jit(cache=True, fastmath=_FASTMATH)
def _run_programs(order, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks,
                  next_program, out):
    """What each thread runs: :func:`_decode_request` for the next request in ``order``, until none is left.

    A GPU's scheduler gives each free core the next program of the grid. Here each thread does the
    same: it takes the next request from the shared counter ``next_program[0]`` (0 at launch).
    A thread slowed down (by another process, or by a pool of threads still spinning) then simply
    runs fewer requests. Launched longest first, no thread is left with a long request at the end.
    """
    i = _take_next(next_program)
    while i < q.shape[0]:
        _decode_request(order[i], q, k_cache, v_cache, block_tables, seq_lens, scale, upcast,
                        step_blocks, out)
        i = _take_next(next_program)


@_jit(parallel=True, cache=True, fastmath=_FASTMATH)
def _paged_decode_kernel(q, k_cache, v_cache, block_tables, seq_lens, order, scale, upcast, step_blocks,
                         num_workers, next_program, out):
    """The launch on numba's threads: :func:`_run_programs` on each of ``num_workers`` of them.

    Where torch's OpenMP threads can be borrowed, the same :func:`_run_programs` runs on those
    instead (:func:`torch_thread_entry`).
    """
    for _ in prange(num_workers):
        _run_programs(order, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks,
                      next_program, out)


def launch_record(q, k_cache, v_cache, block_tables, seq_lens, order, out, next_program, scale, upcast,
                  step_blocks) -> np.ndarray:
    """The int64 record a thread of torch's pool reads its launch from.

    Fields: the addresses of ``q``, the caches, ``block_tables``, ``seq_lens``, ``order``, ``out``,
    ``next_program`` and ``upcast`` (0 for an fp32 cache); then ``B, H_q, D``, ``num_blocks, S,
    H_kv``, ``max_blocks``, ``step_blocks`` and the bits of the fp32 ``scale``. It holds no
    references: the arrays must stay alive until the launch returns.
    """
    arrays = (q, k_cache, v_cache, block_tables, seq_lens, order, out, next_program)
    addresses = [a.ctypes.data for a in arrays] + [0 if upcast is None else upcast.ctypes.data]
    sizes = [*q.shape, *k_cache.shape[:3], block_tables.shape[1], step_blocks]
    return np.array(addresses + sizes + [int(np.float32(scale).view(np.uint32))], np.int64)


_RECORD_LEN = 9 + 8 + 1          # addresses, sizes, scale: see launch_record


@_jit(cache=True, fastmath=_FASTMATH)
def _run_record(record, cache_dtype, upcast):
    """:func:`_run_programs` on the arrays a :func:`launch_record` names, the caches as ``cache_dtype``."""
    batch, num_q_heads, head_dim, num_blocks, S, num_kv_heads, max_blocks, step_blocks = record[9:17]
    _run_programs(numba.carray(_address(record[5]), batch, np.int64),
                  numba.carray(_address(record[0]), (batch, num_q_heads, head_dim), np.float32),
                  numba.carray(_address(record[1]), (num_blocks, S, num_kv_heads, head_dim), cache_dtype),
                  numba.carray(_address(record[2]), (num_blocks, S, num_kv_heads, head_dim), cache_dtype),
                  numba.carray(_address(record[3]), (batch, max_blocks), np.int64),
                  numba.carray(_address(record[4]), batch, np.int64),
                  _float32_from_bits(record[17]), upcast, step_blocks,
                  numba.carray(_address(record[7]), 1, np.int64),
                  numba.carray(_address(record[6]), (batch, num_q_heads, head_dim), np.float32))


def _torch_thread_fp32(record):
    """A torch thread's entry for an fp32 cache: ``record`` is the address of a :func:`launch_record`."""
    _run_record(numba.carray(record, _RECORD_LEN, np.int64), np.float32, None)


def _torch_thread_16bit(record):
    """A torch thread's entry for an fp16 or bf16 cache, passed as bit patterns with their fp32 table."""
    fields = numba.carray(record, _RECORD_LEN, np.int64)
    _run_record(fields, np.uint16, numba.carray(_address(fields[8]), 2**16, np.float32))


@functools.cache
def torch_thread_entry(sixteen_bit: bool):
    """The C entry point (a ``numba.cfunc``) for each thread of torch's pool, compiled on first use."""
    body = _torch_thread_16bit if sixteen_bit else _torch_thread_fp32
    return numba.cfunc(numba.types.void(numba.types.voidptr), cache=True, fastmath=_FASTMATH)(body)


@_jit(cache=True, fastmath=_FASTMATH)
def _decode_request(b, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, out):
    """One program: request ``b``, serving all its query heads from each K/V row it reads.

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
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    S, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
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
