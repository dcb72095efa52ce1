"""Decode attention timed on a GPU, each method against the device's copy bandwidth: lesson 03 on a learner's GPU.

:func:`measure_gpu_decode_speed` is :func:`.timing.measure_decode_speed` for a CUDA device. The same
batch (fp16 by default: a T4 has no bf16) is laid out paged with shuffled blocks, per request and padded;
the rows are the Triton kernels, single-pass and partitioned (:mod:`pagedkv_lib.attention.triton_decode`,
:mod:`~pagedkv_lib.attention.triton_split_decode`), torch's SDPA per request and on the padded batch, and
the block gather (copy only). They run interleaved round by round, as on the CPU, with a device copy of
as many bytes in every round; a timed call is ``calls`` launches and one wait for the GPU, so the wait's
cost is shared. The result is a :class:`.timing.DecodeSpeed` whose gate pair (:func:`gpu_pair`) is the
faster of the Triton rows over the faster of the SDPA rows, judged on what the learner's table shows.

Triton is imported only inside the functions that launch it: importing this module needs no Triton.
"""
from __future__ import annotations

import importlib.util
import math
import os
import statistics

import torch
import torch.nn.functional as F

from ..attention.batch import random_paged_batch
from ..attention.spec import TOLERANCES
from .bandwidth import decode_step_read_bytes
from .timing import DecodeSpeed, ROWS, contiguous_layouts, fastest_copy, sdpa_decode, time_interleaved

__all__ = ["GPU_ROWS", "gpu_pair", "gpu_unavailable", "measure_gpu_decode_speed"]

GPU_ROWS = {
    "copy": ROWS["copy"],
    "triton single pass": "Triton kernel, paged, blocks shuffled, one pass",
    "triton partitioned": "Triton kernel, paged, blocks shuffled, in partitions",
    "torch contiguous": ROWS["torch contiguous"],
    "torch padded": "torch, contiguous (SDPA on one padded batch)",
}
"""The methods :func:`measure_gpu_decode_speed` times, by key, in the table's order, and what each one is."""


def gpu_unavailable() -> str | None:
    """None when the lesson can time the compiled Triton kernels on a CUDA GPU here; else why not, in words."""
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set, so Triton would interpret the kernels instead of compiling them"
    return None


def gpu_pair(seconds: dict) -> tuple[str, str]:
    """``(paged, contiguous)``: the faster Triton row (by median) and the faster SDPA row, the pair the gate
    compares. Each is the best this device did with that layout, so the ratio is paging's cost at its best."""
    paged = min(("triton single pass", "triton partitioned"), key=seconds.__getitem__)
    contiguous = min(("torch contiguous", "torch padded"), key=seconds.__getitem__)
    return paged, contiguous


def measure_gpu_decode_speed(lens, *, num_kv_heads: int = 8, group: int = 4, head_dim: int = 128,
                             block_size: int = 16, repeats: int = 5, seed: int = 0, device: str = "cuda",
                             dtype: torch.dtype = torch.float16, calls: int = 10) -> DecodeSpeed:
    """Time one decode step of a batch with ``lens`` tokens per request, every row of :data:`GPU_ROWS`, on ``device``.

    ``dtype`` is the caches' and q's (fp16: every GPU has it). Every attention row is first checked to agree
    with fp32 SDPA per request within :data:`~pagedkv_lib.attention.spec.TOLERANCES` for ``dtype``.
    ``device="cpu"`` runs the Triton rows in Triton's interpreter (``TRITON_INTERPRET=1`` set before triton
    was imported): correct and very slow, for tests of this function without a GPU.
    """
    from ..attention import triton_decode as TD, triton_split_decode as TS   # needs Triton
    batch = random_paged_batch(lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group,
                               head_dim=head_dim, dtype=dtype, device=device, spare_blocks=0,
                               table_dtype=torch.int32, seed=seed)
    cont = contiguous_layouts(batch)
    keep = ~cont.padding.to(device)[:, None, None, :]                  # SDPA's mask: True = attend
    batch.keys = batch.values = None
    args = (*batch.args(), 1 / math.sqrt(head_dim))
    ids = batch.block_tables[batch.block_tables >= 0].long()
    k_copy = batch.k_cache.new_empty(len(ids), *batch.k_cache.shape[1:])
    v_copy = torch.empty_like(k_copy)

    def copy_blocks():
        torch.index_select(batch.k_cache, 0, ids, out=k_copy)
        torch.index_select(batch.v_cache, 0, ids, out=v_copy)

    def padded():
        q = batch.q[:, :, None, :]
        return F.scaled_dot_product_attention(q, cont.k_pad, cont.v_pad, attn_mask=keep, enable_gqa=True)[:, :, 0]

    attention = {"triton single pass": lambda: TD._launch_unchecked(*args),
                 "triton partitioned": lambda: TS._launch_unchecked(*args),
                 "torch contiguous": lambda: sdpa_decode(batch.q, cont.per_request),
                 "torch padded": padded}
    expected = sdpa_decode(batch.q.float(), [(k.float(), v.float()) for k, v in cont.per_request])   # fp32
    atol, rtol = TOLERANCES[dtype]
    for key, fn in attention.items():
        torch.testing.assert_close(fn().float(), expected, atol=atol, rtol=rtol,
                                   msg=lambda m, key=key: f"{GPU_ROWS[key]} differs from fp32 attention: {m}")
    read = decode_step_read_bytes(lens, num_kv_heads, head_dim, batch.k_cache.element_size())
    src = torch.ones(read // 4, device=device)
    dst, other = torch.zeros_like(src), torch.ones_like(src)
    wait = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)

    def launches(fn):
        def run():
            for _ in range(calls):
                fn()
            wait()
        return run

    methods = {"copy": copy_blocks, **attention, "bandwidth": lambda: dst.copy_(src)}
    times = time_interleaved({key: launches(fn) for key, fn in methods.items()}, repeats,
                             between=lambda: (other.sum(), wait()))
    times = {key: [t / calls for t in ts] for key, ts in times.items()}
    seconds = {key: statistics.median(ts) for key, ts in times.items()}
    moved = {key: read for key in attention}
    moved["copy"] = 2 * (k_copy.numel() + v_copy.numel()) * k_copy.element_size()
    bandwidth = fastest_copy({"bandwidth": (2 * src.numel() * 4, seconds.pop("bandwidth")),
                              "copy": (moved["copy"], seconds["copy"])})
    name = torch.cuda.get_device_name(device) if wait is torch.cuda.synchronize else "Triton's interpreter (CPU)"
    return DecodeSpeed({key: seconds[key] for key in GPU_ROWS}, {key: times[key] for key in GPU_ROWS}, moved, read,
                       bandwidth, [int(t) for t in lens], torch.get_num_threads(), repeats, None,
                       device=name, pair=gpu_pair(seconds))
