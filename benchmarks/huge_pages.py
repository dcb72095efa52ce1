"""The fused CPU kernels and a copy on the OS's default pages and on 2 MiB pages: same bytes, same process.

Usage: python benchmarks/huge_pages.py [--threads 1] [--repeats 11] [--cases lesson,4k]

For each case, one batch (:func:`pagedkv_lib.attention.batch.random_paged_batch`, blocks shuffled), and of
it: the paged caches and the packed contiguous K/V as they are (torch's allocations: the OS's default pages
unless transparent huge pages are ``always``), and copies of them on 2 MiB pages
(:func:`pagedkv_lib.kernels.huge_pages.on_huge_pages`); a plain copy of as many bytes on each kind of page.
All six calls run interleaved, round by round, in reverse order every other round, with the lesson's quiet
read before each (:func:`pagedkv_lib.kernels.timing.quiet_read`). Reported per case: each method's median on
both kinds of page, the median of per-round ratios (huge over default) with their range less the two extremes,
and the share of each kind's own copy bound (K and V bytes at that copy's bandwidth) the kernels reach.

Cases, 32 query heads, 8 KV heads, head dim 128, block size 16, fp32, as ``decode_bandwidth.py`` defines them:
``lesson`` (lesson 03's 32 requests), ``sharegpt`` and ``4k`` (8 requests of 4,096 tokens here). Needs numba.
"""
from __future__ import annotations

import argparse
import os
import statistics

import torch

from decode_bandwidth import cases                     # the lesson's batch as decode_bandwidth.py defines it
from pagedkv_lib.attention.batch import PagedBatch, random_paged_batch
from pagedkv_lib.kernels import contiguous_decode as CD, fused_decode as FD
from pagedkv_lib.kernels.huge_pages import huge_page_share, on_huge_pages
from pagedkv_lib.kernels.timing import quiet_read, time_interleaved


def methods(b: PagedBatch, place) -> tuple[dict, int, torch.Tensor]:
    """``({method: zero-argument call}, K+V bytes, the paged K cache)`` for batch ``b``, its buffers put by
    ``place`` (from a list of tensors to a list of tensors holding the same values)."""
    q, k_cache, v_cache, tables, seq_lens = b.args()
    k_cache, v_cache = place([k_cache, v_cache])
    keys, values = place([CD.packed_kv(b.keys), CD.packed_kv(b.values)])
    nbytes = 2 * keys.numel() * keys.element_size()
    src, dst = place([torch.ones(nbytes // 4), torch.zeros(nbytes // 4)])
    return {"paged": lambda: FD.paged_decode_numba(q, k_cache, v_cache, tables, seq_lens),
            "contiguous": lambda: CD.contiguous_decode_numba(q, keys, values, seq_lens),
            "copy": lambda: dst.copy_(src)}, nbytes, k_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--cases", default="lesson,4k")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    assert FD.kernel_unavailable() is None and CD.contiguous_kernel_unavailable() is None, "needs numba"
    print(f"{os.cpu_count()} CPUs, {args.threads} thread(s), {args.repeats} rounds; "
          f"load average before {os.getloadavg()}")
    for name in args.cases.split(","):
        batch = random_paged_batch(cases(8, seed=0)[name], block_size=16, num_kv_heads=8, group=4, head_dim=128,
                                   spare_blocks=0, seed=0)
        default, nbytes, k_default = methods(batch, list)
        huge, _, k_huge = methods(batch, on_huge_pages)
        times = time_interleaved({**{f"{m} default": f for m, f in default.items()},
                                  **{f"{m} huge": f for m, f in huge.items()}},
                                 args.repeats, between=quiet_read(nbytes))
        med = {key: statistics.median(ts) for key, ts in times.items()}
        print(f"\n### {name}: {nbytes / 1e6:.1f} MB of K and V; share of the paged cache's mapping on huge pages: "
              f"default {huge_page_share(k_default):.0%}, huge {huge_page_share(k_huge):.0%}; "
              f"load average now {os.getloadavg()[0]:.2f}")
        print("| method | default pages, ms | huge pages, ms | huge / default, median of rounds "
              "(range without the extremes) |\n|---|---:|---:|---:|")
        for m in default:
            ratios = sorted(h / d for h, d in zip(times[f"{m} huge"], times[f"{m} default"]))
            middle = ratios[1:-1] if len(ratios) > 2 else ratios            # the fastest and slowest dropped
            print(f"| {m} | {med[f'{m} default'] * 1e3:.2f} | {med[f'{m} huge'] * 1e3:.2f} | "
                  f"{statistics.median(ratios):.3f} ({middle[0]:.3f}-{middle[-1]:.3f}) |")
        for kind in ("default", "huge"):
            bound = med[f"copy {kind}"] / 2                     # the copy moves the bytes twice: read and written
            print(f"{kind} pages: copy {2 * nbytes / med[f'copy {kind}'] / 1e9:.1f} GB/s; share of its bound: "
                  f"paged {bound / med[f'paged {kind}']:.0%}, contiguous {bound / med[f'contiguous {kind}']:.0%}")
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
