"""The bounds half of the fused kernel's argument check, compiled: may every program run unchecked?

:func:`.fused_decode.paged_decode_numba` calls :func:`tables_fit` where the tables and lengths are int64 CPU
tensors already, instead of the about 20 small torch calls of
:func:`pagedkv_lib.attention.validation.check_decode_inputs` (``benchmarks/RESULTS.md``, issue 39); where it is
False, that check runs and says what is wrong. This module imports numba.
"""
from __future__ import annotations

from numba import njit


@njit(nogil=True, cache=True)
def tables_fit(block_tables, seq_lens, num_blocks, block_size):
    """True when every program may run unchecked: each length is at least 1 token and fits its table row
    (``T <= max_blocks * S``), and each of its first ``ceil(T / S)`` entries names a block in ``[0, num_blocks)``.

    The bounds half of :func:`pagedkv_lib.attention.validation.check_decode_inputs` in one compiled pass, for
    int64 ``block_tables [B, max_blocks]`` and ``seq_lens [B]``; where it is False, that check says why. About
    20 small torch calls there, one call here (``benchmarks/RESULTS.md``); equal by test.
    """
    capacity = block_tables.shape[1] * block_size
    for b in range(seq_lens.shape[0]):
        T = seq_lens[b]
        if T < 1 or T > capacity:
            return False
        for j in range((T + block_size - 1) // block_size):
            if block_tables[b, j] < 0 or block_tables[b, j] >= num_blocks:
                return False
    return True
