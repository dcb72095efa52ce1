"""Block tables <-> FlashInfer's CSR page lists: two spellings of the same mapping.

A batch of ``B`` requests can name its KV pages in two ways:

* padded block tables ``[B, max_blocks]`` plus lengths ``seq_lens[B]`` (tokens), as vLLM does;
* compressed sparse rows, as FlashInfer does: ``kv_indptr[B + 1]`` (offsets into the page list),
  ``kv_indices[sum_i N_i]`` (physical page ids, request after request) and
  ``kv_last_page_len[B]`` (tokens in each request's last page, in ``[1, S]``).

They agree through ``N_i = ceil(T_i / S)`` and ``T_i = S * (N_i - 1) + last_page_len_i``.
Every request holds at least one token (``T_i >= 1``): CSR has no way to say "zero pages"
and still give a last-page length in ``[1, S]``. Outputs are ``torch.int32`` like FlashInfer's.
Inputs are read with the attention module's helpers (:func:`~pagedkv_lib.attention.validation.index_tensor`,
:func:`~pagedkv_lib.attention.validation.blocks_in_use`), so both accept and refuse the same tables.
"""
from __future__ import annotations

import torch

from ..validation import check_int
from .spec import PAD_BLOCK
from .validation import blocks_in_use, index_tensor

__all__ = ["to_csr", "from_csr"]

_INT32_MAX = 2**31 - 1


def to_csr(block_tables, seq_lens, block_size: int):
    """Turn padded block tables ``[B, max_blocks]`` and lengths ``[B]`` (tokens) into CSR.

    Returns ``(kv_indptr [B+1], kv_indices [sum N_i], kv_last_page_len [B])``; only the first
    ``N_i = ceil(T_i / S)`` entries of row ``i`` are read, so padding may hold anything. Those
    entries must be block ids in ``[0, 2**31 - 1]``: the outputs are int32, and a larger id
    would wrap around instead of naming its block.
    """
    S = check_int("block_size", block_size, minimum=1)
    tables = index_tensor("block_tables", block_tables, 2)
    lens = index_tensor("seq_lens", seq_lens, 1)
    n_blocks, used = blocks_in_use(tables, lens, S)
    indptr = torch.zeros(lens.shape[0] + 1, dtype=torch.int64, device=lens.device)
    indptr[1:] = torch.cumsum(n_blocks, 0)
    last_page_len = lens - S * (n_blocks - 1)
    indices = tables[used]
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) > _INT32_MAX):
        bad = indices[(indices < 0) | (indices > _INT32_MAX)].tolist()
        raise ValueError(f"block_tables {tuple(tables.shape)} names block ids {bad[:8]} within seq_lens "
                         f"{lens.tolist()}: the entries a length uses must be block ids in "
                         f"[0, {_INT32_MAX}] (int32), only entries past them may be padding")
    for out_name, out in (("kv_indptr", indptr), ("kv_last_page_len", last_page_len)):
        if out.numel() and int(out.max()) > _INT32_MAX:
            raise ValueError(f"seq_lens {lens.tolist()} with block_size={S} give {out_name} values up to "
                             f"{int(out.max())}, past int32's {_INT32_MAX}")
    return indptr.to(torch.int32), indices.to(torch.int32), last_page_len.to(torch.int32)


def from_csr(kv_indptr, kv_indices, kv_last_page_len, block_size: int, *, max_blocks: int | None = None):
    """Turn CSR page lists back into ``(block_tables [B, max_blocks], seq_lens [B])`` (int64).

    Rows are padded with ``PAD_BLOCK`` past each request's last page; ``max_blocks`` defaults
    to the longest request's page count.
    """
    S = check_int("block_size", block_size, minimum=1)
    indptr = index_tensor("kv_indptr", kv_indptr, 1)
    indices = index_tensor("kv_indices", kv_indices, 1)
    last = index_tensor("kv_last_page_len", kv_last_page_len, 1)
    if indptr.shape[0] != last.shape[0] + 1:
        raise ValueError(f"kv_indptr has shape {tuple(indptr.shape)} but kv_last_page_len has shape "
                         f"{tuple(last.shape)}: kv_indptr needs one entry more (B + 1)")
    n_blocks = indptr[1:] - indptr[:-1]
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0] or (n_blocks.numel() and int(n_blocks.min()) < 1):
        raise ValueError(f"kv_indptr must start at 0, rise by >= 1 page per request and end at "
                         f"len(kv_indices)={indices.shape[0]}, got {indptr.tolist()}")
    if last.numel() and (int(last.min()) < 1 or int(last.max()) > S):
        raise ValueError(f"kv_last_page_len must lie in [1, block_size={S}], got {last.tolist()}")
    if indices.numel() and int(indices.min()) < 0:
        raise ValueError(f"kv_indices must be block ids >= 0 (a negative id would read as {PAD_BLOCK} "
                         f"padding in the block tables), got {indices[indices < 0].tolist()[:8]}")
    longest = int(n_blocks.max()) if n_blocks.numel() else 0
    width = longest if max_blocks is None else check_int("max_blocks", max_blocks, minimum=longest)
    tables = torch.full((last.shape[0], width), PAD_BLOCK, dtype=torch.int64, device=indices.device)
    tables[torch.arange(width, device=indices.device) < n_blocks[:, None]] = indices
    return tables, S * (n_blocks - 1) + last
