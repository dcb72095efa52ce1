"""Paged decode attention against contiguous baselines, timed in the same run, fp32 on the CPU.

Usage: python benchmarks/attention.py [--threads 2] [--repeats 7] [--batch-4k 32]

Two cases, 32 query heads, 8 KV heads, head dim 128, block size 16, one decode token per request:

* ``sharegpt``: 32 requests whose context (tokens) is a ShareGPT-like prompt plus output length;
* ``4k``: ``--batch-4k`` requests of exactly 4096 tokens each.

Methods, all producing the same ``[B, 32, 128]`` output (checked against each other):

* ``sdpa``: per-request ``scaled_dot_product_attention`` on contiguous ``[1, H_kv, T, D]`` K/V;
* ``batched``: one matmul-softmax-matmul over a padded contiguous ``[B, H_kv, T_max, D]`` batch;
* ``paged_gather`` and ``paged_online``: the CPU speed-ups of :mod:`pagedkv_lib.attention.fast`
  (tested equal to the spec in :mod:`pagedkv_lib.attention.spec`) on a paged cache with shuffled
  physical blocks (``pagedkv_lib.attention.batch.random_paged_batch``);
* ``fused`` and ``fused_in_order``: the numba kernel
  (:func:`pagedkv_lib.kernels.fused_decode.paged_decode_numba`, where it compiles) on the
  shuffled cache, and on a copy of it whose blocks lie in logical order, request after request:
  what paging itself costs a kernel that reads blocks in place;
* ``naive_gather`` (4k only): gathers like ``paged_gather`` but makes the permuted K/V contiguous
  before the matmul, the layout mistake the library avoids;
* ``copy_blocks`` (not attention): copies every block the batch uses once, into a reused buffer:
  the extra pass over K/V that paging costs when torch ops, not a fused kernel, do the gathering.

Effective bandwidth is the bytes of K and V the requests hold (no padding) divided by the time.
Copy bandwidth is measured by ``dst.copy_(src)`` on a buffer the size of the 4k case's K, and
counted STREAM-style: bytes read plus bytes written per second.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np
import torch

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention import fast as F_
from pagedkv_lib.kernels import timing as DT
from pagedkv_lib.kernels import fused_decode as NA
from pagedkv_lib.sim import sharegpt_like
from pagedkv_lib.attention.batch import random_paged_batch

H_Q, H_KV, D, S = 32, 8, 128, 16


def build_case(lens: list[int], seed: int):
    """The batch paged into shuffled blocks, the same blocks in logical order, and the contiguous layouts."""
    batch = random_paged_batch(lens, block_size=S, num_kv_heads=H_KV, group=H_Q // H_KV, head_dim=D,
                               spare_blocks=0, seed=seed)
    cont = DT.contiguous_layouts(batch)
    batch.keys = batch.values = None                                     # the logical copies, no longer needed
    k_order, v_order, t_order = DT.in_logical_order(batch)
    return dict(q=batch.q, k_cache=batch.k_cache, v_cache=batch.v_cache, tables=batch.block_tables,
                lens=batch.seq_lens, cont=cont, k_order=k_order, v_order=v_order, t_order=t_order,
                k_copy=torch.empty_like(batch.k_cache), v_copy=torch.empty_like(batch.v_cache))


def sdpa(c):
    return DT.sdpa_decode(c["q"], c["cont"].per_request)


def batched(c):
    return DT.batched_decode(c["q"], c["cont"])


def paged_gather(c):
    return F_.paged_decode_gather_fast(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"])


def paged_online(c, step_blocks=64):
    return F_.paged_decode_online_fast(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"],
                                       step_blocks=step_blocks)


def fused(c):
    return NA.paged_decode_numba(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"])


def fused_in_order(c):
    return NA.paged_decode_numba(c["q"], c["k_order"], c["v_order"], c["t_order"], c["lens"])


def naive_gather(c):
    """Gather, then permute K/V to head-major and make it contiguous before the matmul."""
    outs = []
    for b, t in enumerate(c["lens"].tolist()):
        k, v = A.gather_kv(c["k_cache"], c["v_cache"], c["tables"][b], t)
        k, v = k.permute(1, 0, 2).contiguous(), v.permute(1, 0, 2).contiguous()    # [H_kv, T, D]
        qg = c["q"][b].view(H_KV, H_Q // H_KV, D) / math.sqrt(D)
        outs.append(torch.matmul(torch.softmax(qg @ k.transpose(1, 2), -1), v).view(H_Q, D))
    return torch.stack(outs)


def copy_blocks(c):
    """Not attention: one index_select of every block the batch uses, the extra pass torch paging pays."""
    ids = c["tables"][c["tables"] >= 0]
    torch.index_select(c["k_cache"], 0, ids, out=c["k_copy"])
    torch.index_select(c["v_cache"], 0, ids, out=c["v_copy"])


def time_methods(methods: dict, case: dict, repeats: int) -> dict:
    """(median, min, max) seconds per method, run interleaved round after round so drift hits all alike."""
    times = DT.time_interleaved({name: (lambda fn=fn: fn(case)) for name, fn in methods.items()}, repeats)
    return {name: (statistics.median(ts), min(ts), max(ts)) for name, ts in times.items()}


def copy_bandwidth(num_bytes: int, repeats: int) -> float:
    """STREAM-style copy bandwidth in bytes/s: (read + written) / time, median of repeats."""
    src = torch.randn(num_bytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    ts = []
    for _ in range(max(repeats, 11)):
        t0 = time.perf_counter()
        dst.copy_(src)
        ts.append(time.perf_counter() - t0)
    return 2 * num_bytes / statistics.median(ts)


def run_case(name: str, lens: list[int], methods: dict, repeats: int, copy_bw: float, seed: int) -> None:
    case = build_case(lens, seed)
    outs = {m: fn(case) for m, fn in methods.items()}
    worst = max(float((o - outs["batched"]).abs().max()) for o in outs.values())
    methods = dict(methods, copy_blocks=copy_blocks)
    kv_bytes = 2 * sum(lens) * H_KV * D * 4
    secs = time_methods(methods, case, repeats)
    best_base = min(secs["sdpa"][0], secs["batched"][0])
    print(f"\n### {name}: B={len(lens)}, tokens mean {np.mean(lens):.0f} / max {max(lens)}, "
          f"K+V {kv_bytes / 2**20:.0f} MiB, outputs agree to {worst:.1e}")
    print("| method | median ms (range) | x faster baseline | GB/s (K+V read) | fraction of copy bw |")
    print("|---|---:|---:|---:|---:|")
    for m, (s, low, high) in secs.items():
        gbs = kv_bytes / s
        print(f"| {m} | {s * 1e3:.2f} ({low * 1e3:.1f}-{high * 1e3:.1f}) | {s / best_base:.2f} | "
              f"{gbs / 1e9:.1f} | {gbs / copy_bw:.0%} |")
    if "fused" in secs:
        print(f"\nfused / faster contiguous baseline: {secs['fused'][0] / best_base:.2f}; fused / paged_online: "
              f"{secs['fused'][0] / secs['paged_online'][0]:.2f}; shuffled / in-order blocks: "
              f"{secs['fused'][0] / secs['fused_in_order'][0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (the fused kernel's too)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per method (median reported)")
    parser.add_argument("--batch-4k", type=int, default=32, help="requests in the 4k case")
    parser.add_argument("--step-blocks", type=int, default=64, help="paged_online's blocks per step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    methods = dict(sdpa=sdpa, batched=batched, paged_gather=paged_gather,
                   paged_online=lambda c: paged_online(c, args.step_blocks))
    compile_s = NA.warm_up()
    if NA.kernel_unavailable() is None:
        # each fused variant runs right after a torch method, as attention follows torch ops in a model
        methods = dict(sdpa=sdpa, fused=fused, batched=batched, fused_in_order=fused_in_order,
                       paged_gather=paged_gather, paged_online=methods["paged_online"])
        print(f"fused kernel ready in {compile_s:.1f} s")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} of {os.cpu_count()} CPUs, "
          f"load average before {os.getloadavg()[0]:.2f}, fp32, H_q={H_Q} H_kv={H_KV} D={D} S={S}")
    copy_bw = copy_bandwidth(args.batch_4k * 4096 * H_KV * D * 4, args.repeats)
    print(f"copy bandwidth (read + write): {copy_bw / 1e9:.1f} GB/s")
    trace = sharegpt_like(32, seed=args.seed, max_context=4096)
    lens = (trace.prompt_len + trace.output_len[:, 0]).tolist()
    run_case("sharegpt", lens, methods, args.repeats, copy_bw, args.seed)
    run_case("4k", [4096] * args.batch_4k, dict(methods, naive_gather=naive_gather), args.repeats, copy_bw,
             args.seed)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
