"""Beam search in paged memory: ``k`` beams of equal length that pick their parents every step.

Each step the ``k`` new beams choose parents uniformly at random with replacement (a neutral
model of a beam search's choices); a parent no beam chose is freed, a parent chosen twice is
forked (with sharing on: its blocks are shared and copied on write) or copied (sharing off).
Then every beam writes one token. Since parents change every step, beam groups advance token
by token, unlike independent samples. A beam group never writes the memory's levels: each call
returns the :class:`~.level_change.Change` it made.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..accounting import blocks_needed
from .level_change import Change

if TYPE_CHECKING:
    from .paged_memory import PagedMemory


class BeamGroup:
    """A running beam-search request: ``k`` beams of ``start_tokens`` tokens at step ``admitted_at``.

    ``names`` are the beams' ids in the block manager and ``history`` their token ids (each of
    length ``start_tokens + t - admitted_at`` before step ``t``); ``held`` is every id the group
    has in the manager (it differs from ``names`` only in the middle of a step), ``written`` the
    beams that already wrote this step's token (so a step retried after a preemption resumes),
    ``table_blocks`` the group's block-table entries.
    """

    __slots__ = ("request", "order", "sort_key", "names", "history", "held", "written", "start_tokens",
                 "admitted_at", "table_blocks", "alive")

    def __init__(self, request: int, order: int, history: list[list[int]], admitted_at: int):
        self.request, self.order, self.sort_key = request, order, (order, 0)
        self.history, self.admitted_at = history, admitted_at
        self.start_tokens = len(history[0])
        self.names: list[str] = []
        self.held: dict[str, None] = {}  # insertion-ordered, so frees happen in a fixed order
        self.written: dict[str, int] = {}
        self.table_blocks = 0
        self.alive = True

    @staticmethod
    def history_to_prefill(memory: PagedMemory, request: int) -> list[list[int]]:
        """The beams' token ids to prefill: kept from a preemption, or ``k`` references to the prompt."""
        kept = memory.beam_history.get(request)
        if kept is not None:
            return kept
        return [list(memory.token_ids.ids(request, 0, 0, memory.prompt[request]))] * memory.beam_width

    def admit(self, memory: PagedMemory, t: int) -> Change:
        """Prefill the beams (fresh beams fork the first one with sharing on), write a token, schedule the next step.

        If it raises ``OutOfBlocksError``, :meth:`drop` takes back everything it did.
        """
        manager, k = memory.manager, memory.beam_width
        fresh = all(h is self.history[0] for h in self.history)
        for i, history in enumerate(self.history):
            name = memory.new_name(self.request)
            if memory.sharing and fresh and i > 0:
                manager.fork(self.names[0], name)
            else:
                manager.add_request(name, history)
            self.names.append(name)
            self.held[name] = None
        grown = self.append_token(memory)
        self.schedule(memory, t)
        return Change(k, k * self.start_tokens, grown)

    def advance(self, memory: PagedMemory, t: int, preempted: list[int]) -> Change:
        """New beams pick parents uniformly at random with replacement; then each appends a token."""
        manager = memory.manager
        parents = memory.rng.integers(0, memory.beam_width, size=memory.beam_width).tolist()
        for i, name in enumerate(self.names):
            if i not in parents:
                manager.free(name)
                self.held.pop(name, None)
        names, history, seen = [], [], set()
        for parent in parents:
            if parent in seen:
                name = memory.new_name(self.request)
                copy = ((lambda p=parent, name=name: manager.fork(self.names[p], name)) if memory.sharing
                        else (lambda p=parent, name=name: manager.add_request(name, self.history[p])))
                if not memory.with_room(copy, self, t, preempted)[0]:
                    return Change()  # the preemption dropped the group
                self.held[name] = None
            else:
                seen.add(parent)
                name = self.names[parent]
            names.append(name)
            history.append(self.history[parent])
        self.names, self.history = names, history
        done, grown = memory.with_room(lambda: self.append_token(memory), self, t, preempted)
        if not done:
            return Change()
        self.schedule(memory, t)
        return Change(table_blocks=grown)

    def append_token(self, memory: PagedMemory) -> int:
        """Every beam writes one token; return the block-table entries added. Resumable: beams that
        already hold it are skipped on a retry."""
        tokens_before, written = len(self.history[0]), self.written
        for name in self.names:
            if name not in written:
                token = memory.token_ids.fresh()
                memory.manager.append_tokens(name, (token,))
                written[name] = token
        self.history = [h + [written[name]] for h, name in zip(self.history, self.names)]
        written.clear()
        table = memory.beam_width * blocks_needed(tokens_before + 1, memory.block_size)
        grown, self.table_blocks = table - self.table_blocks, table
        return grown

    def schedule(self, memory: PagedMemory, t: int) -> None:
        """Step again at ``t + 1``, or finish then if the beams have generated the whole output."""
        generated = len(self.history[0]) - memory.prompt[self.request]
        calendar = memory.grow if generated < memory.output[self.request][0] else memory.finish
        calendar.schedule(t + 1, self)

    def finish(self, memory: PagedMemory, t: int) -> tuple[int, Change]:
        """The beams wrote their last token at step ``t - 1``: free them all; return the request and the change."""
        return self.request, self.drop(memory, t)

    def progress(self, memory: PagedMemory, t: int) -> list[list[int]]:
        """Before a preemption at step ``t``: each beam's token ids, to prefill again on readmission."""
        return [h[:self.start_tokens + t - self.admitted_at] for h in self.history]

    def drop(self, memory: PagedMemory, t: int, hand_over: bool = True) -> Change:
        """Free every id the group holds, as of step ``t``; the change takes the whole group out of the levels.

        ``hand_over`` is unused: beams hand every token to the manager the step they write it.
        """
        self.alive = False
        for name in self.held:
            memory.manager.free(name)
        k = memory.beam_width
        return Change(-k, -k * (self.start_tokens + t - self.admitted_at), -self.table_blocks)
