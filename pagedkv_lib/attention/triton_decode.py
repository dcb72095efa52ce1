"""Paged decode attention as a Triton kernel that reads the block table itself.

Same contract as the torch reference in ``pagedkv_lib.attention.spec``: one query token per
sequence, keys and values stored in fixed-size physical blocks, a block table per sequence
mapping logical block ``j`` (tokens ``j*S .. j*S+S-1``) to a physical block id. Paging
changes where K and V live, never the result.

Runs compiled on a GPU, or on the CPU under Triton's interpreter. ``triton.jit`` picks the
interpreter when a function is *defined*: Triton's own helpers (``tl.sum``, ``tl.max``) when
``triton`` is first imported, this kernel when this module is. So set ``TRITON_INTERPRET=1``
before anything in the process imports triton; :data:`INTERPRETED` records what you got.

Optional dependency: ``python -m pip install triton`` (Linux only). No other module of the library
imports this one, so the rest works without Triton.
"""
from __future__ import annotations

import torch

from .spec import check_decode_inputs, check_scale

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError as exc:  # pragma: no cover - exercised by a test that hides triton
    raise ImportError(
        "pagedkv_lib.attention.triton_decode needs Triton, which is an optional dependency: "
        "install it with `python -m pip install triton` (wheels for Linux only). "
        "The torch versions in pagedkv_lib.attention.spec need no Triton."
    ) from exc

__all__ = ["INTERPRETED", "paged_decode_triton"]

# tl.dot on a GPU needs every tile side to be at least 16; smaller sides are padded and masked.
# Padding costs matrix-unit work, not memory traffic, and decode is bound by reading K and V.
_MIN_TILE = 16
_LOG2_E = 1.4426950408889634  # exp(x) == exp2(x * log2(e)); exp2 is the cheap instruction


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_tables_ptr, seq_lens_ptr,
    scale_log2,
    stride_qb, stride_qh, stride_qd,
    stride_kn, stride_ks, stride_kh, stride_kd,
    stride_vn, stride_vs, stride_vh, stride_vd,
    stride_ob, stride_oh, stride_od,
    stride_tb, stride_tj, stride_len,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAD_GROUP: tl.constexpr, PAD_BLOCK: tl.constexpr, PAD_DIM: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program = one sequence ``b`` x one KV head ``h``, serving its GROUP query heads.

    What program (b, h) touches, for T = seq_lens[b] tokens in N = ceil(T / S) blocks::

        q[b, h*G : h*G+G, :]              one [G, D] tile, read once
        block_tables[b, 0:N]              one block id per step:  [ 7 | 2 | 9 | junk.. ]
                                                                    |   |   |
        k_cache / v_cache  block 0        [ . . . . ]               |   |   |
                           block 2        [ # # # # ]  step 1  <----+---'   |
                           block 7        [ # # # # ]  step 0  <----'       |
                           block 9        [ # # # . ]  step 2  <------------'
                                            rows are token slots s = 0..S-1, each a [D]
                                            vector of head h; rows with j*S + s >= T masked
        out[b, h*G : h*G+G, :]            one [G, D] tile, written once

    K and V of a sequence are read once per KV head and shared by its G query heads (GQA),
    and never gathered into a contiguous copy: each step holds one [S, D] tile of each.
    The softmax is online: a running max ``m`` and sum ``l`` per query head, in fp32 and in
    log2 units, rescale the fp32 accumulator whenever the max grows.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)

    g = tl.arange(0, PAD_GROUP)  # query head kv_head*GROUP + g; rows g >= GROUP are padding
    s = tl.arange(0, PAD_BLOCK)  # token slot inside a block; slots s >= BLOCK_SIZE are padding
    d = tl.arange(0, PAD_DIM)    # feature; d >= HEAD_DIM is padding
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM

    q_heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + d[None, :] * stride_qd,
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)

    seq_len = tl.load(seq_lens_ptr + seq * stride_len)  # T >= 1, checked on the host
    num_blocks = tl.cdiv(seq_len, BLOCK_SIZE)

    m = tl.full([PAD_GROUP], float("-inf"), tl.float32)  # running max of scores (log2 units)
    l = tl.zeros([PAD_GROUP], tl.float32)                # running sum of exp2(score - m)
    acc = tl.zeros([PAD_GROUP, PAD_DIM], tl.float32)     # running sum of exp2(score - m) * v

    for j in range(0, num_blocks):
        # int64: block_id * stride_kn can pass 2**31 elements in a large cache.
        block_id = tl.load(block_tables_ptr + seq * stride_tb + j * stride_tj).to(tl.int64)
        slot_ok = (s < BLOCK_SIZE) & (j * BLOCK_SIZE + s < seq_len)
        kv_mask = slot_ok[:, None] & d_ok[None, :]

        # Request the block's K and V together, before the math, so their memory latencies overlap.
        k = tl.load(k_ptr + block_id * stride_kn + s[:, None] * stride_ks + kv_head * stride_kh
                    + d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + block_id * stride_vn + s[:, None] * stride_vs + kv_head * stride_vh
                    + d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * scale_log2
        # Every step has at least one valid slot (j*S < T), so m_new is finite.
        scores = tl.where(slot_ok[None, :], scores, float("-inf"))

        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp2(m - m_new)  # 0 on the first step, where m = -inf
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)

        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
        m = m_new

    out = acc / l[:, None]
    tl.store(out_ptr + seq * stride_ob + q_heads[:, None] * stride_oh + d[None, :] * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])


