"""What one call into a running request changed in the paged memory's levels.

The paged memory owns its levels (running sequences, logical tokens added at admissions minus
those dropped at frees, block-table entries); a request group never writes them. Each call into
a group returns a :class:`Change`, which the memory adds to its levels.
"""
from __future__ import annotations

from typing import NamedTuple


class Change(NamedTuple):
    """Differences in the levels, each in its own unit."""

    seqs: int = 0          # running sequences
    tokens: int = 0        # logical tokens added at admission (negative: dropped at a free)
    table_blocks: int = 0  # block-table entries summed over running sequences

    def plus(self, other: Change) -> Change:
        """Both changes, one after the other."""
        return Change(self.seqs + other.seqs, self.tokens + other.tokens, self.table_blocks + other.table_blocks)
