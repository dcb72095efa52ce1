"""How long a partition of :mod:`.triton_split_decode` should be, from the batch and the device.

The partitioned kernel runs one program per (sequence, KV head, partition). Too few programs and
most of the GPU's streaming multiprocessors (SMs) wait; too many short partitions and the merge
(each partition writes an fp32 partial that a second launch reads back) costs more than it saves.
:func:`choose_partition_tokens` states the rule; :func:`sm_count` reads the SM count of a device.
Pure Python: no Triton needed, so the rule can be read and tested anywhere.

The rule is a first guess from one H200 run (``benchmarks/RESULTS.md``, 2026-12-04: 256-token
partitions beat vLLM's 512 in all three cases measured) and the occupancy arithmetic below; the A/B
that checks it is ``benchmarks/triton_attention.py --chosen`` (``benchmarks/gpu_check.sh`` step 3).
"""
from __future__ import annotations

import math

import torch

from ..validation import check_int

__all__ = ["DEFAULT_SM_COUNT", "FALLBACK_PARTITION_TOKENS", "MAX_PARTITIONS", "MIN_PARTITION_TOKENS",
           "PROGRAMS_PER_SM", "check_blocks_per_step", "choose_partition_tokens", "sm_count"]

PROGRAMS_PER_SM = 32
"""Programs the rule asks for per SM. An sm_80/sm_90 SM holds at most 64 warps at once (sm_75: 32), so up to
16 of this kernel's programs (Triton's default 4 warps each); a memory-bound loop needs them all resident to keep
enough loads in flight. Rounding the partition up to the size ladder (below) can halve the partitions, so the rule
asks for twice 16, and gets at least 16 per SM wherever the floor and the sequences' lengths allow."""

MIN_PARTITION_TOKENS = 256
"""Floor on a partition's tokens (rounded up to the ladder). Per (sequence, KV head, partition) the kernel writes,
and the merge reads back, ``G`` fp32 partials of ``D + 2`` values, against ``2 * P * D`` cached values of K and V
read: extra traffic of about ``4 * G / (P * bytes per value)``, 3% at ``P = 256`` for fp16 and a KV group of
``G = 4`` (the benchmarks' shapes), 6% at ``G = 8``. Shorter partitions were not measured."""

MAX_PARTITIONS = 256
"""Cap on partitions per sequence. The merge program of a (sequence, query head) walks its partitions one after
the other, twice, and the partials take ``B * H_q * partitions * D * 4`` bytes; at the floor this binds only past
64k tokens."""

FALLBACK_PARTITION_TOKENS = 512
"""The size when nothing is known of the lengths: vLLM's ``paged_attention_v2`` partition, the old default."""

DEFAULT_SM_COUNT = 132
"""SMs assumed off a CUDA device (the CPU under Triton's interpreter, where SMs mean nothing): an H100's or
H200's 132, the GPU this course's benchmarks ran on, so tests here choose what that GPU would."""


def choose_partition_tokens(max_len: int | None, batch: int, num_kv_heads: int, block_size: int,
                            sm_count: int = DEFAULT_SM_COUNT, *, blocks_per_step: int = 1) -> int:
    """Tokens per partition for a batch of ``batch`` sequences, the longest ``max_len`` tokens.

    Sizes come from a ladder, ``tile * 2**k`` tokens with ``tile = blocks_per_step * block_size`` (one step
    of the kernel's loop), so a partition holds whole blocks and whole steps, and a serving loop whose
    lengths change every step compiles a few kernel variants, not one per length. The rule:

    1. Wanted partitions per sequence: ``ceil(PROGRAMS_PER_SM * sm_count / (batch * num_kv_heads))``,
       so that ``batch * num_kv_heads * partitions`` programs fill every SM (:data:`PROGRAMS_PER_SM`);
       at most :data:`MAX_PARTITIONS`.
    2. The partition covering ``max_len`` in that many pieces, rounded up to the ladder (so at most the
       wanted count, and at least half of it).
    3. At least :data:`MIN_PARTITION_TOKENS` (rounded up to the ladder), so the merge stays cheap.
    4. At most one partition's worth: the smallest ladder size holding ``max_len`` (a batch that fills the
       SMs by itself, or short sequences, get one partition each).

    ``max_len=None`` (nothing known) gives :data:`FALLBACK_PARTITION_TOKENS` rounded up to the ladder.
    All counts are positive ints (``max_len`` in tokens); ``blocks_per_step`` a power of two; a bad
    one raises TypeError/ValueError naming it.
    """
    batch = check_int("batch", batch, minimum=1)
    num_kv_heads = check_int("num_kv_heads", num_kv_heads, minimum=1)
    block_size = check_int("block_size", block_size, minimum=1)
    sm_count = check_int("sm_count", sm_count, minimum=1)
    blocks_per_step = check_blocks_per_step(blocks_per_step)
    tile = blocks_per_step * block_size
    if max_len is None:
        return _ladder_up(FALLBACK_PARTITION_TOKENS, tile)
    max_len = check_int("max_len", max_len, minimum=1)

    wanted = min(math.ceil(PROGRAMS_PER_SM * sm_count / (batch * num_kv_heads)), MAX_PARTITIONS)
    tokens = _ladder_up(math.ceil(max_len / wanted), tile)
    tokens = max(tokens, _ladder_up(MIN_PARTITION_TOKENS, tile))
    return min(tokens, _ladder_up(max_len, tile))


def check_blocks_per_step(blocks_per_step) -> int:
    """``blocks_per_step`` as an int: a power of two (the tile's side is ``blocks_per_step * S``, and
    ``tl.arange`` takes powers of two), else TypeError/ValueError naming it."""
    blocks_per_step = check_int("blocks_per_step", blocks_per_step, minimum=1)
    if blocks_per_step & (blocks_per_step - 1):
        raise ValueError(f"blocks_per_step must be a power of two (a tile side), got {blocks_per_step}")
    return blocks_per_step


def sm_count(device: torch.device | str | None) -> int:
    """Streaming multiprocessors of ``device`` when it is a CUDA device, else :data:`DEFAULT_SM_COUNT`."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type != "cuda":
        return DEFAULT_SM_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


def _ladder_up(tokens: int, tile: int) -> int:
    """The smallest ``tile * 2**k`` (k >= 0) that is at least ``tokens``."""
    steps = max(1, math.ceil(tokens / tile))
    return tile * (1 << (steps - 1).bit_length())
