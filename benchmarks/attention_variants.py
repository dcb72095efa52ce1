"""Same-process A/B of the torch paged decode versions: the spec against each CPU speed-up.

Usage: python benchmarks/attention_variants.py [--threads 2] [--repeats 9] [--batch-4k 8]

Decides which tricks :mod:`pagedkv_lib.attention.fast` keeps: a trick stays only while it is
faster than the spec it replaces, measured here with all methods interleaved round by round (so
drift on a shared machine hits them alike). fp32, 32 query heads, 8 KV heads, head dim 128,
block size 16, shuffled physical blocks (:func:`pagedkv_lib.attention.batch.random_paged_batch`), one
decode token per request; cases ``sharegpt`` (32 ShareGPT-like lengths) and ``4k``.

Methods (all checked equal to ``batched`` before timing):

* ``batched``: contiguous baseline, one matmul-softmax-matmul over a padded ``[B, H_kv, T_max, D]``;
* ``spec_gather`` / ``spec_online``: :func:`~pagedkv_lib.attention.spec.paged_decode_gather` and
  :func:`~pagedkv_lib.attention.spec.paged_decode_online`, the readable versions;
* ``fast_gather`` / ``fast_online``: the ``attention.fast`` versions (reused buffers, strided views);
* ``fast_gather_fresh``: ``fast_gather`` with a fresh copy per request (without the buffer trick);
* ``fast_gather_einsum``: ``fast_gather`` with the spec's ``einsum`` (without the stride trick);
* ``online_copy_v``: ``fast_online`` with V copied a step at a time and multiplied, where the
  library reads V in place with ``embedding_bag`` (kept here to rerun that A/B).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention import fast as F
from pagedkv_lib.kernels import timing as DT
from pagedkv_lib.accounting import blocks_needed
from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.sim import sharegpt_like

H_Q, H_KV, D, S = 32, 8, 128, 16


def build_case(lens: list[int], seed: int) -> dict:
    """The paged batch and its padded, head-major contiguous copy (the baseline's layout)."""
    batch = random_paged_batch(lens, block_size=S, num_kv_heads=H_KV, group=H_Q // H_KV, head_dim=D,
                               spare_blocks=0, extra_columns=0, seed=seed)
    cont = DT.contiguous_layouts(batch)
    batch.keys = batch.values = None                                   # free the logical copies
    return dict(batch=batch, cont=cont)


def batched(c):
    return DT.batched_decode(c["batch"].q, c["cont"])


def fast_gather_fresh(c):
    """``fast_gather`` without the reused buffer: a fresh index_select per request."""
    b_ = c["batch"]
    out = torch.empty(b_.q.shape)
    for b, t in enumerate(b_.seq_lens.tolist()):
        ids = b_.block_tables[b, : blocks_needed(t, S)]
        k, v = (torch.index_select(cache, 0, ids).flatten(0, 1)[:t] for cache in (b_.k_cache, b_.v_cache))
        out[b] = F._grouped_decode(b_.q[b], k, v, 1 / math.sqrt(D))
    return out


def fast_gather_einsum(c):
    """``fast_gather`` without the stride trick: the spec's ``einsum`` in place of the strided ``bmm``."""
    b_ = c["batch"]
    longest = blocks_needed(int(b_.seq_lens.max()), S)
    k_buf, v_buf = (cache.new_empty(longest, *cache.shape[1:]) for cache in (b_.k_cache, b_.v_cache))
    out = torch.empty(b_.q.shape)
    for b, t in enumerate(b_.seq_lens.tolist()):
        ids = b_.block_tables[b, : blocks_needed(t, S)]
        k, v = F._copy_blocks(b_.k_cache, ids, t, k_buf), F._copy_blocks(b_.v_cache, ids, t, v_buf)
        qg = (b_.q[b] / math.sqrt(D)).view(H_KV, H_Q // H_KV, D)
        probs = torch.softmax(torch.einsum("hgd,thd->hgt", qg, k), dim=-1)
        out[b] = torch.einsum("hgt,thd->hgd", probs, v).reshape(H_Q, D)
    return out


def online_copy_v(c, step_blocks: int = 64):
    """``fast_online`` with V copied a step at a time and multiplied, like K (no ``embedding_bag``)."""
    b_ = c["batch"]
    k_buf, v_buf = (cache.new_empty(step_blocks, *cache.shape[1:]) for cache in (b_.k_cache, b_.v_cache))
    out = torch.empty(b_.q.shape)
    for b, t in enumerate(b_.seq_lens.tolist()):
        qg = (b_.q[b] / math.sqrt(D)).view(H_KV, H_Q // H_KV, D)
        m = torch.full((H_KV, H_Q // H_KV, 1), float("-inf"))
        l, acc = torch.zeros_like(m), torch.zeros_like(qg)
        for first in range(0, t, step_blocks * S):
            tokens = min(t - first, step_blocks * S)
            ids = b_.block_tables[b, first // S : first // S + blocks_needed(tokens, S)]
            k = F._copy_blocks(b_.k_cache, ids, tokens, k_buf)
            v = F._copy_blocks(b_.v_cache, ids, tokens, v_buf)
            s = torch.bmm(qg, k.permute(1, 2, 0))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            rescale = torch.exp(m - m_new)
            p = s.sub_(m_new).exp_()
            l.mul_(rescale).add_(p.sum(-1, keepdim=True))
            acc.mul_(rescale).add_(torch.bmm(p, v.transpose(0, 1)))
            m = m_new
        out[b] = (acc / l).view(H_Q, D)
    return out


METHODS = dict(
    batched=batched,
    spec_gather=lambda c: A.paged_decode_gather(*c["batch"].args()),
    fast_gather=lambda c: F.paged_decode_gather_fast(*c["batch"].args()),
    fast_gather_fresh=fast_gather_fresh,
    fast_gather_einsum=fast_gather_einsum,
    spec_online=lambda c: A.paged_decode_online(*c["batch"].args()),
    fast_online=lambda c: F.paged_decode_online_fast(*c["batch"].args()),
    online_copy_v=online_copy_v,
)


AB = [("fast_gather", "spec_gather", "all gather tricks"), ("fast_gather", "fast_gather_fresh", "reused buffers"),
      ("fast_gather", "fast_gather_einsum", "strided bmm, not einsum"),
      ("fast_online", "spec_online", "all online tricks"), ("fast_online", "online_copy_v", "embedding_bag V")]
"""(variant, baseline, what the variant adds): the A/B pairs, reported as per-round time ratios."""


def time_interleaved(case: dict, methods: dict, repeats: int) -> dict:
    """Seconds per round for each method: every round runs each once, in reversed order every other round."""
    expected = batched(case)
    for name, fn in methods.items():                                   # warm-up and correctness
        torch.testing.assert_close(fn(case), expected, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    times = {name: [] for name in methods}
    for r in range(repeats):
        for name in (list(methods) if r % 2 == 0 else list(methods)[::-1]):
            t0 = time.perf_counter()
            methods[name](case)
            times[name].append(time.perf_counter() - t0)
    return times


def report(name: str, lens: list[int], times: dict) -> None:
    base = times["batched"]
    print(f"\n### {name}: B={len(lens)}, tokens mean {sum(lens) / len(lens):.0f} / max {max(lens)}")
    print("| method | median ms | range ms | x batched (median of rounds) | range x batched |")
    print("|---|---:|---:|---:|---:|")
    for m, ts in times.items():
        ratios = [t / b for t, b in zip(ts, base)]
        print(f"| {m} | {statistics.median(ts) * 1e3:.2f} | {min(ts) * 1e3:.2f}-{max(ts) * 1e3:.2f} | "
              f"{statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")
    print("\n| A/B | adds | time ratio, median of rounds | range |")
    print("|---|---|---:|---:|")
    for new, old, adds in (pair for pair in AB if pair[0] in times and pair[1] in times):
        ratios = [t / b for t, b in zip(times[new], times[old])]
        print(f"| {new} / {old} | {adds} | {statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds (medians reported)")
    parser.add_argument("--batch-4k", type=int, default=8, help="requests in the 4k case")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated subset of the methods to time (batched is always timed)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    methods = {name: METHODS[name] for name in ["batched", *args.methods.split(",")]}
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} of {os.cpu_count()} CPUs, "
          f"load average before {os.getloadavg()[0]:.2f}, fp32, H_q={H_Q} H_kv={H_KV} D={D} S={S}")
    trace = sharegpt_like(32, seed=args.seed, max_context=4096)
    cases = {"sharegpt": (trace.prompt_len + trace.output_len[:, 0]).tolist(), "4k": [4096] * args.batch_4k}
    for name, lens in cases.items():
        case = build_case(lens, args.seed)
        report(name, lens, time_interleaved(case, methods, args.repeats))
        del case
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
