"""The fused kernel's time at every offset of the stack within a page, before and after its score loop stopped spilling.

Usage: python benchmarks/stack_offset.py [--cases 4k,lesson] [--step 16] [--passes 3] [--repeats 1]

Linux starts each process's main thread at a random offset within a page (``arch_align_stack``: up to 8 KiB
lower, in 16-byte steps), and the fused kernel at one thread runs every request on the caller's thread
(:func:`pagedkv_lib.kernels.launch.on_threads`), so each process runs it at another offset of the stack mod
4096. A loop that keeps values on the stack (register spills) can then take longer in some processes than in
others. This script runs every offset in one process: a numba driver reserves ``offset`` bytes of stack
(:func:`reserve_stack`, a dynamic ``alloca``) and then runs the whole batch, one request after another, on the
calling thread.

Two programs, interleaved offset by offset (the lesson's quiet read before each call):

* ``now``: the library's :func:`pagedkv_lib.kernels.numba_kernel.decode_request`, whose four-token score pass
  is two loops of two tokens x four query heads (8 running sums);
* ``before``: the same program with the score pass's loop as it was until 2026-12-07, one loop of four tokens x
  four heads (16 sums, plus 8 loaded values: more than AVX2's 16 vector registers, so LLVM kept some on the
  stack). Rebuilt here for these batches only (a group of exactly four heads; a block's last 1-3 tokens one query
  head at a time), and with its own stack frame: its slow offsets are this copy's, not the old library function's.

Reported per case: each program's median over offsets and passes; the offsets where it took over 1.2x its pass's
median in every pass (a burst of noise from elsewhere on the machine slows both programs at a few neighbouring
offsets in one pass; every other pass runs the offsets in reverse order, and two passes were not always enough
here) and the slowest of them, the least over passes; now / before as the median of per-offset ratios. Only
effects over 1.2x count as slow: smaller ones hide in the spread of the ratios. Cases as ``decode_bandwidth.py``:
``4k`` (8 x 4,096 tokens) and ``lesson``; 32 query heads, 8 KV heads, head dim 128, block size 16, fp32,
shuffled blocks, caches on huge pages. Needs numba.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from decode_bandwidth import cases                     # the lesson's batch as decode_bandwidth.py defines it
from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.kernels import fused_decode as FD
from pagedkv_lib.kernels.huge_pages import on_huge_pages
from pagedkv_lib.kernels.launch import as_array
from pagedkv_lib.kernels.prefetch import PREFETCH_TOKENS, ask_for_head_part
from pagedkv_lib.kernels.timing import quiet_read

assert FD.kernel_unavailable() is None, "needs numba"
from pagedkv_lib.kernels import numba_kernel as NK    # noqa: E402  (imports numba)
from pagedkv_lib.kernels.softmax_step import _FASTMATH, _online_softmax  # noqa: E402


@intrinsic
def reserve_stack(typingctx, nbytes):
    """Move the stack ``nbytes`` lower for the rest of the calling function (a dynamic alloca); its address."""
    def codegen(context, builder, signature, args):
        reserved = builder.alloca(ir.IntType(8), size=args[0])     # its address escapes, so it is kept
        return builder.ptrtoint(reserved, ir.IntType(64))
    return types.int64(types.int64), codegen


@njit(fastmath=_FASTMATH)
def scores_before(qs, k_cache, table, T, j0, j1, upcast, ahead, p):
    """:func:`~pagedkv_lib.kernels.numba_kernel._scores` as it was: one loop of four tokens x four heads (fp32
    caches and a group of four only, as this script's batch has)."""
    S, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = qs.shape[0] // num_kv_heads
    t = 0
    for j in range(j0, j1):
        n = min(S, T - j * S)
        block = table[j]
        slot = 0
        while slot + 4 <= n:
            later = NK._rows_ahead(k_cache, table, T, j * S + slot + ahead, ahead)
            for h in range(num_kv_heads):
                ask_for_head_part(later, k_cache, h)
                g = h * group
                zero = np.float32(0.0)
                a0, a1, a2, a3, b0, b1, b2, b3 = zero, zero, zero, zero, zero, zero, zero, zero
                c0, c1, c2, c3, e0, e1, e2, e3 = zero, zero, zero, zero, zero, zero, zero, zero
                for d in range(head_dim):
                    ka, kb = k_cache[block, slot, h, d], k_cache[block, slot + 1, h, d]
                    kc, ke = k_cache[block, slot + 2, h, d], k_cache[block, slot + 3, h, d]
                    q0, q1, q2, q3 = qs[g, d], qs[g + 1, d], qs[g + 2, d], qs[g + 3, d]
                    a0, a1, a2, a3 = a0 + q0 * ka, a1 + q1 * ka, a2 + q2 * ka, a3 + q3 * ka
                    b0, b1, b2, b3 = b0 + q0 * kb, b1 + q1 * kb, b2 + q2 * kb, b3 + q3 * kb
                    c0, c1, c2, c3 = c0 + q0 * kc, c1 + q1 * kc, c2 + q2 * kc, c3 + q3 * kc
                    e0, e1, e2, e3 = e0 + q0 * ke, e1 + q1 * ke, e2 + q2 * ke, e3 + q3 * ke
                c = t + slot
                p[g, c], p[g, c + 1], p[g, c + 2], p[g, c + 3] = a0, b0, c0, e0
                p[g + 1, c], p[g + 1, c + 1], p[g + 1, c + 2], p[g + 1, c + 3] = a1, b1, c1, e1
                p[g + 2, c], p[g + 2, c + 1], p[g + 2, c + 2], p[g + 2, c + 3] = a2, b2, c2, e2
                p[g + 3, c], p[g + 3, c + 1], p[g + 3, c + 2], p[g + 3, c + 3] = a3, b3, c3, e3
            slot += 4
        for s in range(slot, n):                                  # a block's last 1-3 tokens
            for hq in range(qs.shape[0]):
                total = np.float32(0.0)
                for d in range(head_dim):
                    total += qs[hq, d] * k_cache[block, s, hq // group, d]
                p[hq, t + s] = total
        t += n
    return t


@njit(fastmath=_FASTMATH)
def decode_before(b, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, ahead, out):
    """:func:`~pagedkv_lib.kernels.numba_kernel.decode_request` with :func:`scores_before`."""
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    S, T = k_cache.shape[1], seq_lens[b]
    qs = q[b] * scale
    m = np.full(num_q_heads, -np.inf, dtype=np.float32)
    l = np.zeros(num_q_heads, dtype=np.float32)
    acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)
    p = np.empty((num_q_heads, step_blocks * S), dtype=np.float32)
    two_k = np.empty(step_blocks * S, dtype=np.int32)
    table = block_tables[b]
    num_blocks = (T + S - 1) // S
    for j0 in range(0, num_blocks, step_blocks):
        j1 = min(j0 + step_blocks, num_blocks)
        n = scores_before(qs, k_cache, table, T, j0, j1, upcast, ahead, p)
        _online_softmax(p, n, m, l, acc, two_k)
        NK._add_values(p, v_cache, table, T, j0, j1, upcast, ahead, acc)
    for hq in range(num_q_heads):
        for d in range(head_dim):
            out[b, hq, d] = acc[hq, d] / l[hq]


@njit
def batch_at(offset, program, q, k_cache, v_cache, block_tables, seq_lens, scale, step_blocks, ahead, out):
    """Every request by ``program``, on this thread, ``offset`` bytes lower on the stack; the reserved address."""
    reserved = reserve_stack(offset)
    for b in range(q.shape[0]):
        program(b, q, k_cache, v_cache, block_tables, seq_lens, scale, None, step_blocks, ahead, out)
    return reserved


SLOW = 1.2
"""An offset counts as slow where a program took over this many times its median over offsets."""


def sweep(programs: dict, arrays: tuple, outs: dict, first: dict, targets, repeats: int, between) -> dict:
    """One pass: each program's median seconds at each offset of the reserved address mod 4096, interleaved."""
    times = {key: {} for key in programs}
    for target in targets:
        for key, program in programs.items():
            shift = (first[key] - target) % 4096 + 64
            runs = []
            for _ in range(repeats):
                between()
                start = time.perf_counter()
                reserved = batch_at(shift, program, *arrays, outs[key])
                runs.append(time.perf_counter() - start)
            times[key][reserved % 4096] = statistics.median(runs)
    return times


def slow_offsets(by_offset: dict) -> set:
    """The offsets where a pass took over :data:`SLOW` times its median."""
    median = statistics.median(by_offset.values())
    return {off for off, seconds in by_offset.items() if seconds > SLOW * median}


def slowest(passes: list, key: str, slow: set) -> str:
    """The slowest of the ``slow`` offsets over its pass's median, the least over passes; '-' if there are none."""
    if not slow:
        return "-"
    return f"{min(max(one[key][off] for off in slow) / statistics.median(one[key].values()) for one in passes):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="4k,lesson")
    parser.add_argument("--step", type=int, default=16, help="bytes between offsets (16: every one Linux picks)")
    parser.add_argument("--repeats", type=int, default=1, help="calls per program, offset and pass (median kept)")
    parser.add_argument("--passes", type=int, default=3,
                        help="sweeps over all offsets; an offset counts as slow only if slow in every one")
    args = parser.parse_args()
    if args.passes < 1 or args.repeats < 1 or not 16 <= args.step <= 4096:
        parser.error(f"--passes {args.passes} and --repeats {args.repeats} must be at least 1, "
                     f"--step {args.step} in 16..4096")
    programs = {"now": NK.decode_request, "before": decode_before}
    print(f"{os.cpu_count()} CPUs, one thread; load average before {os.getloadavg()}")
    for name in args.cases.split(","):
        lens = cases(8, seed=0)[name]
        batch = random_paged_batch(lens, block_size=16, num_kv_heads=8, group=4, head_dim=128, spare_blocks=0, seed=0)
        q, k_cache, v_cache, tables, seq_lens = batch.args()
        k_cache, v_cache = on_huge_pages([k_cache, v_cache])
        outs = {key: np.empty(q.shape, dtype=np.float32) for key in programs}
        arrays = (as_array(q), as_array(k_cache), as_array(v_cache), as_array(tables), as_array(seq_lens),
                  np.float32(q.shape[-1] ** -0.5), max(1, FD.STEP_TOKENS // 16), PREFETCH_TOKENS)
        first = {key: batch_at(0, program, *arrays, outs[key]) for key, program in programs.items()}
        assert np.allclose(outs["now"], outs["before"], rtol=1e-5, atol=1e-6), "the two programs disagree"
        between, targets = quiet_read(2 * k_cache.numel() * 4), range(0, 4096, args.step)
        passes = []                                               # per pass: program -> offset -> seconds
        for order in range(args.passes):                          # every other pass from the last offset down
            passes.append(sweep(programs, arrays, outs, first, targets[::-1] if order % 2 else targets,
                                args.repeats, between))
        print(f"\n### {name}: B={len(lens)}, {sum(lens):,} tokens, {len(passes[0]['now'])} offsets, "
              f"{args.passes} passes; load average now {os.getloadavg()[0]:.2f}")
        print(f"| program | median ms over offsets and passes | offsets over {SLOW}x the median in every pass | "
              "slowest / median there | those offsets |\n|---|---:|---:|---:|---|")
        for key in programs:
            slow = set.intersection(*(slow_offsets(one[key]) for one in passes))
            every_time = [seconds for one in passes for seconds in one[key].values()]
            print(f"| {key} | {statistics.median(every_time) * 1e3:.2f} | {len(slow)} | "
                  f"{slowest(passes, key, slow)} | "
                  f"{', '.join(map(str, sorted(slow)[:16]))}{' ...' if len(slow) > 16 else ''} |")
        ratios = [one["now"][off] / one["before"][off] for one in passes for off in one["now"] if off in one["before"]]
        print(f"\nnow / before, median of per-offset ratios: {statistics.median(ratios):.3f} "
              f"(10th-90th percentile {np.percentile(ratios, 10):.3f}-{np.percentile(ratios, 90):.3f})")
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
