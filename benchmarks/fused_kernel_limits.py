"""Is the fused CPU kernel bound by memory or by its arithmetic? Time per token with K/V in cache and out of it.

Usage: python benchmarks/fused_kernel_limits.py [--threads 1] [--repeats 15]

In one process, interleaved round by round (:func:`pagedkv_lib.kernels.timing.time_interleaved`):

* the contiguous twin and the paged kernel on a small batch (16 requests of 32 tokens, 1 MB of K/V: it stays
  in L2) and on lesson 03's batch (32 requests, lognormal lengths, 110 MB), in ns per token: equal figures
  mean the kernel's time does not depend on where its bytes come from, so memory is not what bounds it;
* a plain numba loop that only reads the lesson batch's bytes (split between ``--threads`` threads, as the kernels
  split requests), and ``copy_`` of as many, as the share of the copy bound (bytes at the copy's read + write
  bandwidth) that a pass which only reads reaches here.

Between timed calls, :func:`~pagedkv_lib.kernels.timing.quiet_read` (caches and cores alike for every call).
Every buffer is on huge pages (:func:`~pagedkv_lib.kernels.huge_pages.on_huge_pages`), as in the lesson.

32 query heads, 8 KV heads, head dim 128, block size 16, fp32. Needs numba.
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
import torch
from numba import njit

from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.kernels import contiguous_decode as CD, fused_decode as FD
from pagedkv_lib.kernels.huge_pages import on_huge_pages
from pagedkv_lib.kernels.launch import on_threads
from pagedkv_lib.kernels.timing import quiet_read, time_interleaved


@njit(fastmath=True, nogil=True)
def read_all(a):
    """Sum every value of ``a``: a pass that only reads, as fast as numba makes it."""
    total = np.float32(0.0)
    for i in range(a.size):
        total += a[i]
    return total


def kernels_on(lens: list) -> tuple:
    """``(contiguous twin, paged kernel)`` as zero-argument calls on one batch of ``lens`` tokens, on huge pages."""
    b = random_paged_batch(lens, block_size=16, num_kv_heads=8, group=4, head_dim=128, spare_blocks=0, seed=0)
    k, v = on_huge_pages([CD.packed_kv(b.keys), CD.packed_kv(b.values)])
    b.k_cache, b.v_cache = on_huge_pages([b.k_cache, b.v_cache])
    return (lambda: CD.contiguous_decode_numba(b.q, k, v, b.seq_lens)), (lambda: FD.paged_decode_numba(*b.args()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    assert CD.contiguous_kernel_unavailable() is None and FD.kernel_unavailable() is None, "needs numba"
    rng = np.random.default_rng(0)
    lesson = rng.lognormal(6.0, 0.7, size=32).astype(int).clip(16, 2048).tolist()
    small = [32] * 16
    (small_c, small_p), (big_c, big_p) = kernels_on(small), kernels_on(lesson)
    read = 2 * sum(lesson) * 8 * 128 * 4
    src, dst = on_huge_pages([torch.ones(read // 4), torch.zeros(read // 4)])
    parts = np.array_split(src.numpy(), args.threads)
    print(f"{args.threads} thread(s), {args.repeats} rounds; load average before {os.getloadavg()}")
    times = time_interleaved({"small contiguous": small_c, "small paged": small_p, "lesson contiguous": big_c,
                              "lesson paged": big_p, "read only": lambda: on_threads(read_all, parts, args.threads),
                              "copy": lambda: dst.copy_(src)}, args.repeats, between=quiet_read(read))
    med = {k: statistics.median(v) for k, v in times.items()}
    for key in ("small contiguous", "small paged", "lesson contiguous", "lesson paged"):
        tokens = sum(small if key.startswith("small") else lesson)
        print(f"{key}: {med[key] * 1e3:.2f} ms, {med[key] / tokens * 1e9:.0f} ns per token")
    bound = med["copy"] / 2                            # the batch's bytes at the copy's read + write bandwidth
    print(f"copy {2 * read / med['copy'] / 1e9:.1f} GB/s; read only {read / med['read only'] / 1e9:.1f} GB/s, "
          f"{bound / med['read only']:.0%} of the copy bound; "
          f"lesson contiguous {bound / med['lesson contiguous']:.0%}, paged {bound / med['lesson paged']:.0%}")
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
