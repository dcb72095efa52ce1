"""Benchmark the paged block manager on a serving-like trace, at several pool sizes.

The trace: ``--requests`` requests, each a shared system prompt (one of a few, 64-512 tokens)
plus a random tail (16-256 tokens), then 1-256 decode steps of one token each. A small
continuous-batching driver keeps up to ``--max-running`` requests live: each step appends one
token to every running request, frees the finished ones, and admits waiting requests while
blocks last (a request whose append runs out of blocks is freed and sent back to the queue,
i.e. preempted and recomputed later).

Measurements, all in one process on one core:

* **pool only**: add a 256-token prompt and free it again, over and over, so that nearly all the
  time goes to block allocation and freeing (with prefix caching off, then on: hashing 16 blocks
  per prompt is part of the cost). Baseline: a ``list.pop()`` + ``list.append()`` pair, the floor
  of any pure-Python free list.
* **trace**, per pool size: wall time of the driver with the real :class:`BlockManager`, minus
  the same driver run with a manager that does nothing (the same-run baseline: trace
  generation, the Python loop, call overhead). What remains is time spent inside the allocator.
  Block operations = blocks taken out of the free queue + blocks returned to it.
* **by method**: one more trace at the first pool size, with each call timed, split into
  ``add_request``, ``append_tokens`` and ``free`` (the timing wrapper's cost, measured around the
  null manager, is subtracted).

Each measurement is repeated (``--repeat``, default 3) and the fastest run kept, because the
machine is shared. Usage: ``python benchmarks/allocator.py`` (about 30 s per pool size on a 2-core
machine), or ``--requests 2000 --repeat 1`` for a quick look.

**A/B against an older revision**: ``--baseline REV`` extracts ``pagedkv_lib`` at git revision
``REV`` into a temporary folder, imports it under another package name, and runs every
measurement above for both managers in the same process, alternating old and new in each
repeat, timed in process CPU seconds; it prints the median and range of each figure and the
ratio new/old. With
``--simulate N`` it also times the paged policies of the simulator on an ``N``-request
ShareGPT-like trace, running the baseline's simulator with either block manager plugged in,
so that only the manager differs.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import random
import statistics
import time

from at_revision import library_at  # benchmarks/, this script's folder, is on sys.path
from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.errors import OutOfBlocksError

VOCAB = 32_000


def make_trace(num_requests: int, seed: int):
    """Yield ``(request_id, prompt_token_ids, output_len)``; the same seed gives the same trace."""
    rng = random.Random(seed)
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randint(64, 512))] for _ in range(8)]
    weights = [1 / (k + 1) for k in range(len(systems))]  # a few prompts are much more popular
    pool = [rng.randrange(VOCAB) for _ in range(1 << 16)]
    for i in range(num_requests):
        system = rng.choices(systems, weights)[0]
        tail_len = int(16 * 16 ** rng.random())              # 16..256, log-uniform
        start = rng.randrange(len(pool) - tail_len)
        out_len = max(1, int(256 ** rng.random()))          # 1..256, log-uniform (right-skewed)
        yield f"req{i}", system + pool[start:start + tail_len], out_len


class NullManager:
    """The driver's cost without an allocator: same calls, no work."""

    def add_request(self, request_id, prompt_token_ids, *, salt=None):
        return 0

    def append_tokens(self, request_id, token_ids):
        return []

    def free(self, request_id):
        pass


class Timed:
    """Wraps a manager and adds up the seconds spent in each of its three methods, and the calls."""

    def __init__(self, inner, clock=time.perf_counter):
        self.inner, self.clock = inner, clock
        self.seconds = {"add_request": 0.0, "append_tokens": 0.0, "free": 0.0}
        self.calls = dict.fromkeys(self.seconds, 0)

    def _timed(self, name, *args):
        t0 = self.clock()
        try:
            return getattr(self.inner, name)(*args)
        finally:
            self.seconds[name] += self.clock() - t0
            self.calls[name] += 1

    def add_request(self, request_id, prompt_token_ids, *, salt=None):
        return self._timed("add_request", request_id, prompt_token_ids)

    def append_tokens(self, request_id, token_ids):
        return self._timed("append_tokens", request_id, token_ids)

    def free(self, request_id):
        return self._timed("free", request_id)


def drive(manager, num_requests: int, seed: int, max_running: int, clock=time.perf_counter) -> dict:
    """Run the trace through ``manager``; return the seconds (by ``clock``) and the driver's counts."""
    decode_tokens = [[t] for t in random.Random(seed + 1).choices(range(VOCAB), k=4096)]
    trace = make_trace(num_requests, seed)
    waiting = []            # preempted requests, retried first
    running = []            # [request_id, prompt, tokens still to generate, output length]
    calls = appends = preemptions = step = 0
    pending = next(trace, None)
    t0 = clock()
    while running or waiting or pending is not None:
        while len(running) < max_running and (waiting or pending is not None):
            rid, prompt, out_len = waiting[-1] if waiting else pending
            calls += 1
            try:
                manager.add_request(rid, prompt)
            except OutOfBlocksError:
                if not running:
                    raise  # an empty pool cannot hold this prompt: the trace cannot finish
                break
            running.append([rid, prompt, out_len, out_len])
            if waiting:
                waiting.pop()
            else:
                pending = next(trace, None)
        still = []
        for entry in running:
            step += 1
            calls += 1
            try:
                manager.append_tokens(entry[0], decode_tokens[step & 4095])
            except OutOfBlocksError:
                manager.free(entry[0])
                calls += 1
                waiting.append((entry[0], entry[1], entry[3]))
                preemptions += 1
                continue
            appends += 1
            entry[2] -= 1
            if entry[2]:
                still.append(entry)
            else:
                manager.free(entry[0])
                calls += 1
        running = still
    return {"seconds": clock() - t0, "calls": calls, "appends": appends, "preemptions": preemptions}