_KERNEL_INTERPRETED = isinstance(_paged_decode_kernel, InterpretedFunction)
_HELPERS_INTERPRETED = isinstance(tl.sum, InterpretedFunction)  # fixed when triton was first imported
#: True when the kernel runs on the CPU under Triton's interpreter (TRITON_INTERPRET=1 set in time).
INTERPRETED: bool = _KERNEL_INTERPRETED and _HELPERS_INTERPRETED


def paged_decode_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor, *,
                        scale: float | None = None) -> torch.Tensor:
    """Decode attention for a batch of sequences whose K/V live in paged blocks.

    ``q`` is ``[B, H_q, D]`` (one new token per sequence); ``k_cache`` and ``v_cache`` are
    ``[num_blocks, block_size S, H_kv, D]`` (NHD); ``block_tables`` is ``[B, max_blocks]``
    integers (int32 as vLLM keeps them, or int64) and row ``b`` lists the physical blocks of sequence ``b`` in logical order;
    ``seq_lens`` is ``[B]``, tokens per sequence, each in ``[1, max_blocks * S]``. Entries of a
    row past ``ceil(T / S)`` are never read and may hold anything (e.g. -1 padding).
    ``H_q`` must be a multiple of ``H_kv`` (grouped-query attention). ``scale`` defaults to
    ``1 / sqrt(D)``. Returns ``[B, H_q, D]`` in q's dtype. Bad arguments raise the same
    TypeError/ValueError, naming the shapes, as :func:`pagedkv_lib.attention.spec.paged_decode_gather`.

    Precision: scores, softmax and the accumulator are fp32; fp32 inputs use IEEE products in
    ``tl.dot`` (not TF32), so the result matches the torch reference to 1e-5. In fp16/bf16 the
    probabilities are rounded to the input dtype before ``P @ V`` (as FlashAttention does),
    within :data:`pagedkv_lib.attention.spec.TOLERANCES` of the fp32 result.
    """
    _check_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    scale = check_scale(scale, q.shape[-1])
    return _launch_unchecked(q, k_cache, v_cache, block_tables, seq_lens, scale)


def _launch_unchecked(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The kernel launch alone, for arguments :func:`paged_decode_triton` would accept.

    The checks copy the tables to the host and wait for the GPU; a serving loop that builds
    its tables itself skips them, and so does the benchmark that times the kernel. Bad
    arguments here read or write out of bounds instead of raising. Only the cheap check that
    the kernel can run where the tensors are (no GPU sync) is kept.
    """
    _check_device_mode(q)
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if batch == 0:
        return out
    group = num_q_heads // num_kv_heads
    grid = (batch, num_kv_heads)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, out, block_tables, seq_lens,
        scale * _LOG2_E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride(), *block_tables.stride(),
        *seq_lens.stride(),
        GROUP=group, BLOCK_SIZE=block_size, HEAD_DIM=head_dim,
        PAD_GROUP=_padded(group), PAD_BLOCK=_padded(block_size), PAD_DIM=_padded(head_dim),
        # fp32: IEEE products (TF32 would cost about 1e-3); fp16/bf16 products are exact anyway.
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out


def _padded(n: int) -> int:
    """Tile side for ``n``: a power of two (tl.arange needs one), at least 16 (tl.dot needs that)."""
    return max(_MIN_TILE, triton.next_power_of_2(n))


def _check_device_mode(q: torch.Tensor) -> None:
    """Fail early, and say what to do, when the kernel cannot run where the tensors are."""
    if _KERNEL_INTERPRETED != _HELPERS_INTERPRETED:
        raise RuntimeError(
            "TRITON_INTERPRET changed between the first `import triton` in this process and the "
            "import of pagedkv_lib.attention.triton_decode, so the kernel and Triton's own helpers were "
            "defined for different back ends. Set TRITON_INTERPRET=1 (CPU) or leave it unset (GPU) "
            "before anything imports triton, e.g. at the top of the script or in conftest.py.")
    if INTERPRETED or q.is_cuda:
        return
    where = ("move q, the caches, block_tables and seq_lens to the GPU, or "
             if torch.cuda.is_available() else
             "Triton finds no GPU driver here (a launch would fail with '0 active drivers'). ")
    raise RuntimeError(
        f"paged_decode_triton got tensors on {q.device}, but its Triton kernel was compiled for a "
        f"GPU: {where}To run it on the CPU under Triton's interpreter, set TRITON_INTERPRET=1 in "
        "the environment before triton is first imported in the process. The torch versions in "
        "pagedkv_lib.attention.spec need neither Triton nor a GPU.")


def _check_inputs(q, k_cache, v_cache, block_tables, seq_lens) -> None:
    """The torch reference's checks and messages, plus what a launch needs: tensors on one device."""
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor on q's device, got {type(t).__name__}")
    # Shapes, dtypes, GQA, lengths in [1, capacity], used block ids in range. The tables are
    # small, so they are checked on the CPU even when the kernel will read them on the GPU.
    check_decode_inputs(q, k_cache, v_cache, block_tables.cpu(), seq_lens.cpu())
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) != 1:
        raise ValueError(f"q, k_cache, v_cache, block_tables and seq_lens must be on one device, "
                         f"got {sorted(map(str, devices))}")
