"""Paged decode attention split along the sequence: vLLM's ``paged_attention_v2`` idea in Triton.

:mod:`.triton_decode` runs one program per (sequence, KV head), which walks every block of its
sequence in turn. With few sequences and long contexts that is few programs, each with a long
serial loop, and most of the GPU waits. Here each sequence is cut into *partitions* of
``partition_tokens`` tokens (vLLM's v2 kernel uses 512; here chosen by default from the batch and the
device's SMs, :mod:`.partition_size`), one program per (sequence, KV head,
partition), and each program writes a partial result: its running max ``m``, sum ``l`` and
unnormalised accumulator ``acc``. A second step merges a sequence's partials exactly as the online
softmax merges blocks: rescale each by ``2 ** (m_p - max_p m_p)``, add, divide by the summed ``l``.
:func:`merge_partitions` says it in torch; the kernels use :func:`_merge_partitions_kernel`, the same in
one launch (on a GPU the torch version's nine small kernels cost more than the merge's arithmetic).

The loop inside a partition is :func:`~.triton_decode._paged_decode_kernel`'s, over a range of
blocks; read that kernel first. Same contract, checks and tolerances as
:func:`~.triton_decode.paged_decode_triton`; ``tests/test_triton_attention.py`` holds both to the
same reference, and ``benchmarks/triton_attention.py`` times both in one run on a GPU.
"""
from __future__ import annotations

import torch

from ..validation import check_int
from .partition_size import check_blocks_per_step, choose_partition_tokens, sm_count
from .spec import check_scale
# First: without Triton this import raises the library's message on how to install it.
from .triton_decode import _LOG2_E, _check_device_mode, _check_inputs, _padded

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["VLLM_PARTITION_TOKENS", "chosen_partition_tokens", "merge_partitions", "paged_decode_triton_split"]

VLLM_PARTITION_TOKENS = 512
"""Tokens per partition in vLLM's ``paged_attention_v2``: its Python wrappers' ``_PARTITION_SIZE``, which must equal
``PARTITION_SIZE`` in ``paged_attention_v2_launcher``."""


