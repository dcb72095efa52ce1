"""The simulator the plain way: every step visited, one token per running sequence per step.

This is the readable definition of what :func:`~pagedkv_lib.sim.simulate` computes. It keeps
the same scheduling rules (:mod:`.loop`: release, arrivals, first-come-first-served admission
with no overtaking, one token per sequence, preemption of the youngest request by recompute),
but nothing clever: each step every running sequence hands the block manager (or the arena)
its next token, so the manager always holds exactly the true tokens and caches a block the
step it fills, and the memory categories are read straight from the manager's and the
arena's own ledgers. The fast simulator skips quiet steps and calls the manager once per
block; the tests check that it gives these series exactly, step by step.

It costs time per (step, sequence), so use it on small traces. Beam search is left to the
fast simulator (its beams already advance token by token) under paged policies.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..accounting import blocks_needed
from ..blocks.manager import BlockManager
from ..blocks.contiguous import ContiguousArena
from ..errors import OutOfBlocksError
from .token_ids import TokenIds
from .workloads import Trace


def run_token_by_token(memory, arrival_step: np.ndarray, seqs_per_request: int, max_batch: int) -> dict:
    """Serve every request, visiting every step; return per-step int64 series (as ``SimResult.series``).

    ``memory`` is a :class:`PagedByToken` or :class:`ContiguousByToken`; ``arrival_step`` the
    sorted step at which each request joins the queue. A head that failed to fit is tried again
    only after memory was released or a request preempted (or when it is a new head).
    """
    R = len(arrival_step)
    waiting: deque[int] = deque()
    rows, happened = [], {"admitted": [], "completed": [], "preempted": []}
    arrived = done = t = 0
    blocked = False
    while done < R:
        finished, freed = memory.release_finished(t)  # 1. sequences whose last token came at t - 1
        blocked = blocked and not freed
        done += len(finished)
        happened["completed"] += [t - 1] * len(finished)
        while arrived < R and arrival_step[arrived] <= t:  # 2. arrivals
            blocked = blocked and bool(waiting)
            waiting.append(arrived)
            arrived += 1
        while waiting and not blocked:  # 3. admission, first come first served
            if memory.seqs_running + seqs_per_request > max_batch or not memory.admit(waiting[0], t):
                blocked = True
                break
            waiting.popleft()
            happened["admitted"].append(t)
        preempted = memory.write_tokens(t)  # 4. one token per running sequence
        if preempted:
            blocked = False
            waiting.extendleft(preempted)  # youngest first in, so the oldest victim ends up at the head
            happened["preempted"] += [t] * len(preempted)
        rows.append(dict(memory.measure(waiting[0] if waiting else None), waiting=len(waiting)))  # 5.
        t += 1
    num_steps = max(happened["completed"]) + 1
    series = {key: np.array([row[key] for row in rows[:num_steps]], dtype=np.int64) for key in rows[0]}
    for name, steps in happened.items():
        series[name] = np.bincount(np.asarray(steps, dtype=np.int64), minlength=num_steps)[:num_steps]
    return series


class _ByToken:
    """What both token-by-token memories share: ``running`` maps each request to its unfinished
    sequences (``{index: name}``, in admission order); subclasses say when a sequence is finished
    and how to free it."""

    running: dict[int, dict[int, str]]

    @property
    def seqs_running(self) -> int:
        return sum(len(seqs) for seqs in self.running.values())

    def release_finished(self, t: int) -> tuple[list[int], bool]:
        """Free every sequence at its final length; return the requests now complete, and whether any was freed."""
        done, freed = [], False
        for r, seqs in list(self.running.items()):
            for j, name in list(seqs.items()):
                if self._finished(r, j, name):
                    self._free(name)
                    del seqs[j]
                    freed = True
            if not seqs:
                del self.running[r]
                done.append(r)
        return done, freed


class PagedByToken(_ByToken):
    """``num_blocks`` blocks of ``block_size`` slots; each sequence appends one token per step.

    ``sharing`` turns on prefix caching and forks a fresh request's samples from its first one.
    Admission needs the exact blocks free without sharing (at least one with it), and keeps
    ``watermark_blocks`` free. A sequence that cannot get a block preempts the youngest request.
    """

    def __init__(self, trace: Trace, num_blocks: int, block_size: int, *, sharing: bool, watermark_blocks: int):
        if trace.beam_width > 1:
            raise ValueError(f"the token-by-token reference runs independent samples, not beam search "
                             f"(trace {trace.name!r} has beam_width={trace.beam_width})")
        self.manager = BlockManager(num_blocks, block_size, enable_prefix_caching=sharing)
        self.block_size, self.sharing, self.watermark_blocks = block_size, sharing, watermark_blocks
        self.token_ids = TokenIds(trace)
        self.prompt, self.output = trace.prompt_len.tolist(), trace.output_len.tolist()
        self.generated = [[0] * trace.num_samples for _ in range(len(trace))]  # kept across preemptions
        self.running: dict[int, dict[int, str]] = {}  # request -> {sample: manager id}, in admission order
        self.wrote_at: dict[str, int] = {}  # manager id -> last step it wrote a token
        self._names = 0

    def _finished(self, r: int, j: int, name: str) -> bool:
        return self.manager.num_tokens(name) == self.prompt[r] + self.output[r][j]

    def _free(self, name: str) -> None:
        self.manager.free(name)

    def admit(self, r: int, t: int) -> bool:
        """Prefill request ``r``'s unfinished samples and write their step-``t`` token.

        False, holding nothing, if there is no room.
        """
        todo = [j for j, out in enumerate(self.output[r]) if self.generated[r][j] < out]
        exact = sum(blocks_needed(self.prompt[r] + self.generated[r][j] + 1, self.block_size) for j in todo)
        if self.manager.num_free_blocks - self.watermark_blocks < (1 if self.sharing else exact):
            return False
        samples: dict[int, str] = {}
        try:
            self._prefill(r, todo, samples)
            for j, name in samples.items():
                self._write(r, j, name, t)
            if self.manager.num_free_blocks < self.watermark_blocks:
                raise OutOfBlocksError("admission would go below the watermark")
        except OutOfBlocksError:
            for name in samples.values():
                self.manager.free(name)
            return False
        self.running[r] = samples
        return True

    def _prefill(self, r: int, todo: list[int], samples: dict[int, str]) -> None:
        """Give the manager each sample's prompt and generated tokens (a fresh request's samples fork with sharing)."""
        fork_from = None
        for j in todo:
            self._names += 1
            name = f"ref{self._names}"
            if fork_from is not None:
                self.manager.fork(fork_from, name)
            else:
                self.manager.add_request(name, list(self.token_ids.ids(r, j, 0, self.prompt[r] + self.generated[r][j])))
                if self.sharing and not any(self.generated[r]):
                    fork_from = name
            samples[j] = name

    def _write(self, r: int, j: int, name: str, t: int) -> None:
        position = self.manager.num_tokens(name)
        self.manager.append_tokens(name, self.token_ids.ids(r, j, position, position + 1))
        self.wrote_at[name] = t

    def write_tokens(self, t: int) -> list[int]:
        """Every running sample that has not yet written step ``t``'s token writes it; return preempted requests."""
        preempted: list[int] = []
        for r in list(self.running):
            for j, name in list(self.running.get(r, {}).items()):  # a request preempted meanwhile writes nothing
                while r in self.running and self.wrote_at.get(name) != t:
                    try:
                        self._write(r, j, name, t)
                    except OutOfBlocksError:
                        preempted.append(self._preempt_youngest(t))
        return preempted

    def _preempt_youngest(self, t: int) -> int:
        """Free the last-admitted request, remembering the tokens each sample generated before step ``t``."""
        r = next(reversed(self.running))
        for j, name in self.running.pop(r).items():
            self.generated[r][j] = self.manager.num_tokens(name) - (self.wrote_at.get(name) == t) - self.prompt[r]
            self.manager.free(name)
        return r

    def measure(self, head: int | None) -> dict[str, int]:
        """The state after the step, read from the manager's own ledger (and its invariants checked)."""
        self.manager.check_invariants()
        stats = self.manager.stats()
        table = sum(len(self.manager.block_table(name))
                    for samples in self.running.values() for name in samples.values())
        return dict(running=len(self.running), running_seqs=self.seqs_running, used_blocks=stats.used_blocks,
                    table_blocks=table, logical_tokens=stats.logical_tokens, token_states=stats.unique_tokens,
                    slack=stats.slack, free=stats.free_blocks * self.block_size)


