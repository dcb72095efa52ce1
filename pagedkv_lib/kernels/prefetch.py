"""Asking the CPU for a K/V row before the kernel reads it: LLVM's ``prefetch``, callable from numba.

A paged kernel jumps to another block every S tokens, somewhere else in memory, and the CPU's
own prefetcher, which follows steady strides within a 4 KiB page, cannot guess where. At 8 KV
heads x 128 x fp32 each token's row is one such page: the prefetcher would start over on every row.

The fused programs (:mod:`.numba_kernel` and its contiguous twin) ask for each KV head's part of
the rows :data:`PREFETCH_TOKENS` tokens ahead of the four they are reading (:func:`ask_for_head_part`),
so that memory works while they compute. Measured on an AMD EPYC (Zen 4), same process, the time with
over the time without: paged 0.66-0.79, contiguous 0.65-0.77, at one thread and two (``benchmarks/prefetch_ab.py``,
``benchmarks/RESULTS.md``). Asked into L1 instead, an earlier form of them took 0.93-0.96 (likely because L1
has fewer slots than L2 for misses in flight). On the Ice Lake Xeon of earlier runs, similar prefetches into
L1 gained nothing steady; these have not run there. The kernel of
2026-12-01 asked into L1 for rows one step ahead (``benchmarks/kernel_pieces.py`` rebuilds it). A prefetch
never faults and never changes a result, only when memory arrives.

Compiled code only; importing this module imports numba and llvmlite.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import njit

LINE_BYTES = 64
"""A cache line, the unit one prefetch asks for."""

PREFETCH_TOKENS = 16
"""How many tokens ahead of the ones they read the fused programs ask for rows (0: none). 4, 8, 12 and 16
measured alike (within 5% of each other, same process); 32 slower (0.77 of the time without against 0.72 at
16, lesson 03's batch, one thread), likely because lines then wait in L2 long enough to be evicted first."""


def prefetch_intrinsic(locality: int):
    """A numba intrinsic ``f(address)``: ``llvm.prefetch`` of the byte at ``address`` (an int), for reading,
    ``locality`` 3 (keep in every cache level, x86's ``prefetcht0``) down to 1 (``prefetcht2``)."""
    @numba.extending.intrinsic
    def prefetch(typingctx, address):
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            pointer = builder.inttoptr(args[0], ir.PointerType(ir.IntType(8)))
            fn = builder.module.declare_intrinsic(      # llvm.prefetch.p0 (or .p0i8 on older LLVM)
                "llvm.prefetch", [pointer.type], ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]))
            builder.call(fn, [pointer, i32(0), i32(locality), i32(1)])    # read, locality, data cache
            return context.get_dummy_value()
        return numba.types.void(numba.types.intp), codegen
    return prefetch


_prefetch_l2 = prefetch_intrinsic(2)


@njit(inline="always")
def prefetch_to_l2(address, num_bytes):
    """Ask for ``num_bytes`` from ``address`` (an int), line by line, into L2 (x86's ``prefetcht1``)."""
    for offset in range(0, num_bytes, LINE_BYTES):
        _prefetch_l2(address + offset)


@njit(inline="always")
def ask_for_head_part(rows, cache, h):
    """Ask for KV head ``h``'s part of each of ``rows`` (addresses of rows of ``cache``; 0: none) into L2: its D
    values, found the same way in a paged ``[num_blocks, S, H_kv, D]`` cache and in packed ``[N, H_kv, D]`` rows
    (:func:`head_part`)."""
    offset, num_bytes = head_part(cache, h)
    for row in rows:
        if row != 0:
            prefetch_to_l2(row + offset, num_bytes)


@njit(inline="always")
def head_part(cache, h):
    """``(offset, bytes)`` of KV head ``h``'s D values within a row of ``cache`` (heads next to last, D last)."""
    return h * cache.strides[cache.ndim - 2], cache.shape[cache.ndim - 1] * cache.itemsize
