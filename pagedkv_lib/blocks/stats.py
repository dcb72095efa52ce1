"""A snapshot of a block manager's counts and ledger figures: :meth:`BlockManager.stats`.

Ledger figures (:meth:`BlockManager.stats`) use the subject page's symbols: logical tokens
``sum_i T_i``; unique tokens = token states physically stored (a block shared by several
tables counts once; a copy-on-write copy counts again); reserved slots ``R = S * used_blocks``;
slack ``W = R - unique``. They equal :func:`pagedkv_lib.ledger.allocate`'s figures when every
shared prefix fills whole blocks. When a shared prefix ends inside a block they differ: the
ledger stores the prefix once, while this manager (like vLLM) shares only full blocks, so each
further member stores the ``prefix % S`` tokens of the partial block again (a cache miss for a
prompt, a copy-on-write for a fork).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ledger import ledger_summary


@dataclass(frozen=True)
class AllocatorStats:
    """A snapshot of a :class:`BlockManager`. Blocks in blocks, tokens in tokens, slots in token slots.

    ``prefix_*``, ``cow_copies``, ``evictions`` and ``blocks_allocated``/``blocks_freed`` count
    since the manager was made (``blocks_allocated`` counts every block taken out of the free
    queue, including cached free blocks a prefix hit brings back); the rest describe the state now.
    """

    num_blocks: int
    block_size: int
    num_requests: int
    used_blocks: int
    free_blocks: int
    cached_free_blocks: int
    prefix_queries_tokens: int
    prefix_hit_tokens: int
    cow_copies: int
    evictions: int
    blocks_allocated: int
    blocks_freed: int
    logical_tokens: int
    unique_tokens: int
    reserved_slots: int
    slack: int

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache per prompt token admitted (0.0 before any)."""
        return self.prefix_hit_tokens / self.prefix_queries_tokens if self.prefix_queries_tokens else 0.0

    def summary(self) -> dict[str, int]:
        """The four ledger figures under the names :meth:`pagedkv_lib.ledger.Ledger.summary` uses."""
        return ledger_summary(self.logical_tokens, self.unique_tokens, self.reserved_slots, self.slack)
