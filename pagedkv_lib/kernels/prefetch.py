"""Asking the CPU for a K/V row before the kernel reads it: LLVM's ``prefetch``, callable from numba.

A paged kernel jumps to another block every S tokens, somewhere else in memory, and the CPU's
own prefetcher, which follows steady strides, cannot guess where. The kernel of 2026-12-01 named the
rows it would need next (each token's V row while it computed that token's scores, the next step's K
rows while it added this step's V rows), kept then for a same-process A/B on an AMD EPYC
(``benchmarks/kernel_pieces.py``, which still rebuilds that kernel). Issue 39's kernel dropped them: on
an Ice Lake Xeon the program without them was faster (``benchmarks/RESULTS.md``, issue 39). A
prefetch never faults and never changes a result, only when memory arrives.

Compiled code only; importing this module imports numba and llvmlite.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import njit

LINE_BYTES = 64
"""A cache line, the unit one prefetch asks for."""


@numba.extending.intrinsic
def _prefetch(typingctx, address):
    """``llvm.prefetch`` of the byte at ``address`` (an int): for reading, kept in every cache level."""
    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        pointer = builder.inttoptr(args[0], ir.PointerType(ir.IntType(8)))
        fn = builder.module.declare_intrinsic(      # llvm.prefetch.p0 (or .p0i8 on older LLVM)
            "llvm.prefetch", [pointer.type], ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]))
        builder.call(fn, [pointer, i32(0), i32(3), i32(1)])    # read, locality 3 (keep), data cache
        return context.get_dummy_value()
    return numba.types.void(numba.types.intp), codegen


@njit(inline="always")
def prefetch_row(cache, block, slot, num_bytes):
    """Ask for the first ``num_bytes`` of token ``slot``'s row in physical ``block`` of ``cache``, line by line."""
    row = cache.ctypes.data + block * cache.strides[0] + slot * cache.strides[1]
    for offset in range(0, num_bytes, LINE_BYTES):
        _prefetch(row + offset)


@njit(inline="always")
def prefetch_token(rows, row, num_bytes):
    """Ask for the first ``num_bytes`` of ``rows[row]`` (one token's ``[H_kv, D]`` in a contiguous cache), line by line."""
    start = rows.ctypes.data + row * rows.strides[0]
    for offset in range(0, num_bytes, LINE_BYTES):
        _prefetch(start + offset)