def pool_only(num_blocks: int, caching: bool, rounds: int, seed: int, collect: bool,
              manager_class=BlockManager, clock=time.perf_counter) -> tuple[float, int]:
    """Seconds and block operations for ``rounds`` add/free pairs of 256-token prompts.

    The 256 prompts cycle through a pool of ``num_blocks`` = 1024 blocks, so a prompt's cached
    blocks are evicted (64 prompts later) before it comes back: every block is a new allocation.
    ``collect=False`` turns Python's cyclic garbage collector off for the loop.
    """
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(256)] for _ in range(256)]
    bm = manager_class(num_blocks, 16, enable_prefix_caching=caching)
    if not collect:
        gc.disable()
    t0 = clock()
    for r in range(rounds):
        rid = str(r)
        bm.add_request(rid, prompts[r & 255])
        bm.free(rid)
    seconds = clock() - t0
    gc.enable()
    s = bm.stats()
    return seconds, s.blocks_allocated + s.blocks_freed


def list_floor(ops: int) -> float:
    """Seconds for ``ops`` list pops and appends: the floor of any pure-Python free list."""
    free = list(range(1024))
    pop, push = free.pop, free.append
    t0 = time.perf_counter()
    for _ in range(ops // 2):
        push(pop())
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pools", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--max-running", type=int, default=256)
    ap.add_argument("--pool-rounds", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest is kept")
    ap.add_argument("--no-prefix-caching", action="store_true", help="run the trace with prefix caching off")
    ap.add_argument("--baseline", metavar="REV", help="A/B: also measure pagedkv_lib at this git revision")
    ap.add_argument("--simulate", type=int, default=0, metavar="N",
                    help="with --baseline: also time the simulator's paged policies on N requests")
    args = ap.parse_args()
    if args.baseline:
        compare(args)
        return

    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    floor_ops = 2_000_000
    floor = list_floor(floor_ops)
    print(f"floor: list pop+append {floor / floor_ops * 1e6:.3f} us/op "
          f"({floor_ops / floor / 1e6:.1f} M ops/s)")

    print("\npool only (add a 256-token prompt = 16 blocks of 16, free it):")
    for caching in (False, True):
        for collect in (True, False):
            seconds, ops = pool_only(1024, caching, args.pool_rounds, args.seed, collect)
            print(f"  prefix caching {'on ' if caching else 'off'}, gc {'on ' if collect else 'off'}: "
                  f"{ops / seconds / 1e6:.2f} M block ops/s, {seconds / ops * 1e6:.3f} us/op")

    def best(make):
        """The fastest of ``--repeat`` runs of the trace, as (manager, run)."""
        kept = None
        for _ in range(args.repeat):
            manager = make()
            run = drive(manager, args.requests, args.seed, args.max_running)
            if kept is None or run["seconds"] < kept[1]["seconds"]:
                kept = (manager, run)
        return kept

    _, null = best(NullManager)
    print(f"\ntrace: {args.requests} requests, block size 16, up to {args.max_running} running, prefix "
          f"caching {'off' if args.no_prefix_caching else 'on'}; "
          f"driver alone (null manager) {null['seconds']:.2f} s for {null['calls']:,} calls "
          f"({null['appends']:,} appends)")
    print("| pool (blocks) | wall s | allocator s | block ops | M block ops/s | us/block op "
          "| us/allocator call | prefix hit rate | evictions | preemptions |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for num_blocks in args.pools:
        bm, run = best(lambda: BlockManager(num_blocks, 16, enable_prefix_caching=not args.no_prefix_caching))
        s = bm.stats()
        inside = run["seconds"] - null["seconds"]
        ops = s.blocks_allocated + s.blocks_freed
        print(f"| {num_blocks:,} | {run['seconds']:.2f} | {inside:.2f} | {ops:,} | {ops / inside / 1e6:.2f} "
              f"| {inside / ops * 1e6:.3f} | {inside / run['calls'] * 1e6:.3f} | {s.prefix_hit_rate:.1%} "
              f"| {s.evictions:,} | {run['preemptions']:,} |")
    # Where the time goes, at the first pool size: per-method time of the real manager minus the
    # same wrapper around the null manager (the wrapper's own cost cancels).
    real, timed_null = Timed(BlockManager(args.pools[0], 16, enable_prefix_caching=not args.no_prefix_caching)), \
        Timed(NullManager())
    drive(timed_null, args.requests, args.seed, args.max_running)
    drive(real, args.requests, args.seed, args.max_running)
    print(f"\nallocator time by method at {args.pools[0]:,} blocks (one run; wrapper cost subtracted):")
    for name, seconds in real.seconds.items():
        inside = seconds - timed_null.seconds[name] * real.calls[name] / max(timed_null.calls[name], 1)
        print(f"  {name:13s} {real.calls[name]:>9,} calls  {inside:6.2f} s  {inside / real.calls[name] * 1e6:6.2f} us/call")
    print(f"# load average {os.getloadavg()[0]:.2f} at end")


# ----------------------------------------------------------------- A/B against an older revision

# The A/B times with this process's CPU time: on a shared machine, wall time also counts the
# time other processes hold the core.
CPU = time.process_time


def load_baseline(rev: str):
    """``pagedkv_lib`` as of git revision ``rev``, imported as package ``pagedkv_baseline``."""
    base = library_at(rev, "pagedkv_baseline")
    for name in ("blocks.manager", "sim.paged_memory", "sim.simulate", "sim.workloads"):
        importlib.import_module(f"pagedkv_baseline.{name}")
    # Old and new raise and catch one OutOfBlocksError class, so one driver serves both.
    base.blocks.manager.OutOfBlocksError = base.sim.paged_memory.OutOfBlocksError = OutOfBlocksError
    return base


def trace_seconds(manager_class, args, caching: bool, num_blocks: int, null_s: float) -> float:
    """Allocator seconds of one trace run: the driver's wall time minus the null manager's."""
    run = drive(manager_class(num_blocks, 16, enable_prefix_caching=caching), args.requests, args.seed,
                args.max_running, CPU)
    return run["seconds"] - null_s


def method_us(manager_class, args, caching: bool, null: Timed) -> dict[str, float]:
    """Microseconds per call of each method on one trace run (the timing wrapper's cost subtracted)."""
    real = Timed(manager_class(args.pools[0], 16, enable_prefix_caching=caching), CPU)
    drive(real, args.requests, args.seed, args.max_running, CPU)
    return {name: (seconds - null.seconds[name] * real.calls[name] / max(null.calls[name], 1))
            / real.calls[name] * 1e6 for name, seconds in real.seconds.items()}


def simulate_seconds(base, manager_class, trace, policy: str) -> float:
    """Seconds for the baseline's simulator to run ``policy`` with ``manager_class`` as its block manager."""
    base.sim.paged_memory.BlockManager = manager_class
    t0 = CPU()
    base.sim.simulate.simulate(trace, policy, progress=False)
    return CPU() - t0


def compare(args) -> None:
    """Every measurement for the baseline and the current manager, alternating; medians and ranges."""
    base = load_baseline(args.baseline)
    managers = {"old": base.blocks.manager.BlockManager, "new": BlockManager}
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start; old = {args.baseline}, new = working tree; "
          f"{args.repeat} alternating repeats, {args.requests} trace requests")
    null_s = min(drive(NullManager(), args.requests, args.seed, args.max_running, CPU)["seconds"]
                 for _ in range(args.repeat))
    timed_null = Timed(NullManager(), CPU)
    drive(timed_null, args.requests, args.seed, args.max_running, CPU)
    trace = base.sim.workloads.sharegpt_like(args.simulate, seed=args.seed) if args.simulate else None
    figures: dict[str, dict[str, list[float]]] = {}

    def record(what: str, label: str, value: float) -> None:
        figures.setdefault(what, {"old": [], "new": []})[label].append(value)

    for rep in range(args.repeat):
        for label in (("old", "new") if rep % 2 == 0 else ("new", "old")):
            cls = managers[label]
            for caching in (False, True):
                on = "on" if caching else "off"
                seconds, ops = pool_only(1024, caching, args.pool_rounds, args.seed, True, cls, CPU)
                record(f"pool only, caching {on}: us per block op", label, seconds / ops * 1e6)
                for num_blocks in args.pools:
                    record(f"trace, caching {on}, {num_blocks:,} blocks: allocator s", label,
                           trace_seconds(cls, args, caching, num_blocks, null_s))
                for name, us in method_us(cls, args, caching, timed_null).items():
                    record(f"trace, caching {on}, {args.pools[0]:,} blocks: {name} us/call", label, us)
            for policy in (("paged", "paged+sharing") if trace is not None else ()):
                record(f"simulate {args.simulate} requests, {policy}: s", label,
                       simulate_seconds(base, cls, trace, policy))
    # Other processes only ever add time, so the fastest runs' ratio is shown beside the medians'.
    print("| measurement | old: median (range) | new: median (range) | new / old: medians | fastest |")
    print("|---|---:|---:|---:|---:|")
    for what, runs in figures.items():
        old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
        print(f"| {what} | {old:.3f} ({min(runs['old']):.3f}-{max(runs['old']):.3f}) "
              f"| {new:.3f} ({min(runs['new']):.3f}-{max(runs['new']):.3f}) | {new / old:.2f} "
              f"| {min(runs['new']) / min(runs['old']):.2f} |")
    print(f"# load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