class ContiguousByToken(_ByToken):
    """A first-fit arena of ``capacity_tokens`` slots; each sequence's run grows by one live token per step.

    A request (every sample, or every beam) is admitted only if all its runs find a gap.
    """

    def __init__(self, trace: Trace, capacity_tokens: int, *, policy: str, context: int):
        self.arena = ContiguousArena(capacity_tokens, policy, context)
        final = trace.final_len if trace.beam_width == 1 else np.repeat(trace.final_len, trace.beam_width, axis=1)
        self.prompt, self.final = trace.prompt_len.tolist(), final.tolist()
        self.running: dict[int, dict[int, str]] = {}  # request -> {sequence: arena run}, in admission order

    def _finished(self, r: int, j: int, name: str) -> bool:
        return self.arena.placement(name)[2] == self.final[r][j]

    def _free(self, name: str) -> None:
        self.arena.release(name)

    def admit(self, r: int, t: int) -> bool:
        """Place a run for every sequence of ``r`` (all or none); its step-``t`` token is written with the others'."""
        placed: dict[int, str] = {}
        try:
            for j, final in enumerate(self.final[r]):
                self.arena.admit(f"{r}.{j}", self.prompt[r], final)
                placed[j] = f"{r}.{j}"
        except OutOfBlocksError:
            for name in placed.values():
                self.arena.release(name)
            return False
        self.running[r] = placed
        return True

    def write_tokens(self, t: int) -> list[int]:
        """One more live token per unfinished sequence; reservations never grow, so nobody is preempted."""
        for r, seqs in self.running.items():
            for j, name in seqs.items():
                if self.arena.placement(name)[2] < self.final[r][j]:
                    self.arena.grow(name)
        return []

    def measure(self, head: int | None) -> dict[str, int]:
        """The arena's own categories, external fragmentation judged against the head's longest run."""
        self.arena.check_invariants()
        cats = self.arena.categories(None if head is None else max(self.final[head]))
        return dict(cats, running=len(self.running), running_seqs=self.seqs_running)
