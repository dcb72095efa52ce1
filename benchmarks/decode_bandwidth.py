"""Decode attention against the memory bound: the Code lesson's rows, same process, with repeats.

Usage: python benchmarks/decode_bandwidth.py [--threads 2] [--repeats 15] [--runs 3] [--cases lesson,sharegpt,4k]
       [--small-pages]

Each run calls :func:`pagedkv_lib.kernels.timing.measure_decode_speed`, the function the lesson's
live cell calls, on the same batch: every method in :data:`~pagedkv_lib.kernels.timing.ROWS`
(the fused kernel on a contiguous cache, on paged blocks in order and shuffled; torch contiguous
and paged; a copy of every block), all interleaved round by round with a plain copy of the batch's
K/V bytes that gives the copy bandwidth, and an untimed read before every timed call. Reported
per case and run: median ms, the bound (bytes at the copy bandwidth), the share of it reached,
and each row's time over the fused contiguous row as the median of per-round ratios, with its
90% interval (order statistics) and the range of single rounds. Every buffer is asked for on the OS's
huge pages (2 MiB on x86-64), as in the lesson; ``--small-pages`` leaves them on the default pages.

Cases, 32 query heads, 8 KV heads, head dim 128, block size 16, fp32:

* ``lesson``: the lesson's batch, 32 requests of lognormal(6.0, 0.7) tokens clipped to 16-2048;
* ``sharegpt``: 32 ShareGPT-like requests (prompt plus output length, at most 4,096 tokens);
* ``4k``: ``--batch-4k`` requests of 4,096 tokens.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np
import torch

from pagedkv_lib.kernels import timing as DT
from pagedkv_lib.lesson.speed_table import speed_rows
from pagedkv_lib.sim import sharegpt_like


def cases(batch_4k: int, seed: int) -> dict:
    """Token counts per request of each case, by name."""
    rng = np.random.default_rng(0)
    trace = sharegpt_like(32, seed=seed, max_context=4096)
    return {"lesson": rng.lognormal(6.0, 0.7, size=32).astype(int).clip(16, 2048).tolist(),
            "sharegpt": (trace.prompt_len + trace.output_len[:, 0]).tolist(),
            "4k": [4096] * batch_4k}


def report(name: str, run: int, speed: DT.DecodeSpeed) -> None:
    """Print one run: the batch and the load, then the lesson's table with each ratio's spread."""
    pages = "" if speed.huge_page_share is None else f"paged cache on huge pages: {speed.huge_page_share:.0%}; "
    print(f"\n### {name}, run {run}: B={len(speed.lens)}, {sum(speed.lens):,} tokens, "
          f"K+V {speed.read_bytes / 1e6:.1f} MB; copy bandwidth {speed.copy_bytes_per_s / 1e9:.1f} GB/s; "
          f"{pages}load average now {os.getloadavg()[0]:.2f}")
    print("\n".join(speed_rows(speed, spread=True)))
    if speed.kernel_missing is None:
        print(f"\nshuffled / in order: {speed.ratio('fused shuffled', 'fused in order'):.2f}; "
              f"in order / contiguous: {speed.ratio('fused in order', 'fused contiguous'):.2f}")
    else:
        print(f"\nfused rows missing: {speed.kernel_missing}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the fused kernels' too)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds per run (medians reported)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case, each a fresh measurement")
    parser.add_argument("--batch-4k", type=int, default=16, help="requests in the 4k case")
    parser.add_argument("--cases", default="lesson,sharegpt,4k")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small-pages", action="store_true",
                        help="leave every buffer on the OS's default pages (the lesson asks for huge pages)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; torch {torch.__version__}; "
          f"{args.threads} threads; load average before {os.getloadavg()}")
    all_cases = cases(args.batch_4k, args.seed)
    for name in args.cases.split(","):
        for run in range(1, args.runs + 1):
            report(name, run, DT.measure_decode_speed(all_cases[name], repeats=args.repeats, seed=args.seed,
                                                      huge_pages=not args.small_pages))
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
