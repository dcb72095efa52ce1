"""The Triton paged decode kernel against SDPA on contiguous caches, timed in the same run on a GPU.

Usage: python benchmarks/triton_attention.py [--dtype float16] [--batch-4k 32] [--batch-16k 4]
       [--partitions 512,256,128] [--blocks-per-step 2,4] [--chosen] [--peak-gbs 4800]

Needs a CUDA GPU (timing Triton's CPU interpreter would measure the interpreter): on a machine
without one it exits with status 1 and says so. The CPU comparison of the torch versions is
``benchmarks/attention.py``; the kernel's correctness on a CPU is ``tests/test_triton_attention.py``.

Same shapes as ``benchmarks/attention.py``: 32 query heads, 8 KV heads, head dim 128, block size
16, one decode token per request, three cases:

* ``sharegpt``: 32 requests whose context (tokens) is a ShareGPT-like prompt plus output length;
* ``4k``: ``--batch-4k`` requests of exactly 4096 tokens each;
* ``16k``: ``--batch-16k`` requests of 16,384 tokens: few, long sequences, where one program per
  (request, KV head) leaves most of the GPU idle and the partitioned kernel should help most.

Methods, all producing the same ``[B, 32, 128]`` output (checked against fp32 attention):

* ``triton_kernel``: the kernel launch alone (``_launch_unchecked``) on a paged cache whose
  physical blocks are shuffled, so neighbouring logical blocks are far apart in memory;
* ``triton_paged``: the public :func:`pagedkv_lib.attention.triton_decode.paged_decode_triton`, whose
  argument checks copy the tables to the host (a GPU sync) before the same launch;
* ``triton_split_P``: :mod:`pagedkv_lib.attention.triton_split_decode` (vLLM's ``paged_attention_v2``
  idea), one program per partition of ``P`` tokens, then one merge launch, unchecked;
  ``triton_split_P_torch_merge`` the same partials merged by ``merge_partitions`` in torch (the A/B);
  ``triton_split_P_xN`` the same kernel reading ``N`` blocks per step as one tile (issue 39's A/B);
  with ``--chosen``, ``triton_split_chosen`` and ``triton_split_chosen_xN``: the size
  :func:`~pagedkv_lib.attention.triton_split_decode.chosen_partition_tokens` picks for the case on this GPU
  (the public function's default; printed in the case's header), to compare with ``triton_split_512``
  and ``triton_split_512_xN`` at the same blocks per step (issue 39's A/B of the chosen size);
* ``sdpa_padded``: one ``scaled_dot_product_attention`` call over a contiguous, head-major,
  zero-padded ``[B, H_kv, T_max, D]`` batch (a key-padding mask when lengths differ);
* ``sdpa_per_request``: one SDPA call per request on its own contiguous ``[1, H_kv, T, D]``.

Effective bandwidth is the bytes of K and V the requests hold (no padding) divided by the time.
Copy bandwidth is ``dst.copy_(src)`` on the GPU, counted STREAM-style (bytes read plus written
per second); ``--peak-gbs`` adds the datasheet figure (H200: 4800 GB/s) as a second yardstick.
Times are medians from ``triton.testing.do_bench``, which clears the L2 cache before each run.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F

from pagedkv_lib.attention.spec import TOLERANCES
from pagedkv_lib.sim import sharegpt_like
from pagedkv_lib.attention.batch import random_paged_batch

H_Q, H_KV, D, S = 32, 8, 128, 16
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def build_case(lens: list[int], dtype: torch.dtype, device: str, seed: int) -> dict:
    """One set of logical K/V per request, stored twice: in shuffled paged blocks, and padded contiguous.

    The paged copy is :func:`pagedkv_lib.attention.batch.random_paged_batch` (int32 tables, NaN in the
    unused tail of each last block); the contiguous copy is head-major ``[B, H_kv, T_max, D]``,
    zero past each request's length.
    """
    batch = random_paged_batch(lens, block_size=S, num_kv_heads=H_KV, group=H_Q // H_KV, head_dim=D,
                               dtype=dtype, device=device, spare_blocks=0, extra_columns=0,
                               table_dtype=torch.int32, seed=seed)
    t_max = max(lens)
    k_pad = torch.zeros(len(lens), H_KV, t_max, D, dtype=dtype, device=device)
    v_pad = torch.zeros_like(k_pad)
    for b, (k, v) in enumerate(zip(batch.keys, batch.values)):
        k_pad[b, :, : len(k)] = k.transpose(0, 1)
        v_pad[b, :, : len(v)] = v.transpose(0, 1)
    padding = torch.arange(t_max, device=device) >= batch.seq_lens[:, None]       # [B, T_max]
    return dict(q=batch.q, k_cache=batch.k_cache, v_cache=batch.v_cache, tables=batch.block_tables,
                lens=batch.seq_lens, k_pad=k_pad, v_pad=v_pad,
                # SDPA's boolean mask: True = attend. None when no request is padded.
                keep=None if min(lens) == t_max else ~padding[:, None, None, :],
                per_request=[(k_pad[b : b + 1, :, :t], v_pad[b : b + 1, :, :t]) for b, t in enumerate(lens)])


def sdpa_padded(c):
    q = c["q"]
    out = F.scaled_dot_product_attention(q[:, :, None, :], c["k_pad"], c["v_pad"], attn_mask=c["keep"],
                                         enable_gqa=True)
    return out[:, :, 0, :]


def sdpa_per_request(c):
    q = c["q"]
    return torch.cat([F.scaled_dot_product_attention(q[b : b + 1, :, None, :], k, v, enable_gqa=True)[:, :, 0]
                      for b, (k, v) in enumerate(c["per_request"])])


def fp32_reference(c):
    """fp32 attention over the padded contiguous batch: the yardstick every method is checked against."""
    q = c["q"].float()
    out = F.scaled_dot_product_attention(q[:, :, None, :], c["k_pad"].float(), c["v_pad"].float(),
                                         attn_mask=c["keep"], enable_gqa=True)
    return out[:, :, 0, :]


def timed_methods(triton_attention, triton_split, partitions: list[int], blocks_per_step: list[int],
                  chosen: bool = False) -> dict:
    """Name -> function of a case. ``triton_paged`` is the public call (argument checks included:
    they copy the tables to the host and wait for the GPU); ``triton_kernel`` the launch alone;
    ``triton_split_P`` the partitioned kernel and its merge, partitions of ``P`` tokens, unchecked;
    with ``chosen``, ``triton_split_chosen[_xN]`` at the size the library's default picks for the case."""
    def unchecked(c):  # what the unchecked launches take: the case's tensors and the default scale
        return c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"], 1.0 / math.sqrt(c["q"].shape[-1])

    def triton_paged(c):
        return triton_attention.paged_decode_triton(*unchecked(c)[:5])

    def triton_kernel(c):
        return triton_attention._launch_unchecked(*unchecked(c))

    def split(size, blocks=1):
        return lambda c: triton_split._launch_unchecked(*unchecked(c), size, blocks_per_step=blocks)

    def chosen_size(c, blocks):  # the public default's size for this case, found once (host arithmetic)
        key = f"chosen_x{blocks}"
        if key not in c:
            c[key] = triton_split.chosen_partition_tokens(c["q"], c["k_cache"], c["tables"], blocks)
        return c[key]

    def split_chosen(blocks):
        return lambda c: triton_split._launch_unchecked(*unchecked(c), chosen_size(c, blocks), blocks_per_step=blocks)

    def split_torch_merge(c):  # the A/B of the one-launch merge: the same partials, merged in torch
        return triton_split.merge_partitions(*triton_split._partials(*unchecked(c), partitions[0])).to(c["q"].dtype)

    return dict(triton_kernel=triton_kernel, triton_paged=triton_paged,
                **{f"triton_split_{size}": split(size) for size in partitions},
                **{f"triton_split_{size}_x{n}": split(size, n) for size in partitions for n in blocks_per_step},
                **({"triton_split_chosen": split_chosen(1)} if chosen else {}),
                **({f"triton_split_chosen_x{n}": split_chosen(n) for n in blocks_per_step} if chosen else {}),
                **{f"triton_split_{partitions[0]}_torch_merge": split_torch_merge},
                sdpa_padded=sdpa_padded, sdpa_per_request=sdpa_per_request)


