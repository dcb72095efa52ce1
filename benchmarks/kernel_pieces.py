"""Same-process A/B of the fused kernel's optional pieces: is each worth keeping (>= 15% faster)?

Usage: python benchmarks/kernel_pieces.py [--threads 2] [--repeats 9] [--batch-4k 32] [--cases sharegpt,4k]
                                          [--clock wall|cpu]

``--clock cpu`` times each call by the process's CPU time instead of the wall clock: with one
thread (no torch thread pool spinning) that is the work a call does, whatever else the machine runs.

The library's kernel before issue 39 (:mod:`pagedkv_lib.kernels.numba_kernel`) kept one piece,
prefetching; issue 39's kernel dropped it, and now asks again, another way (rows 16 tokens ahead, into L2;
``benchmarks/prefetch_ab.py`` is its A/B; ``benchmarks/RESULTS.md``). This script rebuilds that
earlier program (``rebuilt``, equal to the library's within 1e-5) without it, or with pieces the library once had, and
times them all interleaved, round by round, in one process (order reversed every other round;
each fused call right after one torch op, as in a model). The pieces:

* ``no_prefetch``: the program without :mod:`pagedkv_lib.kernels.prefetch` (each token's V row
  asked for while its scores are computed, the next step's K rows while this step's V rows are added);
* ``poly_exp``: ``exp`` by a range reduction and a degree-7 polynomial in loops LLVM vectorises,
  instead of one libm ``expf`` per score;
* ``numba_threads``: the library's program launched by numba's ``prange`` (numba's own thread
  pool and threading layer) instead of plain Python threads;
* ``huge_pages``: the caches copied onto huge pages (:func:`pagedkv_lib.kernels.huge_pages.on_huge_pages`),
  shuffled and in order.

Cases as in ``benchmarks/attention.py``: 32 ShareGPT-like requests and ``--batch-4k`` x 4096
tokens; 32 query heads, 8 KV heads, head dim 128, block size 16, fp32, shuffled blocks. The
rebuilt program is first checked bit-identical to the library's, every method to it.
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time
from unittest import mock

import numpy as np
import torch
import numba
from numba import njit, prange

from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.kernels import fused_decode as FD, numba_kernel as NK, timing as DT
from pagedkv_lib.kernels.huge_pages import on_huge_pages
from pagedkv_lib.kernels.prefetch import LINE_BYTES, PREFETCH_TOKENS, prefetch_intrinsic
from pagedkv_lib.sim import sharegpt_like

H_Q, H_KV, D, S = 32, 8, 128, 16
FM = NK._FASTMATH


@njit(fastmath=FM, inline="always")
def _exp_shifted(x, n, shift, two_k):
    """``x[:n] = exp(x[:n] - shift)`` (``x <= shift``) by ``2**k * e**r``, Taylor to ``r**7``; returns the sum."""
    for t in range(n):
        y = max(x[t] - shift, np.float32(-87.0))
        k = np.floor(y * np.float32(1.442695) + np.float32(0.5))
        r = y - k * np.float32(0.6931472)
        x[t] = np.float32(1.0) + r * (np.float32(1.0) + r * (np.float32(1 / 2) + r * (np.float32(1 / 6) + r * (
            np.float32(1 / 24) + r * (np.float32(1 / 120) + r * (np.float32(1 / 720) + r * np.float32(1 / 5040)))))))
        two_k[t] = (np.int32(k) + np.int32(127)) << np.int32(23)      # the fp32 bits of 2**k
    total = np.float32(0.0)
    scale = two_k.view(np.float32)
    for t in range(n):
        x[t] *= scale[t]
        total += x[t]
    return total


_prefetch_l1 = prefetch_intrinsic(3)


@njit(inline="always")
def prefetch_row(cache, block, slot, num_bytes):
    """Ask for the first ``num_bytes`` of token ``slot``'s row in physical ``block`` of ``cache``, line by line,
    into L1: the prefetch of the 2026-12-01 kernel."""
    row = cache.ctypes.data + block * cache.strides[0] + slot * cache.strides[1]
    for offset in range(0, num_bytes, LINE_BYTES):
        _prefetch_l1(row + offset)


def make_program(prefetch: bool, poly_exp: bool):
    """The library's :func:`~pagedkv_lib.kernels.numba_kernel.decode_request`, with the pieces asked for."""
    block = NK._block

    @njit(fastmath=FM)
    def scores(qs, k_cache, v_cache, table, T, j0, j1, upcast, buf, p):
        group, t, ahead = qs.shape[0] // k_cache.shape[2], 0, j1 - j0
        S_ = k_cache.shape[1]
        for j in range(j0, j1):
            n = min(S_, T - j * S_)
            k = block(k_cache, table[j], n, upcast, buf)
            for slot in range(n):
                if prefetch:
                    prefetch_row(v_cache, table[j], slot, v_cache.strides[1])
                    if (j + ahead) * S_ + slot < T:
                        prefetch_row(k_cache, table[j + ahead], slot, LINE_BYTES)
                for h in range(k_cache.shape[2]):
                    for hq in range(h * group, (h + 1) * group):
                        s = np.float32(0.0)
                        for d in range(k_cache.shape[3]):
                            s += qs[hq, d] * k[slot, h, d]
                        p[hq, t + slot] = s
            t += n
        return t

    @njit(fastmath=FM)
    def softmax(p, n, m, l, acc, two_k):
        for hq in range(p.shape[0]):
            m_new = m[hq]
            for t in range(n):
                m_new = max(m_new, p[hq, t])
            alpha = np.exp(m[hq] - m_new)
            if poly_exp:
                total = _exp_shifted(p[hq], n, m_new, two_k)
            else:
                total = np.float32(0.0)
                for t in range(n):
                    p[hq, t] = np.exp(p[hq, t] - m_new)
                    total += p[hq, t]
            l[hq] = l[hq] * alpha + total
            m[hq] = m_new
            for d in range(acc.shape[1]):
                acc[hq, d] *= alpha

    @njit(fastmath=FM)
    def values(p, v_cache, k_cache, table, T, j0, j1, upcast, buf, acc):
        group, t, ahead = acc.shape[0] // v_cache.shape[2], 0, j1 - j0
        S_ = v_cache.shape[1]
        for j in range(j0, j1):
            n = min(S_, T - j * S_)
            v = block(v_cache, table[j], n, upcast, buf)
            for slot in range(n):
                if prefetch and (j + ahead) * S_ + slot < T:
                    prefetch_row(k_cache, table[j + ahead], slot, k_cache.strides[1])
                    prefetch_row(v_cache, table[j + ahead], slot, LINE_BYTES)
                for h in range(v_cache.shape[2]):
                    for hq in range(h * group, (h + 1) * group):
                        w = p[hq, t + slot]
                        for d in range(v_cache.shape[3]):
                            acc[hq, d] += w * v[slot, h, d]
            t += n

    @njit(nogil=True, fastmath=FM)
    def decode_request(b, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, unused_ahead,
                       out):
        num_q_heads, head_dim, num_kv_heads = q.shape[1], q.shape[2], k_cache.shape[2]
        T, S_ = seq_lens[b], k_cache.shape[1]
        qs = q[b] * scale
        m = np.full(num_q_heads, -np.inf, dtype=np.float32)
        l = np.zeros(num_q_heads, dtype=np.float32)
        acc = np.zeros((num_q_heads, head_dim), dtype=np.float32)
        p = np.empty((num_q_heads, step_blocks * S_), dtype=np.float32)
        two_k = np.empty(step_blocks * S_, dtype=np.int32)
        buf = np.empty((S_, num_kv_heads, head_dim), dtype=np.float32)
        num_blocks = (T + S_ - 1) // S_
        for j0 in range(0, num_blocks, step_blocks):
            j1 = min(j0 + step_blocks, num_blocks)
            n = scores(qs, k_cache, v_cache, block_tables[b], T, j0, j1, upcast, buf, p)
            softmax(p, n, m, l, acc, two_k)
            values(p, v_cache, k_cache, block_tables[b], T, j0, j1, upcast, buf, acc)
        for hq in range(num_q_heads):
            for d in range(head_dim):
                out[b, hq, d] = acc[hq, d] / l[hq]

    return decode_request


