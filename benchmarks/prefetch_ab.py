"""The fused CPU kernels with and without asking for rows ahead (prefetching): same bytes, same process.

Usage: python benchmarks/prefetch_ab.py [--threads 1] [--repeats 15] [--cases lesson,4k] [--distances 0,16]

For each case, one batch (blocks shuffled), its caches and packed K/V on huge pages as in the lesson
(:func:`pagedkv_lib.kernels.huge_pages.on_huge_pages`). The paged kernel and its contiguous twin each run with
every distance of ``--distances`` (tokens ahead, :data:`pagedkv_lib.kernels.prefetch.PREFETCH_TOKENS`; 0: no
prefetch), and a plain copy of as many bytes; all interleaved, round by round, in reverse order every other
round, with the lesson's quiet read before each (:func:`pagedkv_lib.kernels.timing.quiet_read`). Reported per
case: each method's median, the median of per-round ratios over the same kernel at the first distance with their
range less the two extremes, and the share of the copy bound (K and V bytes at the copy's bandwidth).

Cases as ``decode_bandwidth.py`` defines them: ``lesson`` (lesson 03's 32 requests), ``sharegpt`` and ``4k``
(8 requests of 4,096 tokens here); 32 query heads, 8 KV heads, head dim 128, block size 16, fp32. Needs numba.
"""
from __future__ import annotations

import argparse
import os
import statistics
from unittest import mock

import torch

from decode_bandwidth import cases                     # the lesson's batch as decode_bandwidth.py defines it
from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.kernels import contiguous_decode as CD, fused_decode as FD
from pagedkv_lib.kernels.huge_pages import on_huge_pages
from pagedkv_lib.kernels.timing import quiet_read, time_interleaved


def at_distance(call, distance: int):
    """``call`` with the kernels asking for rows ``distance`` tokens ahead."""
    from pagedkv_lib.kernels import prefetch             # imports numba

    def run():
        with mock.patch.object(prefetch, "PREFETCH_TOKENS", distance):
            return call()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--cases", default="lesson,4k")
    parser.add_argument("--distances", default="0,16", help="tokens ahead, comma-separated; ratios over the first")
    args = parser.parse_args()
    distances = [int(d) for d in args.distances.split(",")]
    torch.set_num_threads(args.threads)
    assert FD.kernel_unavailable() is None and CD.contiguous_kernel_unavailable() is None, "needs numba"
    print(f"{os.cpu_count()} CPUs, {args.threads} thread(s), {args.repeats} rounds; "
          f"load average before {os.getloadavg()}")
    for name in args.cases.split(","):
        b = random_paged_batch(cases(8, seed=0)[name], block_size=16, num_kv_heads=8, group=4, head_dim=128,
                               spare_blocks=0, seed=0)
        q, k_cache, v_cache, tables, seq_lens = b.args()
        k_cache, v_cache, keys, values = on_huge_pages([k_cache, v_cache, CD.packed_kv(b.keys), CD.packed_kv(b.values)])
        nbytes = 2 * keys.numel() * keys.element_size()
        src, dst = on_huge_pages([torch.ones(nbytes // 4), torch.zeros(nbytes // 4)])
        kernels = {"paged": lambda: FD.paged_decode_numba(q, k_cache, v_cache, tables, seq_lens),
                   "contiguous": lambda: CD.contiguous_decode_numba(q, keys, values, seq_lens)}
        methods = {f"{kernel} {d}": at_distance(call, d) for kernel, call in kernels.items() for d in distances}
        first = {kernel: methods[f"{kernel} {distances[0]}"]() for kernel in kernels}
        for key, call in methods.items():
            assert torch.equal(call(), first[key.split()[0]]), f"{key} changed the result"
        times = time_interleaved({**methods, "copy": lambda: dst.copy_(src)}, args.repeats, between=quiet_read(nbytes))
        med = {key: statistics.median(ts) for key, ts in times.items()}
        bound = med["copy"] / 2                                  # the copy moves the bytes twice: read and written
        print(f"\n### {name}: {nbytes / 1e6:.1f} MB of K and V; copy {2 * nbytes / med['copy'] / 1e9:.1f} GB/s; "
              f"load average now {os.getloadavg()[0]:.2f}")
        print(f"| kernel, tokens ahead | median ms | share of the copy bound | time / same kernel at {distances[0]}, "
              "median of rounds (range without the extremes) |\n|---|---:|---:|---:|")
        for key in methods:
            base = times[f"{key.split()[0]} {distances[0]}"]
            ratios = sorted(t / b for t, b in zip(times[key], base))
            middle = ratios[1:-1] if len(ratios) > 2 else ratios            # the fastest and slowest dropped
            print(f"| {key} | {med[key] * 1e3:.2f} | {bound / med[key]:.0%} | "
                  f"{statistics.median(ratios):.3f} ({middle[0]:.3f}-{middle[-1]:.3f}) |")
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