def check_outputs(c, methods: dict) -> dict:
    """Max |error| of each method against fp32 attention; raises if one is outside the dtype's tolerance."""
    ref = fp32_reference(c)
    atol, rtol = TOLERANCES[c["q"].dtype]
    errors = {}
    for name, fn in methods.items():
        out = fn(c).float()
        torch.testing.assert_close(out, ref, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{name}: {m}")
        errors[name] = float((out - ref).abs().max())
    return errors


def copy_bandwidth(num_bytes: int) -> float:
    """STREAM-style device copy bandwidth in bytes/s: (read + written) / median time."""
    from triton.testing import do_bench
    src = torch.randn(num_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    return 2 * num_bytes / (do_bench(lambda: dst.copy_(src), return_mode="median") * 1e-3)


def run_case(name: str, lens: list[int], methods: dict, dtype: torch.dtype, seed: int, copy_bw: float,
             peak_bw: float | None) -> None:
    from triton.testing import do_bench
    c = build_case(lens, dtype, "cuda", seed)
    errors = check_outputs(c, methods)
    kv_bytes = 2 * sum(lens) * H_KV * D * c["k_cache"].element_size()
    secs = {m: do_bench(lambda fn=fn: fn(c), return_mode="median") * 1e-3 for m, fn in methods.items()}
    best_base = min(secs["sdpa_padded"], secs["sdpa_per_request"])
    print(f"\n### {name}: B={len(lens)}, tokens mean {sum(lens) / len(lens):.0f} / max {max(lens)}, "
          f"K+V {kv_bytes / 2**20:.0f} MiB, {dtype}")
    chosen = {key: size for key, size in c.items() if key.startswith("chosen_x")}
    if chosen:
        print(f"chosen partition tokens ({torch.cuda.get_device_properties(0).multi_processor_count} SMs): "
              + ", ".join(f"{size} (x{key[8:]})" for key, size in chosen.items()))
    peak_col = " | fraction of peak" if peak_bw else ""
    print(f"| method | median us | time / faster SDPA | GB/s (K+V read) | fraction of copy bw{peak_col} | max abs err |")
    print("|---|---:|---:|---:|---:|" + ("---:|" if peak_bw else "") + "---:|")
    for m, s in secs.items():
        peak = f" | {kv_bytes / s / peak_bw:.0%}" if peak_bw else ""
        print(f"| {m} | {s * 1e6:.1f} | {s / best_base:.2f} | {kv_bytes / s / 1e9:.0f} | "
              f"{kv_bytes / s / copy_bw:.0%}{peak} | {errors[m]:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16", help="cache and query dtype")
    parser.add_argument("--batch-4k", type=int, default=32, help="requests in the 4k case")
    parser.add_argument("--peak-gbs", type=float, default=None,
                        help="datasheet memory bandwidth in GB/s, for a second fraction (H200: 4800)")
    parser.add_argument("--batch-16k", type=int, default=4, help="requests in the 16k case")
    parser.add_argument("--partitions", default="512,256,128",
                        help="partition sizes (tokens) of the partitioned kernel to time, comma-separated")
    parser.add_argument("--blocks-per-step", default="2,4",
                        help="blocks per step of the partitioned kernel to time beside one, comma-separated")
    parser.add_argument("--chosen", action="store_true",
                        help="also time the partitioned kernel at the size the library chooses for each case")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/triton_attention.py needs a CUDA GPU and found none (torch.cuda.is_available() "
                 "is False); nothing was measured. On a CPU, run benchmarks/attention.py for the torch "
                 "versions, and `pytest tests/test_triton_attention.py` to check the kernel under Triton's "
                 "interpreter.")
    import triton
    from pagedkv_lib.attention import triton_decode as triton_attention, triton_split_decode as triton_split
    if triton_attention.INTERPRETED:
        sys.exit("TRITON_INTERPRET is set, so the kernel would run in Triton's CPU interpreter: "
                 "unset it to time the compiled kernel.")
    dtype = DTYPES[args.dtype]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"H_q={H_Q} H_kv={H_KV} D={D} S={S}")
    copy_bw = copy_bandwidth(1 << 30)
    print(f"copy bandwidth (read + write, 1 GiB): {copy_bw / 1e9:.0f} GB/s")
    peak_bw = args.peak_gbs * 1e9 if args.peak_gbs else None
    trace = sharegpt_like(32, seed=args.seed, max_context=4096)
    methods = timed_methods(triton_attention, triton_split, [int(p) for p in args.partitions.split(",")],
                            [int(n) for n in args.blocks_per_step.split(",") if n], chosen=args.chosen)
    lens = (trace.prompt_len + trace.output_len[:, 0]).tolist()
    run_case("sharegpt", lens, methods, dtype, args.seed, copy_bw, peak_bw)
    run_case("4k", [4096] * args.batch_4k, methods, dtype, args.seed, copy_bw, peak_bw)
    run_case("16k", [16384] * args.batch_16k, methods, dtype, args.seed, copy_bw, peak_bw)


if __name__ == "__main__":
    main()
