"""Paged decode attention against contiguous baselines, timed in the same run, fp32 on the CPU.

Usage: python benchmarks/attention.py [--threads 2] [--repeats 7]

Two cases, 32 query heads, 8 KV heads, head dim 128, block size 16, one decode token per request:

* ``sharegpt``: 32 requests whose context (tokens) is a ShareGPT-like prompt plus output length;
* ``4k``: a batch of requests of exactly 4096 tokens each.

Methods, all producing the same ``[B, 32, 128]`` output (checked against each other):

* ``sdpa``: per-request ``scaled_dot_product_attention`` on contiguous ``[1, H_kv, T, D]`` K/V;
* ``batched``: one matmul-softmax-matmul over a padded contiguous ``[B, H_kv, T_max, D]`` batch;
* ``paged_gather`` and ``paged_online``: :mod:`pagedkv_lib.attention` on a paged cache with
  shuffled physical blocks;
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
import torch.nn.functional as F

from pagedkv_lib import attention as A
from pagedkv_lib.sim import sharegpt_like

H_Q, H_KV, D, S = 32, 8, 128, 16


def build_case(lens: list[int], seed: int):
    """Logical K/V per request, its paged copy in shuffled blocks, and the two contiguous layouts."""
    gen = torch.Generator().manual_seed(seed)
    B, t_max = len(lens), max(lens)
    n_blocks = [math.ceil(t / S) for t in lens]
    k_cache = torch.empty(sum(n_blocks), S, H_KV, D)
    v_cache = torch.empty_like(k_cache)
    physical = torch.randperm(sum(n_blocks), generator=gen)
    tables = torch.full((B, max(n_blocks)), -1, dtype=torch.int64)
    k_pad = torch.zeros(B, H_KV, t_max, D)                     # batched baseline: head-major, padded
    v_pad = torch.zeros_like(k_pad)
    per_request, start = [], 0
    for b, (t, n) in enumerate(zip(lens, n_blocks)):
        tables[b, :n] = physical[start : start + n]
        start += n
        k, v = torch.randn(2, t, H_KV, D, generator=gen)
        pos = torch.arange(t)
        A.write_kv(k_cache, v_cache, k, v, tables[b, pos // S] * S + pos % S)
        k_pad[b, :, :t] = k.transpose(0, 1)
        v_pad[b, :, :t] = v.transpose(0, 1)
        per_request.append((k_pad[b : b + 1, :, :t].clone(), v_pad[b : b + 1, :, :t].clone()))
    q = torch.randn(B, H_Q, D, generator=gen)
    padding = torch.arange(t_max) >= torch.tensor(lens)[:, None]          # [B, T_max]
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, tables=tables, lens=torch.tensor(lens),
                k_pad=k_pad, v_pad=v_pad, padding=padding, per_request=per_request,
                k_copy=torch.empty_like(k_cache), v_copy=torch.empty_like(v_cache))


def sdpa(c):
    q = c["q"]
    return torch.cat([F.scaled_dot_product_attention(q[b].view(1, H_Q, 1, D), k, v, enable_gqa=True)
                      for b, (k, v) in enumerate(c["per_request"])]).view(q.shape)


def batched(c):
    q, B = c["q"], c["q"].shape[0]
    qg = q.view(B, H_KV, H_Q // H_KV, D) / math.sqrt(D)
    scores = torch.matmul(qg, c["k_pad"].transpose(-1, -2))                # [B, H_kv, G, T_max]
    scores.masked_fill_(c["padding"][:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), c["v_pad"]).view(q.shape)


def paged_gather(c):
    return A.paged_decode_gather(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"])


def paged_online(c, step_blocks=64):
    return A.paged_decode_online(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"],
                                 step_blocks=step_blocks)


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
    """Median seconds per method; methods run interleaved, round after round, so drift hits all alike."""
    for fn in methods.values():
        fn(case)                                                           # warm-up
    times = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn(case)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


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
    best_base = min(secs["sdpa"], secs["batched"])
    print(f"\n### {name}: B={len(lens)}, tokens mean {np.mean(lens):.0f} / max {max(lens)}, "
          f"K+V {kv_bytes / 2**20:.0f} MiB, outputs agree to {worst:.1e}")
    print("| method | median ms | x faster baseline | GB/s (K+V read) | fraction of copy bw |")
    print("|---|---:|---:|---:|---:|")
    for m, s in secs.items():
        gbs = kv_bytes / s
        print(f"| {m} | {s * 1e3:.2f} | {s / best_base:.2f} | {gbs / 1e9:.1f} | {gbs / copy_bw:.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per method (median reported)")
    parser.add_argument("--batch-4k", type=int, default=8, help="requests in the 4k case")
    parser.add_argument("--step-blocks", type=int, default=64, help="paged_online's blocks per step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} of {os.cpu_count()} CPUs, "
          f"load average before {os.getloadavg()[0]:.2f}, fp32, H_q={H_Q} H_kv={H_KV} D={D} S={S}")
    copy_bw = copy_bandwidth(args.batch_4k * 4096 * H_KV * D * 4, args.repeats)
    print(f"copy bandwidth (read + write): {copy_bw / 1e9:.1f} GB/s")
    online = lambda c: paged_online(c, args.step_blocks)              # noqa: E731
    methods = dict(sdpa=sdpa, batched=batched, paged_gather=paged_gather, paged_online=online)
    trace = sharegpt_like(32, seed=args.seed, max_context=4096)
    lens = (trace.prompt_len + trace.output_len[:, 0]).tolist()
    run_case("sharegpt", lens, methods, args.repeats, copy_bw, args.seed)
    run_case("4k", [4096] * args.batch_4k, dict(methods, naive_gather=naive_gather), args.repeats, copy_bw,
             args.seed)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
