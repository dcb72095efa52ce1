"""Race our BlockManager against nano-vllm's block manager on one prefix-heavy operation sequence.

nano-vllm's ``nanovllm/engine/block_manager.py`` (about 120 lines) is the readable anchor: our
manager should not be slower. This script loads that file from a nano-vllm checkout or git
directory named on the command line (it is never copied into this repository), gives it a small
``Sequence`` adapter of our own (the fields and methods its block manager reads), and runs both
managers, in one process, on the same operations:

* **allocate** a prompt: one of 8 shared system prompts (64-512 tokens, a few much more popular)
  plus its own tail (16-256 tokens), so most prompts hit the prefix cache;
* **append** one generated token per running request per step (nano-vllm: ``can_append``,
  ``may_append``, then ``hash_blocks`` once the token's K/V would be computed);
* **deallocate** a request when its output (1-256 tokens) is done.

Up to ``--max-running`` requests run at once; the pool is big enough that nothing runs out,
so both managers see exactly the same sequence. With prefix caching off, ours is built with
``enable_prefix_caching=False`` and nano-vllm (which has no switch) is never asked to
``hash_blocks``, so it caches nothing and every lookup misses at the first block.

Our contestants: ``ours``, the readable ``BlockManager`` with the exact prefix tree, and
``ours-hashed(NAME)``, the same manager with vLLM v1's hash-chained prefix cache
(:class:`~pagedkv_lib.blocks.hashed_prefix_cache.HashedBlockManager`) under each hash of
``--hashes`` (default: SHA-256, vLLM's choice for multi-tenant use, and BLAKE2b cut to 64 bits).
nano-vllm hashes with xxhash's 64-bit xxh64, and checks a hit's tokens.

``--baseline REV`` adds our manager as of git revision ``REV`` (for before/after figures).
Runs are interleaved (every repeat runs every contestant, in a rotating order) and timed in
process CPU seconds (on a shared machine wall time also counts the time others hold the core);
the medians are reported, with the ratio to nano-vllm of each repeat.

Usage::

    python benchmarks/block_manager_race.py --nano-vllm-repo ~/src/nano-vllm [--baseline main]

nano-vllm's block manager imports ``xxhash`` and ``numpy``: ``pip install xxhash`` if needed.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import types

from at_revision import library_at  # benchmarks/, this script's folder, is on sys.path
from pagedkv_lib.blocks.block_hash import HASH_FUNCTIONS, chain_hashes
from pagedkv_lib.blocks.hashed_prefix_cache import HashedBlockManager
from pagedkv_lib.blocks.manager import BlockManager

NANO_FILE = "nanovllm/engine/block_manager.py"
VOCAB = 32_000
ALLOCATE, APPEND, FREE = 0, 1, 2


class NanoSequence:
    """What nano-vllm's block manager reads of a sequence: its tokens, block table and cached-token counts."""

    def __init__(self, token_ids: list[int], block_size: int):
        self.token_ids = list(token_ids)
        self.num_tokens = len(self.token_ids)
        self.block_size = block_size
        self.block_table: list[int] = []
        self.num_cached_tokens = 0     # tokens whose K/V the cache holds (set by allocate, then by us)
        self.num_scheduled_tokens = 0  # tokens computed in the current step

    def __len__(self) -> int:
        return self.num_tokens

    @property
    def num_blocks(self) -> int:
        return -(-self.num_tokens // self.block_size)

    def block(self, i: int) -> list[int]:
        return self.token_ids[i * self.block_size:(i + 1) * self.block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        self.num_tokens += 1


def load_nano_vllm(path: str):
    """nano-vllm's block-manager module, from a checkout or a git directory, with our Sequence adapter."""
    file = os.path.join(path, NANO_FILE)
    if os.path.isfile(file):
        with open(file) as f:
            source, origin = f.read(), file
        commit = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    else:  # a git directory (bare, or a .git folder)
        source = subprocess.run(["git", "--git-dir", path, "show", f"HEAD:{NANO_FILE}"], capture_output=True,
                                text=True, check=True).stdout
        commit = subprocess.run(["git", "--git-dir", path, "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout
        origin = f"{path} HEAD:{NANO_FILE}"
    for name in ("nanovllm", "nanovllm.engine"):
        sys.modules.setdefault(name, types.ModuleType(name))
    adapter = types.ModuleType("nanovllm.engine.sequence")
    adapter.Sequence = NanoSequence
    sys.modules["nanovllm.engine.sequence"] = adapter
    module = types.ModuleType("nanovllm.engine.block_manager")
    module.__file__ = origin
    exec(compile(source, origin, "exec"), module.__dict__)  # its imports: xxhash, numpy, the adapter
    module.COMMIT = commit.strip()[:12] or "unknown"
    return module


def load_baseline(rev: str):
    """Our ``BlockManager`` as of git revision ``rev`` (its ``pagedkv_lib`` imported under another name)."""
    package = library_at(rev, f"pagedkv_at_{len(sys.modules)}")
    return importlib.import_module(f"{package.__name__}.blocks.manager").BlockManager


def make_ops(num_requests: int, max_running: int, seed: int) -> list[tuple]:
    """The operation sequence ``(kind, request id, prompt or [token] or None)``: same seed, same ops."""
    rng = random.Random(seed)
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randint(64, 512))] for _ in range(8)]
    weights = [1 / (k + 1) for k in range(len(systems))]
    pool = [rng.randrange(VOCAB) for _ in range(1 << 16)]
    ops, running, admitted = [], [], 0
    while admitted < num_requests or running:
        while len(running) < max_running and admitted < num_requests:
            tail = int(16 * 16 ** rng.random())          # 16..256 tokens, log-uniform
            start = rng.randrange(len(pool) - tail)
            rid = f"req{admitted}"
            ops.append((ALLOCATE, rid, rng.choices(systems, weights)[0] + pool[start:start + tail]))
            running.append([rid, max(1, int(256 ** rng.random()))])  # 1..256 output tokens
            admitted += 1
        still = []
        for entry in running:
            ops.append((APPEND, entry[0], [rng.randrange(VOCAB)]))
            entry[1] -= 1
            if entry[1]:
                still.append(entry)
            else:
                ops.append((FREE, entry[0], None))
        running = still
    return ops


def run_ours(manager_class, ops, num_blocks: int, block_size: int, caching: bool) -> tuple[float, int]:
    """Seconds for ``ops`` on our manager (or the baseline's), and the prompt tokens it served from cache."""
    bm = manager_class(num_blocks, block_size, enable_prefix_caching=caching)
    add, append, free = bm.add_request, bm.append_tokens, bm.free
    hits = 0
    t0 = time.process_time()
    for kind, rid, arg in ops:
        if kind == APPEND:
            append(rid, arg)
        elif kind == ALLOCATE:
            hits += add(rid, arg)
        else:
            free(rid)
    return time.process_time() - t0, hits


def run_nano(module, ops, num_blocks: int, block_size: int, caching: bool) -> tuple[float, int]:
    """The same for nano-vllm's manager, driven the way its scheduler and model runner call it."""
    bm, seqs, S = module.BlockManager(num_blocks, block_size), {}, block_size
    hits = 0
    t0 = time.process_time()
    for kind, rid, arg in ops:
        if kind == APPEND:
            seq = seqs[rid]
            seq.append_token(arg[0])
            if not bm.can_append(seq):
                raise RuntimeError("nano-vllm ran out of blocks: use a larger --num-blocks")
            bm.may_append(seq)
            seq.num_scheduled_tokens = 1        # the decode step computes the token's K/V ...
            if caching:
                bm.hash_blocks(seq)             # ... and a block it fills is cached
            seq.num_cached_tokens += 1
        elif kind == ALLOCATE:
            seq = seqs[rid] = NanoSequence(arg, S)
            cached = bm.can_allocate(seq)
            if cached < 0:
                raise RuntimeError("nano-vllm ran out of blocks: use a larger --num-blocks")
            bm.allocate(seq, cached)
            hits += cached * S
            seq.num_scheduled_tokens = seq.num_tokens - seq.num_cached_tokens  # prefill computes the rest
            if caching:
                bm.hash_blocks(seq)
            seq.num_cached_tokens = seq.num_tokens
        else:
            bm.deallocate(seqs.pop(rid))
    return time.process_time() - t0, hits


def hash_cost(block_size: int, seed: int) -> None:
    """Nanoseconds of process time per token to chain-hash 65,536 random token ids, best of 7, per hash."""
    rng = random.Random(seed)
    tokens = [rng.randrange(VOCAB) for _ in range(1 << 16)]
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, load average {os.getloadavg()[0]:.2f}; blocks of {block_size}")
    for name in HASH_FUNCTIONS:
        best = math.inf
        for _ in range(7):
            t0 = time.process_time()
            chain_hashes(tokens, block_size, hash_fn=name)
            best = min(best, time.process_time() - t0)
        print(f"{name}: {best / len(tokens) * 1e9:.1f} ns per token")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nano-vllm-repo", required=True, metavar="PATH",
                    help="a nano-vllm checkout, or its git directory")
    ap.add_argument("--baseline", metavar="REV", nargs="*", default=[],
                    help="also race our manager as of these git revisions")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--max-running", type=int, default=32)
    ap.add_argument("--num-blocks", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hash-cost", action="store_true",
                    help="only time chain_hashes per token for every block hash (65,536 tokens, best of 7)")
    ap.add_argument("--hashes", nargs="*", default=["sha256", "blake2b-64"], choices=sorted(HASH_FUNCTIONS),
                    help="race the hash-chained manager under these block hashes")
    args = ap.parse_args()
    if args.hash_cost:
        return hash_cost(args.block_size, args.seed)
    if importlib.util.find_spec("xxhash") is None:
        sys.exit("nano-vllm's block manager needs xxhash: pip install xxhash")
    nano = load_nano_vllm(args.nano_vllm_repo)
    contestants = {"nano-vllm": lambda *a: run_nano(nano, *a), "ours": lambda *a: run_ours(BlockManager, *a)}
    for name in args.hashes:
        hashed = functools.partial(HashedBlockManager, hash_fn=name)
        contestants[f"ours-hashed({name})"] = lambda *a, hashed=hashed: run_ours(hashed, *a)
    for rev in args.baseline:
        base = load_baseline(rev)
        contestants[f"ours@{rev}"] = lambda *a, base=base: run_ours(base, *a)
    ops = make_ops(args.requests, args.max_running, args.seed)
    counts = [sum(op[0] == k for op in ops) for k in (ALLOCATE, APPEND, FREE)]
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start; nano-vllm {nano.COMMIT}")
    print(f"# {len(ops):,} operations ({counts[0]:,} allocate, {counts[1]:,} append, {counts[2]:,} free), "
          f"{args.num_blocks} blocks of {args.block_size}, up to {args.max_running} running, "
          f"{args.repeat} interleaved repeats")
    names = list(contestants)
    seconds = {(n, c): [] for n in names for c in (True, False)}
    hits = {}
    for rep in range(args.repeat):
        for caching in (True, False):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                s, h = contestants[name](ops, args.num_blocks, args.block_size, caching)
                seconds[name, caching].append(s)
                hits[name, caching] = h
    prompt_tokens = sum(len(op[2]) for op in ops if op[0] == ALLOCATE)
    print("| prefix caching | manager | median s (range) | / nano-vllm: medians | per repeat (range) "
          "| prompt tokens from cache |")
    print("|---|---|---:|---:|---:|---:|")
    for caching in (True, False):
        nano_s = seconds["nano-vllm", caching]
        for name in names:
            runs = seconds[name, caching]
            ratios = [a / b for a, b in zip(runs, nano_s)]
            print(f"| {'on' if caching else 'off'} | {name} | {statistics.median(runs):.3f} "
                  f"({min(runs):.3f}-{max(runs):.3f}) | {statistics.median(runs) / statistics.median(nano_s):.2f} "
                  f"| {min(ratios):.2f}-{max(ratios):.2f} | {hits[name, caching] / prompt_tokens:.1%} |")
    print(f"# load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
