"""Time the serving simulator on a 10,000-request ShareGPT-like trace under every policy.

Target: all policies together in 10 s or less on a 2-core CPU. Baseline, measured in the same
run: the least a token-by-token simulator would spend on the paged policies, a bare loop
calling ``BlockManager.append_tokens`` once per running sequence per step (timed here on 32
sequences, block openings included) times the (step, sequence) pairs of the run. The simulator
avoids that loop by visiting only steps where something happens.

With ``--paper`` it also prints the paper's sharing figures beside ours (block savings on an
Alpaca-like trace, Figure 15) and a block-size sweep (slack and sharing, S = 1..256).

With ``--against REV`` it times this simulator against the one at git revision ``REV`` in the
same process instead: that revision's ``pagedkv_lib`` is extracted (``git archive``) into a
temporary folder as the package ``pagedkv_before``, both run the trace under every policy,
interleaved, ``--repeat`` times, and it prints the median and range of CPU seconds
(``time.process_time``: on a shared machine wall time also counts other jobs) per policy, and
whether every summary agrees.

With ``--new-policies`` it also times the timed serving loop (:mod:`pagedkv_lib.sim.timed_serving`)
on the same requests arriving as a Poisson process (``--rate`` per second): whole-prompt prefill
against chunked prefill, and preemption by recompute (with and without prefix caching), by swap and by
the cheaper of the two; and the CPU tier replay (:mod:`pagedkv_lib.sim.cpu_tier`) on a seeded multi-turn conversation trace of about
as many requests, with and without the tier. Each row gives CPU seconds (``time.process_time``).

Usage: python benchmarks/simulate.py [--requests 10000] [--seed 0] [--paper] [--new-policies [--rate 20]]
       [--against REV [--repeat 5]]
"""
from __future__ import annotations

import argparse
import importlib
import io
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.sim import (PAPER_SHARING_SAVING, POLICIES, alpaca_like, beam_search, block_size_sweep, format_table,
                             kv_budget_blocks, multi_turn_conversations, parallel_sampling, poisson_arrivals,
                             replay_with_cpu_tier, serve_timed, sharegpt_like, simulate)