@triton.jit
def _paged_decode_partition_kernel(
    q_ptr, k_ptr, v_ptr, acc_ptr, m_ptr, l_ptr, block_tables_ptr, seq_lens_ptr,
    scale_log2,
    stride_qb, stride_qh, stride_qd,
    stride_kn, stride_ks, stride_kh, stride_kd,
    stride_vn, stride_vs, stride_vh, stride_vd,
    stride_tb, stride_tj, stride_len,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAD_GROUP: tl.constexpr, PAD_BLOCK: tl.constexpr, PAD_DIM: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, BLOCKS_PER_PARTITION: tl.constexpr, BLOCKS_PER_STEP: tl.constexpr,
):
    """One program = sequence ``b`` x KV head ``h`` x partition ``p``: blocks ``p*P .. p*P+P-1`` only.

    Each step reads ``BLOCKS_PER_STEP`` blocks as one tile of ``BLOCKS_PER_STEP * PAD_BLOCK`` rows: row
    ``r`` is slot ``r % PAD_BLOCK`` of the step's block ``r // PAD_BLOCK``, found through the table.
    With one block per step this is the single-pass kernel's step; more blocks give each load and
    each ``tl.dot`` a taller tile and the loop fewer turns (what vLLM's and FlashInfer's kernels do).

    Writes, per query head of the group, ``m`` and ``l`` to ``[B, H_q, num_partitions]`` and ``acc``
    to ``[B, H_q, num_partitions, D]`` (fp32, contiguous). A partition past the sequence's last block
    runs no step and writes ``m = -inf, l = 0, acc = 0``, which the merge weighs by zero.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    num_parts = tl.num_programs(2)

    g = tl.arange(0, PAD_GROUP)
    r = tl.arange(0, BLOCKS_PER_STEP * PAD_BLOCK)  # a row of the step's tile
    step_block = r // PAD_BLOCK                    # which of the step's blocks it is in
    s = r % PAD_BLOCK                              # its slot in that block
    d = tl.arange(0, PAD_DIM)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM

    q_heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + d[None, :] * stride_qd,
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)

    seq_len = tl.load(seq_lens_ptr + seq * stride_len)
    first = part * BLOCKS_PER_PARTITION
    last = tl.minimum(first + BLOCKS_PER_PARTITION, tl.cdiv(seq_len, BLOCK_SIZE))

    m = tl.full([PAD_GROUP], float("-inf"), tl.float32)
    l = tl.zeros([PAD_GROUP], tl.float32)
    acc = tl.zeros([PAD_GROUP, PAD_DIM], tl.float32)

    for j0 in range(first, last, BLOCKS_PER_STEP):  # the single-pass kernel's step, over a taller tile
        j = j0 + step_block                              # each row's logical block
        slot_ok = (s < BLOCK_SIZE) & (j < last) & (j * BLOCK_SIZE + s < seq_len)
        block_id = tl.load(block_tables_ptr + seq * stride_tb + j * stride_tj, mask=j < last, other=0).to(tl.int64)
        kv_mask = slot_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + block_id[:, None] * stride_kn + s[:, None] * stride_ks + kv_head * stride_kh
                    + d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + block_id[:, None] * stride_vn + s[:, None] * stride_vs + kv_head * stride_vh
                    + d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * scale_log2
        scores = tl.where(slot_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
        m = m_new

    # Index into [B, H_q, parts]; int64, since times D it can pass 2**31 for a large batch.
    row = ((seq * (tl.num_programs(1) * GROUP) + q_heads) * num_parts + part).to(tl.int64)
    tl.store(m_ptr + row, m, mask=g_ok)
    tl.store(l_ptr + row, l, mask=g_ok)
    tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=g_ok[:, None] & d_ok[None, :])


def merge_partitions(acc: torch.Tensor, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Merge per-partition online-softmax states into attention outputs (fp32).

    ``acc`` ``[..., P, D]`` unnormalised sums of ``2 ** (score - m) * v``; ``m`` ``[..., P]`` running max
    of the scores in log2 units (``-inf`` for a partition with no token); ``l`` ``[..., P]`` sums of
    ``2 ** (score - m)``. Each partition is rescaled to the largest ``m``, as the online softmax
    rescales when its max grows, then the sums are added and divided.
    """
    weight = torch.exp2(m - m.amax(dim=-1, keepdim=True))  # 0 where m = -inf
    return (weight[..., None] * acc).sum(dim=-2) / (weight * l).sum(dim=-1)[..., None]


