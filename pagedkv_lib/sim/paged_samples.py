"""Requests with independent samples in paged memory: each sample calls the block manager once per block.

A sample's token count grows by one per step, but its block count changes only when a token
opens a new block. So a sample calls the manager only at the step it writes the first token
of a new block, handing over every token written since its last call up to and including
that one; when it finishes or is preempted it hands over the rest (which never needs a
block). The manager thus holds exactly ``blocks_needed(T, S)`` blocks per sample at every step
(``T`` the true token count after the step), and has cached every block a sample filled by the
time anyone could look it up (only the sample itself, prefilled again after a preemption, can
match its output's ids), as a token-by-token run would.

Samples and their groups never write the memory's levels: each call returns the
:class:`~.level_change.Change` it made, and the memory adds it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..accounting import blocks_needed
from .level_change import Change

if TYPE_CHECKING:
    from .paged_memory import PagedMemory


class Sample:
    """One running sample. It holds ``start_tokens`` tokens at its admission step ``admitted_at``, so
    ``start_tokens + (t - admitted_at)`` before step ``t``, and finishes at ``final_tokens``.

    The manager has its first ``handed_over`` tokens, in ``blocks`` blocks: the true count at
    the last call, less than the true count in between, but never in another block.
    ``sort_key`` orders work within a step: admission order, then sample index, as a
    token-by-token run would do it.
    """

    __slots__ = ("name", "group", "index", "start_tokens", "admitted_at", "final_tokens", "handed_over", "blocks",
                 "alive", "sort_key")

    def __init__(self, name: str, group: SampleGroup, index: int, start_tokens: int, admitted_at: int,
                 final_tokens: int, block_size: int):
        self.name, self.group, self.index = name, group, index
        self.start_tokens, self.admitted_at, self.final_tokens = start_tokens, admitted_at, final_tokens
        self.handed_over, self.blocks = start_tokens, blocks_needed(start_tokens, block_size)
        self.alive = True
        self.sort_key = (group.order, index)

    def advance(self, memory: PagedMemory, t: int, preempted: list[int]) -> Change:
        """Open the block due at step ``t`` (preempting the youngest requests while none is free)."""
        done, grown = memory.with_room(lambda: self.write_through(memory, t), self.group, t, preempted)
        return Change(table_blocks=grown) if done else Change()  # if not done, the preemption dropped us

    def write_through(self, memory: PagedMemory, t: int) -> int:
        """Hand over the token of step ``t`` (the admission's first, or one opening a block); schedule the next call.

        Returns the block-table entries it added.
        """
        position = self.start_tokens + (t - self.admitted_at)
        grown = self.hand_over(memory, position + 1)
        next_opening = self.blocks * memory.block_size  # the first position past the blocks held
        if next_opening < self.final_tokens:
            memory.grow.schedule(self.admitted_at + next_opening - self.start_tokens, self)
        else:
            memory.finish.schedule(self.admitted_at + self.final_tokens - self.start_tokens, self)
        return grown

    def hand_over(self, memory: PagedMemory, stop: int) -> int:
        """Give the manager the ids of positions ``handed_over..stop-1``; return the block-table entries added."""
        sent = self.handed_over
        if stop <= sent:
            return 0
        memory.manager.append_tokens(self.name, memory.token_ids.ids(self.group.request, self.index, sent, stop))
        blocks = blocks_needed(stop, memory.block_size)
        grown, self.handed_over, self.blocks = blocks - self.blocks, stop, blocks
        return grown

    def free(self, memory: PagedMemory, t: int, hand_over: bool = True) -> Change:
        """Free the sample as of step ``t``, first handing over the tokens it truly holds (full blocks get cached)."""
        held = self.start_tokens + (t - self.admitted_at)
        grown = self.hand_over(memory, held) if hand_over else 0
        memory.manager.free(self.name)
        self.alive = False
        return Change(-1, -held, grown - self.blocks)

    def finish(self, memory: PagedMemory, t: int) -> tuple[int | None, Change]:
        """The sample wrote its last token at step ``t - 1``: free it. Returns its request if that was the
        group's last sample (else None), and the change."""
        change = self.free(memory, t)
        group = self.group
        group.unfinished -= 1
        if group.unfinished:
            return None, change
        group.alive = False
        return group.request, change


class SampleGroup:
    """A running request with ``n >= 1`` independent samples; complete when the last one finishes."""

    __slots__ = ("request", "order", "samples", "unfinished", "alive")

    def __init__(self, request: int, order: int):
        self.request, self.order = request, order
        self.samples: list[Sample] = []
        self.unfinished = 0
        self.alive = True

    def admit(self, memory: PagedMemory, t: int) -> Change:
        """Prefill every unfinished sample (a fresh request's samples fork the first one's prompt with sharing on).

        If it raises ``OutOfBlocksError``, :meth:`drop` takes back everything it did.
        """
        r, manager, generated = self.request, memory.manager, memory.generated[self.request]
        fork_from, change = None, Change()
        for index, output in enumerate(memory.output[r]):
            if generated[index] == output:
                continue  # this sample had finished before the preemption
            start = memory.prompt[r] + generated[index]
            sample = Sample(memory.new_name(r), self, index, start, t, memory.prompt[r] + output, memory.block_size)
            if fork_from is not None:
                manager.fork(fork_from, sample.name)
            else:
                manager.add_request(sample.name, memory.token_ids.ids(r, index, 0, start))
                if memory.sharing and not any(generated):
                    fork_from = sample.name
            self.samples.append(sample)
            change = change.plus(Change(1, start, sample.blocks))
        self.unfinished = len(self.samples)
        for sample in self.samples:
            change = change.plus(Change(table_blocks=sample.write_through(memory, t)))
        return change

    def progress(self, memory: PagedMemory, t: int) -> list[int]:
        """Before a preemption at step ``t``: how many tokens each sample had generated (what recompute keeps)."""
        generated = list(memory.generated[self.request])
        for sample in self.samples:
            if sample.alive:
                generated[sample.index] = sample.start_tokens + (t - sample.admitted_at) - memory.prompt[self.request]
        return generated

    def drop(self, memory: PagedMemory, t: int, hand_over: bool = True) -> Change:
        """Free every live sample as of step ``t`` (``hand_over=False``: a failed admission, nothing to hand over)."""
        self.alive = False
        change = Change()
        for sample in self.samples:
            if sample.alive:
                change = change.plus(sample.free(memory, t, hand_over))
        return change
