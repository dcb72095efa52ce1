"""Play a ledger batch (:class:`~pagedkv_lib.ledger.Request`: a prefix, then an own tail) on the
real allocators, so lessons and figures can show live state instead of the teaching ledger.

Every request is admitted with its prefix as the prompt (its first tail token when it has no
prefix), and then all requests decode together: each step appends one tail token to every
request that has one left, as a continuous-batching server does, so their blocks interleave in
the pool. With sharing, a group's members are continuations of one prompt (parallel sampling):
the first member is admitted, the others :meth:`~pagedkv_lib.blocks.manager.BlockManager.fork` it. ``steps`` stops the batch part way
(each request then holds ``prefix + min(steps, tail)`` tokens), so a contiguous arena can show
the slots it still holds for tokens to come.

Token ids are made up: a group's prefix tokens are equal for all its members and differ from
every other token, and each tail's tokens are its own.
"""
from __future__ import annotations

from typing import Iterable

from ..validation import check_int
from ..blocks.manager import BlockManager
from ..blocks.contiguous import ContiguousArena
from ..ledger import Request, _requests

__all__ = ["live_tokens", "play_paged", "play_contiguous"]


def _token_ids(reqs: list[Request]) -> dict[str, tuple[list[int], list[int]]]:
    """``{id: (prefix token ids, tail token ids)}``; equal prefixes only within a group."""
    groups: dict[str | None, int] = {}
    out = {}
    for n, r in enumerate(reqs):
        owner = groups.setdefault(r.group, len(groups)) if r.group is not None else len(reqs) + n
        out[r.id] = ([1_000 * (owner + 1) + i for i in range(r.prefix)],
                     [1_000_000 * (n + 1) + i for i in range(r.tail)])
    return out


def live_tokens(requests: Iterable[Request], steps: int | None = None) -> dict[str, int]:
    """Tokens each request holds after ``steps`` decode steps (``None``: the whole tail)."""
    reqs = _requests(requests)
    if steps is not None:
        steps = check_int("steps", steps, minimum=0)
    live = {r.id: r.prefix + (r.tail if steps is None else min(steps, r.tail)) for r in reqs}
    empty = [rid for rid, t in live.items() if t == 0]
    if empty:
        raise ValueError(f"request {empty[0]!r} would hold no tokens after steps={steps}: give it a "
                         f"prefix, or take at least one step")
    return live


def play_paged(requests: Iterable[Request], block_size: int, *, share: bool = True,
               steps: int | None = None, num_blocks: int | None = None) -> BlockManager:
    """A :class:`BlockManager` holding the batch; ``share=False`` gives every request its own blocks.

    ``num_blocks`` defaults to enough for the batch stored without sharing, plus one block per
    request for a copy-on-write copy.
    """
    reqs = _requests(requests)
    S = check_int("block_size", block_size, minimum=1)
    if not isinstance(share, bool):
        raise TypeError(f"share must be True or False, got {share!r}")
    live = live_tokens(reqs, steps)
    if num_blocks is None:
        num_blocks = sum(-(-r.tokens // S) + 1 for r in reqs)
    manager = BlockManager(num_blocks, S, enable_prefix_caching=share)
    ids, first = _token_ids(reqs), {}
    for r in reqs:
        prefix, tail = ids[r.id]
        if share and (r.group, r.prefix) in first:
            manager.fork(first[r.group, r.prefix], r.id)
        else:
            manager.add_request(r.id, prefix or tail[:1])
            if r.group is not None and r.prefix:
                first.setdefault((r.group, r.prefix), r.id)
    while True:  # decode steps: each unfinished request appends one token per step
        stepped = False
        for r in reqs:
            done = manager.num_tokens(r.id)
            if done < live[r.id]:
                manager.append_tokens(r.id, [ids[r.id][1][done - r.prefix]])
                stepped = True
        if not stepped:
            return manager


def play_contiguous(requests: Iterable[Request], policy: str = "max", max_len: int = 32, *,
                    steps: int | None = None, num_slots: int | None = None) -> ContiguousArena:
    """A :class:`ContiguousArena` that admitted the batch in order; each run is reserved for the
    request's final length ``prefix + tail`` under ``policy``, and holds its live tokens.

    ``num_slots`` defaults to the sum of the reservations (no free slot left).
    """
    reqs = _requests(requests)
    probe = ContiguousArena(1, policy, max_len)  # checks policy and max_len
    live = live_tokens(reqs, steps)
    if num_slots is None:
        num_slots = sum(probe.reservation_for(r.tokens) for r in reqs)
    arena = ContiguousArena(num_slots, policy, max_len)
    for r in reqs:
        arena.admit(r.id, live[r.id], r.tokens)
    return arena