def token_by_token_cost_s(batch: int = 32, steps: int = 4000, block_size: int = 16) -> float:
    """Seconds per (step, sequence) pair of a bare loop: every sequence appends one token per step."""
    bm = BlockManager(batch * (steps // block_size + 2), block_size, enable_prefix_caching=False)
    names = [f"s{i}" for i in range(batch)]
    for name in names:
        bm.add_request(name, [0])
    start = time.perf_counter()
    for step in range(1, steps):
        for name in names:
            bm.append_tokens(name, (step,))
    return (time.perf_counter() - start) / (batch * (steps - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paper", action="store_true", help="also print the sharing figures and the sweep")
    parser.add_argument("--against", metavar="REV", help="time against the simulator at this git revision")
    parser.add_argument("--repeat", type=int, default=5, help="runs per policy and version with --against")
    parser.add_argument("--new-policies", action="store_true",
                        help="also time chunked prefill, swap/recompute preemption and the CPU tier")
    parser.add_argument("--rate", type=float, default=20.0, help="arrivals per second for --new-policies")
    args = parser.parse_args()
    if args.against:
        return compare_with_revision(args.against, args.requests, args.seed, args.repeat)

    trace = sharegpt_like(args.requests, seed=args.seed)
    tokens = int(trace.output_len.sum())
    per_pair = token_by_token_cost_s()
    rows, total = [], 0.0
    for policy in POLICIES:
        start = time.perf_counter()
        res = simulate(trace, policy, progress=False)
        seconds = time.perf_counter() - start
        total += seconds
        pairs = int(res.series["running_seqs"].sum())
        floor = per_pair * pairs if policy.startswith("paged") else None
        rows.append({"policy": policy, "seconds": seconds, "steps": res.num_steps,
                     "token_by_token_floor_s": floor, "preemptions": res.summary["preemptions"],
                     "share_token_states": res.summary["share_token_states"],
                     "mean_batch": res.summary["mean_batch"], "peak_batch": res.summary["peak_batch"]})
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
          f"{args.requests} ShareGPT-like requests, {tokens:,} generated tokens, OPT-13B on 40 GiB")
    print(f"baseline: a bare token-by-token loop costs {per_pair * 1e6:.2f} us per (step, sequence) pair")
    print(format_table(rows))
    print(f"total: {total:.2f} s for {len(POLICIES)} policies (target: 10 s)")
    if args.paper:
        sharing_figures(args.seed)
    if args.new_policies:
        new_policies(args.requests, args.seed, args.rate)


def new_policies(requests: int, seed: int, rate: float) -> None:
    """CPU seconds and headline figures of the timed serving loop and of the CPU tier replay."""
    trace = poisson_arrivals(sharegpt_like(requests, seed=seed), rate, seed=seed)
    blocks = kv_budget_blocks()
    settings = [("whole prompts, recompute", dict(chunked_prefill=False)),
                ("chunked 2048, recompute", dict(chunked_prefill=True)),
                ("chunked 2048, recompute, prefix caching", dict(chunked_prefill=True, prefix_caching=True)),
                ("chunked 2048, swap", dict(chunked_prefill=True, preemption="swap", cpu_blocks=4 * blocks)),
                ("chunked 2048, cheaper", dict(chunked_prefill=True, preemption="cheaper", cpu_blocks=4 * blocks))]
    rows, total = [], 0.0
    for name, kwargs in settings:
        start = time.process_time()
        res = serve_timed(trace, num_blocks=blocks, token_budget=2048, **kwargs).summary()
        seconds = time.process_time() - start
        total += seconds
        rows.append({"timed serving": name, "cpu_s": seconds, "makespan_s": res["makespan_s"],
                     "p99_itl_s": res["p99_itl_s"], "max_itl_s": res["max_itl_s"], "mean_ttft_s": res["mean_ttft_s"],
                     "stalled_decodes": res["stalled_decodes"], "swaps": res["preempted_swap"],
                     "recomputes": res["preempted_recompute"], "recomputed_tokens": res["recomputed_tokens"],
                     "reused_tokens": res["reused_tokens"]})
    print(f"\ntimed serving: {requests} ShareGPT-like requests at {rate:g}/s, OPT-13B on 40 GiB ({blocks} blocks "
          f"of 16), simulated H100 step times, PCIe 4.0 x16 link")
    print(format_table(rows))
    print(f"total: {total:.2f} CPU s for {len(settings)} timed runs")
    conversations = multi_turn_conversations(max(1, requests // 5), seed=seed, max_context=4096)
    rows = []
    for cpu_blocks in (0, 40 * blocks):
        start = time.process_time()
        tier = replay_with_cpu_tier(conversations, gpu_blocks=blocks, cpu_blocks=cpu_blocks)
        rows.append({"cpu tier blocks": cpu_blocks, "cpu_s": time.process_time() - start,
                     "gpu_hit_rate": tier.gpu_hit_rate, "cpu_hit_rate": tier.cpu_hit_rate, "hit_rate": tier.hit_rate})
    print(f"\nCPU tier under the prefix cache: {len(conversations)} requests of {requests // 5} seeded "
          f"conversations, GPU cache of {blocks} blocks of 16")
    print(format_table(rows))


def sharing_figures(seed: int) -> None:
    """Blocks saved by sharing on Alpaca-like traces (paper: Figure 15), and the block-size sweep."""
    base = alpaca_like(1000, seed=seed)
    rows = []
    for kind, make in (("parallel sampling", lambda m: parallel_sampling(base, m)),
                       ("parallel sampling", lambda m: parallel_sampling(base, m, independent_lengths=True,
                                                                         seed=seed)),
                       ("beam search", lambda m: beam_search(base, m))):
        low, high = PAPER_SHARING_SAVING[kind]
        for m in (2, 4, 6):
            trace = make(m)
            res = simulate(trace, "paged+sharing", seed=seed, progress=False).summary
            rows.append({"sharing": trace.name, "saving": res["sharing_saving"],
                         "paper_range": f"{100 * low:.1f}-{100 * high:.1f}%", "mean_batch": res["mean_batch"],
                         "preemptions": res["preemptions"], "cow_copies": res["cow_copies"]})
    print("\nblocks saved by sharing, Alpaca-like, OPT-13B on 40 GiB, S = 16")
    print(format_table(rows))
    sweep = block_size_sweep(parallel_sampling(alpaca_like(300, seed=seed), 4), progress=False)
    print("\nblock-size sweep, Alpaca-like with 4 parallel samples, OPT-13B on 40 GiB")
    print(format_table(sweep, ["block_size", "num_blocks", "share_slack", "sharing_saving", "mean_batch",
                               "preemptions", "mean_table_blocks"]))


def load_revision(rev: str, folder: str):
    """Import ``pagedkv_lib`` as it was at git revision ``rev``, as the package ``pagedkv_before``;
    return its ``simulate`` function and its ``sharegpt_like``, wherever that revision kept them."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", rev, "pagedkv_lib"], cwd=root, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    Path(folder, "pagedkv_lib").rename(Path(folder, "pagedkv_before"))
    sys.path.insert(0, folder)
    try:
        sim = importlib.import_module("pagedkv_before.sim")
        return sim.simulate, sim.sharegpt_like
    except ModuleNotFoundError:  # before the simulator became a package
        old = importlib.import_module("pagedkv_before.simulate")
        return old.simulate, importlib.import_module("pagedkv_before.workloads").sharegpt_like


def compare_with_revision(rev: str, requests: int, seed: int, repeat: int) -> None:
    """Median and range of CPU seconds per policy, before (``rev``) and now, runs interleaved in this process."""
    with tempfile.TemporaryDirectory() as folder:
        old_simulate, old_sharegpt = load_revision(rev, folder)
        versions = {"before": (old_simulate, old_sharegpt(requests, seed=seed)),
                    "now": (simulate, sharegpt_like(requests, seed=seed))}
        rows = []
        for policy in POLICIES:
            seconds = {name: [] for name in versions}
            summaries = {}
            for _ in range(repeat):
                for name, (run, trace) in versions.items():
                    start = time.process_time()
                    summaries[name] = run(trace, policy, progress=False).summary
                    seconds[name].append(time.process_time() - start)
            before, now = statistics.median(seconds["before"]), statistics.median(seconds["now"])
            rows.append({"policy": policy, "before_cpu_s": before,
                         "before_range": f"{min(seconds['before']):.2f}-{max(seconds['before']):.2f}",
                         "now_cpu_s": now, "now_range": f"{min(seconds['now']):.2f}-{max(seconds['now']):.2f}",
                         "now_over_before": now / before, "same_summary": summaries["before"] == summaries["now"]})
    print(f"{requests} ShareGPT-like requests, OPT-13B on 40 GiB; {repeat} interleaved runs per policy and version; "
          f"before = {rev}")
    print(format_table(rows))


if __name__ == "__main__":
    main()
