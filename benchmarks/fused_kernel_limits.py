"""Is the fused CPU kernel bound by memory or by its arithmetic? Time per token with K/V in cache and out of it.

Usage: python benchmarks/fused_kernel_limits.py [--threads 1] [--repeats 15]

In one process, interleaved round by round (:func:`pagedkv_lib.kernels.timing.time_interleaved`):

* K/V in cache: the paged kernel's program (:func:`.numba_kernel.decode_request`) on one request of 256 tokens
  (2 MiB of K/V, read from L2 and L3 after the first call) called ``IN_CACHE_CALLS`` times in a compiled loop: its
  arithmetic per token, with no launch and hardly a wait on memory;
* the contiguous twin and the paged kernel on lesson 03's batch (32 requests, lognormal lengths, 110 MB), in ns
  per token;
* a plain numba loop that only reads the lesson batch's bytes (split between ``--threads`` threads, as the kernels
  split requests), and ``copy_`` of as many, as the share of the copy bound (bytes at the copy's read + write
  bandwidth) that a pass which only reads reaches here;
* a loop that reads the lesson batch's K and V rows in the paged kernel's order and only adds them up
  (:func:`read_in_kernel_order`): where it is near the plain read and the kernel far below both, the order in which
  the kernel reads is not what holds it back, but how little of its reading overlaps its arithmetic.

With K/V from memory the paged kernel takes somewhere between the longer of its arithmetic (in cache) and its
reading (in its order), where one hides the other entirely, and their sum, where neither hides any of the other;
the script prints how much of the shorter one is hidden (at two threads, taking the arithmetic as the one-thread
figure halved).

Between timed calls, :func:`~pagedkv_lib.kernels.timing.quiet_read` (caches and cores alike for every call).
Every buffer of the lesson's batch, and the copy's, is on huge pages
(:func:`~pagedkv_lib.kernels.huge_pages.on_huge_pages`), as in the lesson.

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
from pagedkv_lib.kernels.launch import as_array, on_threads
from pagedkv_lib.kernels.timing import quiet_read, time_interleaved


IN_CACHE_TOKENS, IN_CACHE_CALLS = 256, 200
BLOCK_SIZE, HEAD_DIM = 16, 128
STEP_BLOCKS = max(1, FD.STEP_TOKENS // BLOCK_SIZE)          # blocks per step, as the library's launch sets it


@njit(fastmath=True, nogil=True)
def read_all(a):
    """Sum every value of ``a``: a pass that only reads, as fast as numba makes it."""
    total = np.float32(0.0)
    for i in range(a.size):
        total += a[i]
    return total


@njit(fastmath=True, nogil=True)
def read_in_kernel_order(b, k_cache, v_cache, block_tables, seq_lens, step_blocks, sums):
    """``sums[b]``: the sum of request ``b``'s K and V values, read in the order :func:`.numba_kernel.decode_request`
    reads them (without its prefetching): step by step (``step_blocks`` blocks), first the step's K rows, then its V
    rows, four tokens at a time through each KV head's part of their rows, a block's last 1-3 tokens one at a time."""
    S, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    T, table = seq_lens[b], block_tables[b]
    num_blocks = (T + S - 1) // S
    total = np.zeros(head_dim, dtype=np.float32)
    for j0 in range(0, num_blocks, step_blocks):
        for cache in (k_cache, v_cache):
            for j in range(j0, min(j0 + step_blocks, num_blocks)):
                n, block = min(S, T - j * S), table[j]
                slot = 0
                while slot + 4 <= n:
                    for h in range(num_kv_heads):
                        for d in range(head_dim):
                            total[d] += (cache[block, slot, h, d] + cache[block, slot + 1, h, d]
                                         + cache[block, slot + 2, h, d] + cache[block, slot + 3, h, d])
                    slot += 4
                for s in range(slot, n):
                    for h in range(num_kv_heads):
                        for d in range(head_dim):
                            total[d] += cache[block, s, h, d]
    sums[b] = total.sum()


def batch_of(lens: list):
    """A paged batch of ``lens`` tokens in this script's shape (32 query heads, 8 KV heads, ``HEAD_DIM``, fp32),
    shuffled blocks, seed 0."""
    return random_paged_batch(lens, block_size=BLOCK_SIZE, num_kv_heads=8, group=4, head_dim=HEAD_DIM,
                              spare_blocks=0, seed=0)


def program_in_cache():
    """A zero-argument call: the paged program on one request of ``IN_CACHE_TOKENS`` tokens, ``IN_CACHE_CALLS``
    times in a compiled loop; only the first of them reads its K/V from memory, the others from the caches."""
    from pagedkv_lib.kernels.numba_kernel import decode_request
    from pagedkv_lib.kernels.prefetch import PREFETCH_TOKENS

    @njit(nogil=True)
    def calls(n, q, k_cache, v_cache, block_tables, seq_lens, scale, step_blocks, ahead, out):
        for _ in range(n):
            decode_request(0, q, k_cache, v_cache, block_tables, seq_lens, scale, None, step_blocks, ahead, out)

    b = batch_of([IN_CACHE_TOKENS])
    args = (as_array(b.q), as_array(b.k_cache), as_array(b.v_cache), as_array(b.block_tables.to(torch.int64)),
            as_array(b.seq_lens), np.float32(HEAD_DIM ** -0.5), STEP_BLOCKS, PREFETCH_TOKENS,
            np.empty(tuple(b.q.shape), dtype=np.float32))
    return lambda: calls(IN_CACHE_CALLS, *args)


def kernels_on(lens: list, threads: int) -> tuple:
    """``(contiguous twin, paged kernel, read in the paged kernel's order)`` as zero-argument calls on one batch of
    ``lens`` tokens, on huge pages; the read's requests go to ``threads`` threads, longest first, as the kernel's."""
    b = batch_of(lens)
    k, v = on_huge_pages([CD.packed_kv(b.keys), CD.packed_kv(b.values)])
    b.k_cache, b.v_cache = on_huge_pages([b.k_cache, b.v_cache])
    seq_lens = as_array(b.seq_lens)
    read_args = (as_array(b.k_cache), as_array(b.v_cache), as_array(b.block_tables.to(torch.int64)), seq_lens,
                 STEP_BLOCKS, np.empty(len(lens), dtype=np.float32))
    longest_first = np.argsort(-seq_lens, kind="stable").tolist()

    def read_in_order():
        on_threads(lambda i: read_in_kernel_order(i, *read_args), longest_first, threads)
    return (lambda: CD.contiguous_decode_numba(b.q, k, v, b.seq_lens)), (lambda: FD.paged_decode_numba(*b.args())), \
        read_in_order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    assert CD.contiguous_kernel_unavailable() is None and FD.kernel_unavailable() is None, "needs numba"
    rng = np.random.default_rng(0)
    lesson = rng.lognormal(6.0, 0.7, size=32).astype(int).clip(16, 2048).tolist()
    big_c, big_p, in_order = kernels_on(lesson, args.threads)
    read = 2 * sum(lesson) * 8 * HEAD_DIM * 4
    src, dst = on_huge_pages([torch.ones(read // 4), torch.zeros(read // 4)])
    parts = np.array_split(src.numpy(), args.threads)
    print(f"{args.threads} thread(s), {args.repeats} rounds; load average before {os.getloadavg()}")
    times = time_interleaved({"in cache": program_in_cache(), "lesson contiguous": big_c,
                              "lesson paged": big_p, "read only": lambda: on_threads(read_all, parts, args.threads),
                              "read in order": in_order,
                              "copy": lambda: dst.copy_(src)}, args.repeats, between=quiet_read(read))
    med = {k: statistics.median(v) for k, v in times.items()}
    per_token = {key: med[key] / sum(lesson) * 1e9 for key in ("lesson contiguous", "lesson paged", "read in order")}
    cached_ns = med["in cache"] / (IN_CACHE_CALLS * IN_CACHE_TOKENS) * 1e9
    for key, ns in per_token.items():
        print(f"{key}: {med[key] * 1e3:.2f} ms, {ns:.0f} ns per token")
    compute, reading, paged = cached_ns / args.threads, per_token["read in order"], per_token["lesson paged"]
    print(f"in cache ({IN_CACHE_TOKENS} tokens, one thread): {cached_ns:.0f} ns per token, {compute:.0f} on "
          f"{args.threads} thread(s); hidden from memory: {(compute + reading - paged) / min(compute, reading):.0%} "
          f"of the shorter of arithmetic ({compute:.0f}) and reading in order ({reading:.0f})")
    bound = med["copy"] / 2                            # the batch's bytes at the copy's read + write bandwidth
    print(f"copy {2 * read / med['copy'] / 1e9:.1f} GB/s; read only {read / med['read only'] / 1e9:.1f} GB/s, "
          f"{bound / med['read only']:.0%} of the copy bound; "
          f"read in the paged kernel's order {bound / med['read in order']:.0%}; "
          f"lesson contiguous {bound / med['lesson contiguous']:.0%}, paged {bound / med['lesson paged']:.0%}")
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
