"""The teaching ledger's idealised rule beside the real block manager, for the problem sets that grade it.

The ledger (:func:`pagedkv_lib.ledger.allocate`) starts every tail in a fresh block, even when the shared
prefix's last block has room: a table with a hole in the middle, which no real cache can address. The
real manager (:class:`pagedkv_lib.blocks.manager.BlockManager`, vLLM's semantics, played by
:func:`.replay.play_paged`) shares a fork's partly filled block until the first write and then copies
it. A set that grades the ledger's count shows this table next to the question, computed now.
"""
from __future__ import annotations

from ..ledger import PAGE_BATCH, allocate
from ..validation import check_int
from .replay import play_paged

__all__ = ["ledger_beside_manager"]


def ledger_beside_manager(block_size: int = 8):
    """A markdown table: A1-A3 (the lessons' batch) stored by the ledger's rule and by the real
    manager at ``block_size`` tokens per block (an int >= 1): blocks, slots and token states, each
    counted in token slots except the blocks."""
    from IPython.display import Markdown
    S = check_int("block_size", block_size, minimum=1)
    rule, real = allocate(PAGE_BATCH, S), play_paged(PAGE_BATCH, S).stats()
    rows = [("blocks in use", rule.reserved_slots // S, real.used_blocks),
            ("reserved slots", rule.reserved_slots, real.reserved_slots),
            ("token states stored", rule.unique_tokens, real.unique_tokens),
            ("slack (empty slots)", rule.slack, real.slack)]
    return Markdown(f"A1-A3 at S = {S}, computed now:\n\n| | the ledger's rule (graded) | the real manager |\n"
                    "|---|---|---|\n" + "\n".join(f"| {name} | {a} | {b} |" for name, a, b in rows))
