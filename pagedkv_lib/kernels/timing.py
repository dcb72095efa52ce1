"""Decode attention timed on one batch in one process: contiguous torch, paged torch, fused paged.

The Code lesson's live measurement and ``benchmarks/attention.py`` share these pieces. The same
logical K/V (a :class:`~pagedkv_lib.attention.batch.PagedBatch`) is laid out twice more, the way a
contiguous server keeps it: per request as ``[1, H_kv, T, D]`` (head-major, what
``scaled_dot_product_attention`` wants), and as one padded ``[B, H_kv, T_max, D]`` batch. Methods
run interleaved, round after round, so a change in machine load hits them all alike.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import fused_decode as NA
from ..attention.fast import paged_decode_online_fast
from ..attention.batch import PagedBatch, random_paged_batch

__all__ = ["ContiguousBatch", "contiguous_layouts", "sdpa_decode", "batched_decode", "time_interleaved",
           "compare_decode_times"]


@dataclass
class ContiguousBatch:
    """A batch's K/V without pages: ``per_request[b]`` is ``(k, v)``, each ``[1, H_kv, T_b, D]``;
    ``k_pad``, ``v_pad [B, H_kv, T_max, D]`` are zero-padded; ``padding [B, T_max]`` marks the pad."""

    per_request: list
    k_pad: torch.Tensor
    v_pad: torch.Tensor
    padding: torch.Tensor


def contiguous_layouts(batch: PagedBatch) -> ContiguousBatch:
    """The contiguous layouts of ``batch.keys`` / ``batch.values``: head-major copies (a request of
    the longest length shares its memory with the padded batch)."""
    lens = batch.seq_lens.tolist()
    t_max = max(lens)
    h_kv, d = batch.k_cache.shape[2:]
    k_pad = batch.k_cache.new_zeros(len(lens), h_kv, t_max, d)
    v_pad = torch.zeros_like(k_pad)
    for b, (k, v) in enumerate(zip(batch.keys, batch.values)):
        k_pad[b, :, : len(k)] = k.transpose(0, 1)
        v_pad[b, :, : len(v)] = v.transpose(0, 1)
    # .contiguous() is the view itself for a request as long as the longest, else a copy
    per_request = [(k_pad[b : b + 1, :, :t].contiguous(), v_pad[b : b + 1, :, :t].contiguous())
                   for b, t in enumerate(lens)]
    padding = torch.arange(t_max) >= torch.tensor(lens)[:, None]
    return ContiguousBatch(per_request, k_pad, v_pad, padding)


def sdpa_decode(q: torch.Tensor, cont: ContiguousBatch) -> torch.Tensor:
    """Per-request ``scaled_dot_product_attention`` of ``q [B, H_q, D]`` on contiguous K/V."""
    _, h_q, d = q.shape
    return torch.cat([F.scaled_dot_product_attention(q[b].view(1, h_q, 1, d), k, v, enable_gqa=True)
                      for b, (k, v) in enumerate(cont.per_request)]).view(q.shape)


def batched_decode(q: torch.Tensor, cont: ContiguousBatch) -> torch.Tensor:
    """One matmul-softmax-matmul over the padded batch, the padding masked to -inf."""
    batch, h_q, d = q.shape
    h_kv = cont.k_pad.shape[1]
    qg = q.view(batch, h_kv, h_q // h_kv, d) / math.sqrt(d)
    scores = torch.matmul(qg, cont.k_pad.transpose(-1, -2))              # [B, H_kv, G, T_max]
    scores.masked_fill_(cont.padding[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), cont.v_pad).view(q.shape)


def time_interleaved(methods: dict, repeats: int) -> dict:
    """Seconds per call of each zero-argument function, ``repeats`` rounds, after one warm-up call."""
    for fn in methods.values():
        fn()
    times = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def compare_decode_times(lens=(1024,) * 8, *, num_kv_heads: int = 8, group: int = 4, head_dim: int = 128,
                         block_size: int = 16, repeats: int = 5, seed: int = 0) -> dict:
    """Median seconds of one fp32 decode step by each method, on one batch with ``lens`` tokens.

    Keys: ``"contiguous (SDPA per request)"``, ``"contiguous (batched, padded)"``, ``"torch paged"``
    (:func:`~pagedkv_lib.attention.fast.paged_decode_online_fast`, the fastest torch-level paged
    decode: it copies each step's blocks before a matmul) and, when numba is installed,
    ``"fused paged"`` (:func:`~pagedkv_lib.kernels.fused_decode.paged_decode_numba`). Without numba that
    key is left out and one warning line says so. All methods are first checked to agree (1e-4).
    """
    batch = random_paged_batch(lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group,
                               head_dim=head_dim, seed=seed)
    cont = contiguous_layouts(batch)
    methods = {
        "contiguous (SDPA per request)": lambda: sdpa_decode(batch.q, cont),
        "contiguous (batched, padded)": lambda: batched_decode(batch.q, cont),
        "torch paged": lambda: paged_decode_online_fast(*batch.args()),
    }
    if NA.decode_function() is NA.paged_decode_numba:
        methods["fused paged"] = lambda: NA.paged_decode_numba(*batch.args())
    expected = methods["contiguous (batched, padded)"]()
    for name, fn in methods.items():
        worst = float((fn() - expected).abs().max())
        if not worst <= 1e-4:
            raise AssertionError(f"{name} differs from the batched baseline by {worst:.1e} (> 1e-4)")
    times = time_interleaved(methods, repeats)
    return {name: statistics.median(ts) for name, ts in times.items()}
