"""What bounds a decode step from below: the bytes of K and V it must read, and how fast memory moves them.

Decode attention does two multiply-adds per K/V value it reads, far too little arithmetic to
hide a read from main memory; so its time is bounded below by ``bytes read / bandwidth``. The
bytes: every request's K and V, once per layer, :func:`decode_step_read_bytes`. The bandwidth:
a plain copy of as many bytes, timed now, in the same rounds as the methods it bounds
(:func:`.timing.measure_decode_speed`), counted as the STREAM benchmark's Copy counts: bytes read
plus bytes written, per second.
"""
from __future__ import annotations

import torch

from ..validation import check_int, check_ints

__all__ = ["decode_step_read_bytes"]


def decode_step_read_bytes(seq_lens, num_kv_heads: int, head_dim: int, bytes_per_value: int) -> int:
    """Bytes one decode step reads in one layer: ``sum over requests of 2 * T * H_kv * d * b``.

    ``seq_lens``: each request's tokens T (all of which its new token attends to); ``num_kv_heads``
    H_kv; ``head_dim`` d; ``bytes_per_value`` b (4 for fp32, 2 for fp16/bf16). The 2 is K and V.
    Per layer: a model with L layers reads L times this per step.
    """
    if isinstance(seq_lens, torch.Tensor):
        seq_lens = seq_lens.tolist()
    lens = check_ints("seq_lens", seq_lens, minimum=0, what="token counts")
    h_kv = check_int("num_kv_heads", num_kv_heads, minimum=1)
    d = check_int("head_dim", head_dim, minimum=1)
    b = check_int("bytes_per_value", bytes_per_value, minimum=1)
    return sum(2 * t * h_kv * d * b for t in lens)
