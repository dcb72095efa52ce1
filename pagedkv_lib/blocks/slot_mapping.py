"""Flat cache slots from block tables, for a whole batch: ``slot = table[p // S] * S + p % S``.

A batch's block tables arrive as one padded int array (see
:meth:`pagedkv_lib.blocks.manager.BlockManager.padded_block_tables`), so the mapping is a few numpy
operations rather than a loop over requests.
"""
from __future__ import annotations

import numpy as np

from ..validation import check_int, check_int_array


def table_slots(table: list[int], positions: np.ndarray, block_size: int) -> np.ndarray:
    """Flat slots of ``positions`` (int64, each in ``[0, T)``) of one request with block table ``table``."""
    S = block_size
    return np.asarray(table, dtype=np.int64)[positions // S] * S + positions % S


def padded_tables(tables: list[list[int]], pad: int) -> np.ndarray:
    """``tables`` as one int64 array ``(len(tables), longest)``, short rows filled with ``pad``."""
    out = np.full((len(tables), max(map(len, tables), default=0)), pad, dtype=np.int64)
    for row, table in enumerate(tables):
        out[row, :len(table)] = table
    return out


def slot_mapping_batch(block_tables, positions, block_size: int) -> np.ndarray:
    """Flat cache slots for a batch: ``block_tables[i, p // S] * S + p % S`` for each ``p`` in row i.

    ``block_tables`` is an int array ``(B, max_blocks)`` (rows padded with any negative value,
    see :meth:`BlockManager.padded_block_tables`); ``positions`` is ``(B,)`` (one position per
    request, as in decode) or ``(B, P)``. A position of ``-1`` marks padding and maps to slot
    ``-1``; it reads no block, so an empty batch (``B = 0``) or a table with no columns is fine
    as long as every position is padding. Returns int64 of ``positions``' shape.
    """
    S = check_int("block_size", block_size, minimum=1)
    tables = check_int_array("block_tables", block_tables)
    pos = check_int_array("positions", positions)
    if tables.ndim != 2:
        raise ValueError(f"block_tables must be 2-D (requests, blocks), got shape {tables.shape}")
    if pos.ndim not in (1, 2) or pos.shape[0] != tables.shape[0]:
        raise ValueError(f"positions must have shape ({tables.shape[0]},) or ({tables.shape[0]}, P) "
                         f"to match block_tables {tables.shape}, got {pos.shape}")
    if pos.size and pos.min() < -1:
        raise ValueError(f"positions must be >= 0 (or -1 for padding), got {pos.min()}")
    pos2 = pos[:, None] if pos.ndim == 1 else pos
    pad = pos2 < 0
    safe = np.where(pad, 0, pos2)  # padding reads position 0; its slot is set to -1 below
    idx = safe // S
    if not pad.all() and idx[~pad].max() >= tables.shape[1]:
        raise ValueError(f"a position needs logical block {idx[~pad].max()}, but block_tables have only "
                         f"{tables.shape[1]} columns")
    if tables.shape[1] == 0:  # every position is padding (checked above): nothing to read
        return np.full(pos.shape, -1, dtype=np.int64)
    blocks = np.take_along_axis(tables, idx, axis=1)
    if np.any(blocks[~pad] < 0):
        raise ValueError("a position maps to a padding entry of block_tables (a negative block id)")
    slots = np.where(pad, -1, blocks * S + safe % S)
    return slots.reshape(pos.shape)