@triton.jit
def _merge_partitions_kernel(acc_ptr, m_ptr, l_ptr, out_ptr, num_parts,
                             stride_ob, stride_oh, stride_od,
                             HEAD_DIM: tl.constexpr, PAD_DIM: tl.constexpr):
    """:func:`merge_partitions` in one launch: one program = sequence ``b`` x query head, its partitions in turn.

    Partition 0 always holds the sequence's first block (``T >= 1``), so its ``m`` is finite and a fine
    start for the largest ``m``.
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, PAD_DIM)
    d_ok = d < HEAD_DIM
    row0 = (seq * tl.num_programs(1) + head).to(tl.int64) * num_parts

    m_max = tl.load(m_ptr + row0)
    for p in range(1, num_parts):
        m_max = tl.maximum(m_max, tl.load(m_ptr + row0 + p))
    num = tl.zeros([PAD_DIM], tl.float32)
    den = tl.full([], 0.0, tl.float32)
    for p in range(0, num_parts):
        weight = tl.exp2(tl.load(m_ptr + row0 + p) - m_max)  # 0 for a partition with no token
        num += weight * tl.load(acc_ptr + (row0 + p) * HEAD_DIM + d, mask=d_ok, other=0.0)
        den += weight * tl.load(l_ptr + row0 + p)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + d * stride_od,
             (num / den).to(out_ptr.dtype.element_ty), mask=d_ok)


def paged_decode_triton_split(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              block_tables: torch.Tensor, seq_lens: torch.Tensor, *,
                              scale: float | None = None,
                              partition_tokens: int | str | None = None,
                              blocks_per_step: int = 1) -> torch.Tensor:
    """:func:`~.triton_decode.paged_decode_triton`, computed in partitions of ``partition_tokens``.

    Same arguments, checks, result and tolerances; ``partition_tokens`` must be a positive multiple
    of the block size (a partition holds whole blocks), or ``None``/``"auto"`` (the default) for
    :func:`~.partition_size.choose_partition_tokens`'s choice from the table's width, the batch, the KV
    heads and the device's SMs. Partitions per sequence:
    ``ceil(block_tables.shape[1] * S / partition_tokens)``, from the table's width, so the host never
    waits for ``seq_lens``. ``blocks_per_step`` (a power of two) blocks are read per step of the loop, as
    one tile; the result is the same for any.
    """
    _check_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    block_size = k_cache.shape[1]
    blocks_per_step = check_blocks_per_step(blocks_per_step)
    if partition_tokens is None or isinstance(partition_tokens, str):
        if partition_tokens not in (None, "auto"):
            raise ValueError(f"partition_tokens must be None or 'auto' (chosen from the batch) or a positive "
                             f"multiple of the block size {block_size}, got {partition_tokens!r}")
        partition_tokens = chosen_partition_tokens(q, k_cache, block_tables, blocks_per_step)
    partition_tokens = check_int("partition_tokens", partition_tokens, minimum=block_size)
    if partition_tokens % block_size:
        raise ValueError(f"partition_tokens must be a multiple of the block size {block_size}, "
                         f"got {partition_tokens}")
    return _launch_unchecked(q, k_cache, v_cache, block_tables, seq_lens, scale, partition_tokens,
                             blocks_per_step=blocks_per_step)


def chosen_partition_tokens(q, k_cache, block_tables, blocks_per_step: int = 1) -> int:
    """The default partition size for these tensors: :func:`~.partition_size.choose_partition_tokens` with
    the table's width as the longest length (known on the host, as the partition count is), the batch, the
    KV heads, the block size and the SMs of ``q``'s device. No GPU sync; an empty batch or table gets the
    fallback size."""
    batch, block_size, width = q.shape[0], k_cache.shape[1], block_tables.shape[1]
    max_len = width * block_size if batch and width else None
    return choose_partition_tokens(max_len, max(batch, 1), k_cache.shape[2], block_size, sm_count(q.device),
                                   blocks_per_step=blocks_per_step)


def _launch_unchecked(q, k_cache, v_cache, block_tables, seq_lens, scale: float,
                      partition_tokens: int = VLLM_PARTITION_TOKENS, *, blocks_per_step: int = 1) -> torch.Tensor:
    """The two steps alone, for arguments :func:`paged_decode_triton_split` would accept: the partition
    kernel, then :func:`merge_partitions` as one Triton launch (in torch it is about nine small kernels)."""
    _check_device_mode(q)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if q.shape[0] == 0:
        return out
    acc, m, l = _partials(q, k_cache, v_cache, block_tables, seq_lens, scale, partition_tokens, blocks_per_step)
    batch, num_q_heads, head_dim = q.shape
    _merge_partitions_kernel[(batch, num_q_heads)](acc, m, l, out, m.shape[-1], *out.stride(),
                                                   HEAD_DIM=head_dim, PAD_DIM=_padded(head_dim))
    return out


def _partials(q, k_cache, v_cache, block_tables, seq_lens, scale: float,
              partition_tokens: int, blocks_per_step: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The partition kernel's ``(acc, m, l)``: ``[B, H_q, P, D]``, ``[B, H_q, P]`` and ``[B, H_q, P]``, fp32
    (``B >= 1``; the tensors where the kernel can run: :func:`_launch_unchecked` checks)."""
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    blocks_per_partition = partition_tokens // block_size
    parts = triton.cdiv(block_tables.shape[1], blocks_per_partition)
    acc = torch.empty(batch, num_q_heads, parts, head_dim, dtype=torch.float32, device=q.device)
    m = torch.empty(batch, num_q_heads, parts, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    group = num_q_heads // num_kv_heads
    _paged_decode_partition_kernel[(batch, num_kv_heads, parts)](
        q, k_cache, v_cache, acc, m, l, block_tables, seq_lens,
        scale * _LOG2_E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(), *seq_lens.stride(),
        GROUP=group, BLOCK_SIZE=block_size, HEAD_DIM=head_dim,
        PAD_GROUP=_padded(group), PAD_BLOCK=_padded(block_size), PAD_DIM=_padded(head_dim),
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        BLOCKS_PER_PARTITION=blocks_per_partition, BLOCKS_PER_STEP=blocks_per_step,
    )
    return acc, m, l