@njit(parallel=True, fastmath=FM)
def _on_numba_threads(order, q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks, out):
    for i in prange(order.shape[0]):
        NK.decode_request(order[i], q, k_cache, v_cache, block_tables, seq_lens, scale, upcast, step_blocks,
                          PREFETCH_TOKENS, out)


def on_numba_threads(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """:func:`fused_decode._launch`'s arguments, the program run by numba's ``prange``, longest first."""
    out = np.empty(q.shape, dtype=np.float32)
    lens = seq_lens.numpy()
    _on_numba_threads(np.argsort(-lens, kind="stable"), q.numpy(), k_cache.numpy(), v_cache.numpy(),
                      block_tables.numpy(), lens, np.float32(scale), None, FD.STEP_TOKENS // S, out)
    return torch.from_numpy(out)


def build_case(lens: list[int], seed: int, huge_pages: bool) -> dict:
    batch = random_paged_batch(lens, block_size=S, num_kv_heads=H_KV, group=H_Q // H_KV, head_dim=D,
                               spare_blocks=0, seed=seed)
    cont = DT.contiguous_layouts(batch)
    used = batch.block_tables >= 0
    ids = batch.block_tables[used]                                      # request after request, in order
    t_order = torch.full_like(batch.block_tables, -1)
    t_order[used] = torch.arange(ids.numel())
    args = batch.args()
    in_order = (batch.q, batch.k_cache[ids], batch.v_cache[ids], t_order, batch.seq_lens)
    batch.keys = batch.values = None
    case = dict(args=args, in_order=in_order, cont=cont, q=batch.q)
    if huge_pages:
        case["huge"] = (batch.q, *on_huge_pages([args[1], args[2]]), *args[3:])
        case["huge_in_order"] = (batch.q, *on_huge_pages([in_order[1], in_order[2]]), *in_order[3:])
    return case


def methods(case: dict) -> dict:
    scale = D ** -0.5
    programs = {name: make_program(*flags) for name, flags in
                [("rebuilt", (True, False)), ("no_prefetch", (False, False)), ("poly_exp", (True, True))]}

    def with_program(program, args):
        with mock.patch.object(NK, "decode_request", program):          # _launch looks it up per call
            return FD.paged_decode_numba(*args)

    out = {"fused": lambda: FD.paged_decode_numba(*case["args"]),
           "fused_in_order": lambda: FD.paged_decode_numba(*case["in_order"])}
    out.update({name: (lambda p=p: with_program(p, case["args"])) for name, p in programs.items()})
    out["no_prefetch_in_order"] = lambda: with_program(programs["no_prefetch"], case["in_order"])
    out["numba_threads"] = lambda: on_numba_threads(*case["args"], scale)
    if "huge" in case:
        out["huge_pages"] = lambda: FD.paged_decode_numba(*case["huge"])
        out["huge_pages_in_order"] = lambda: FD.paged_decode_numba(*case["huge_in_order"])
    return out


AB = [("fused", "no_prefetch"), ("poly_exp", "fused"), ("numba_threads", "fused"), ("huge_pages", "fused"),
      ("fused", "fused_in_order"), ("no_prefetch", "no_prefetch_in_order"), ("huge_pages", "huge_pages_in_order")]


def run_case(name: str, lens: list[int], repeats: int, huge_pages: bool, seed: int, clock) -> None:
    case = build_case(lens, seed, huge_pages)
    fused = methods(case)
    baselines = {"sdpa": lambda: DT.sdpa_decode(case["q"], case["cont"].per_request),
                 "batched": lambda: DT.batched_decode(case["q"], case["cont"])}
    expected = fused["fused"]()
    torch.testing.assert_close(fused["rebuilt"](), expected, atol=1e-5, rtol=1e-5)     # the program before issue 39
    for m, fn in {**baselines, **fused}.items():
        torch.testing.assert_close(fn(), expected, atol=1e-4, rtol=1e-4, msg=lambda e: f"{m}: {e}")
    times = {m: [] for m in [*baselines, *fused]}
    for r in range(repeats):
        for m, fn in baselines.items():
            t0 = clock()
            fn()
            times[m].append(clock() - t0)
        for m in (list(fused) if r % 2 == 0 else list(fused)[::-1]):
            baselines["batched"]()                                       # a torch op right before, alike
            t0 = clock()
            fused[m]()
            times[m].append(clock() - t0)
    best = min(statistics.median(times["sdpa"]), statistics.median(times["batched"]))
    print(f"\n### {name}: B={len(lens)}, tokens mean {np.mean(lens):.0f} / max {max(lens)}; "
          f"load average now {os.getloadavg()[0]:.2f}")
    print("| method | median ms (range) | x faster contiguous baseline |\n|---|---:|---:|")
    for m, ts in times.items():
        print(f"| {m} | {statistics.median(ts) * 1e3:.2f} ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f}) | "
              f"{statistics.median(ts) / best:.2f} |")
    print("\n| A/B | time ratio, median of rounds (range) | rounds faster |\n|---|---:|---:|")
    for new, old in (pair for pair in AB if pair[0] in times):
        ratios = [a / b for a, b in zip(times[new], times[old])]
        print(f"| {new} / {old} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{sum(x < 1 for x in ratios)}/{len(ratios)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch and numba threads")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds (medians reported)")
    parser.add_argument("--batch-4k", type=int, default=32, help="requests in the 4k case")
    parser.add_argument("--cases", default="sharegpt,4k")
    parser.add_argument("--no-huge-pages", action="store_true", help="skip the huge-page variants")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time calls by the wall clock, or by the process's CPU time")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(args.threads)
    numba.set_num_threads(args.threads)
    if FD.kernel_unavailable():
        raise SystemExit(FD.kernel_unavailable())
    huge = not args.no_huge_pages and hasattr(mmap, "MADV_HUGEPAGE")
    trace = sharegpt_like(32, seed=args.seed, max_context=4096)
    cases = {"sharegpt": (trace.prompt_len + trace.output_len[:, 0]).tolist(), "4k": [4096] * args.batch_4k}
    print(f"torch {torch.__version__}, numba {numba.__version__}, {args.threads} threads of {os.cpu_count()} "
          f"CPUs, load average before {os.getloadavg()[0]:.2f}, huge pages {'on' if huge else 'off'}, "
          f"{args.clock} clock")
    for name in args.cases.split(","):
        run_case(name, cases[name], args.repeats, huge, args.seed, clock)
    print(f"\nnumba threading layer {numba.threading_layer()}; load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
