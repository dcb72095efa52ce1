"""The continuous-batching loop shared by every memory policy, and its step-indexed record.

Step ``t`` of the simulated server, in order:

1. sequences whose last token came at step ``t - 1`` release their memory;
2. requests that have arrived join the waiting queue;
3. waiting requests are admitted first come, first served while memory (and the batch limit)
   allows; the first one that does not fit stops admission (no overtaking) and is tried again
   only after memory is released by a completion or a preemption, since until then running
   sequences only grow. (With sharing a failed attempt can reorder the prefix cache: the block
   manager has no side-effect-free "would it fit" query. So this schedule of attempts is part
   of the rules, not just a shortcut.);
4. every running sequence appends one token (a just-admitted one holds its prompt plus this
   token), which can make a paged policy preempt the youngest request by recompute;
5. the state is measured (after the step's tokens, before the next step's releases).

Skipping quiet steps. Between events (an arrival, a completion, a paged sequence opening a
new block) nothing but token counts changes, and those grow by one per running sequence per
step. So the loop visits only steps where something happens and records *levels* there:
every per-step series is a level held until the next visited step, plus (for token counts)
the running sequences accumulated step by step. The dense series are therefore exact for
every step while the loop costs time per event, not per step.

The memory policy is any object with the :class:`KVMemory` interface
(:mod:`.paged_memory`, :mod:`.contiguous_memory`).
"""
from __future__ import annotations

from collections import deque
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class KVMemory(Protocol):
    """What the loop (and :func:`~pagedkv_lib.sim.simulate.simulate`) asks of a memory policy.

    A policy also refuses, when it is built, a trace with a request that could never fit its
    empty memory (``ValueError``), so the loop always ends.
    """

    LEVELS: ClassVar[tuple[str, ...]]
    """Names of the policy's own levels, in the order :meth:`levels` returns them."""

    seqs_running: int
    """Sequences holding memory now."""

    def admit(self, request: int, t: int) -> bool:
        """Take memory for ``request`` and write its step-``t`` tokens; False, holding nothing, if it does not fit."""

    def release(self, t: int) -> tuple[list[int], bool]:
        """Free what finished at step ``t - 1``: (requests now complete, whether any memory was freed)."""

    def advance(self, t: int) -> list[int]:
        """Write step ``t``'s tokens where that takes memory; return the requests preempted, youngest first."""

    def next_event_step(self) -> int | None:
        """The next step at which the policy has something to do, or ``None``."""

    def levels(self, head: int | None) -> tuple[int, ...]:
        """The policy's levels after this step (``head``: the request at the queue's head, or ``None``)."""

    def categories(self, series: dict) -> dict[str, np.ndarray]:
        """Per-step memory categories (token slots) and ``logical_tokens``, from the dense series."""

    def summary(self, series: dict) -> dict:
        """The policy's own summary figures (``None`` for those it does not have)."""


class Record:
    """What the loop saw: levels at visited steps and the steps of discrete happenings."""

    def __init__(self, level_names):
        self.level_names = tuple(level_names)
        self.steps: list[int] = []
        self.levels: list[tuple] = []
        self.admitted: list[int] = []
        self.completed: list[int] = []
        self.preempted: list[int] = []

    def dense(self, num_steps: int, arrival_step: np.ndarray) -> dict[str, np.ndarray]:
        """Per-step int64 series of length ``num_steps``; a level holds until the next visited step."""
        steps = np.asarray(self.steps, dtype=np.int64)
        idx = np.searchsorted(steps, np.arange(num_steps), side="right")  # 0: before the first visit
        table = np.zeros((len(self.levels) + 1, len(self.level_names)), dtype=np.int64)
        if self.levels:
            table[1:] = np.asarray(self.levels, dtype=np.int64)
        out = {name: table[idx, i] for i, name in enumerate(self.level_names)}
        for name in ("admitted", "completed", "preempted"):
            out[name] = np.bincount(np.asarray(getattr(self, name), dtype=np.int64), minlength=num_steps)[:num_steps]
        arrived = np.searchsorted(arrival_step, np.arange(num_steps), side="right")
        out["waiting"] = arrived - np.cumsum(out["admitted"]) + np.cumsum(out["preempted"])
        return out


def run(memory: KVMemory, arrival_step: np.ndarray, seqs_per_request: int, max_batch_seqs: int, bar=None) -> Record:
    """Serve every request; return the :class:`Record`. ``arrival_step`` is sorted, one per request.

    ``bar`` (a tqdm bar or ``None``) advances once per completed request.
    """
    R = len(arrival_step)
    rec = Record(("running", "running_seqs") + tuple(memory.LEVELS))
    waiting: deque[int] = deque()
    arrived = running = done = 0
    blocked = False  # the queue head failed to fit; only a release can change that
    t = int(arrival_step[0])
    while done < R:
        finished, freed = memory.release(t)
        if freed:
            blocked = False
        if finished:
            running -= len(finished)
            done += len(finished)
            rec.completed.extend([t - 1] * len(finished))
            if bar is not None:
                bar.update(len(finished))
        while arrived < R and arrival_step[arrived] <= t:
            if not waiting:
                blocked = False
            waiting.append(arrived)
            arrived += 1
        if waiting and not blocked:
            admitted = _admit_from_head(memory, waiting, t, seqs_per_request, max_batch_seqs)
            running += admitted
            rec.admitted.extend([t] * admitted)
            blocked = bool(waiting)  # admission stops early only when the head does not fit
        preempted = memory.advance(t)
        if preempted:
            blocked = False
            running -= len(preempted)
            rec.preempted.extend([t] * len(preempted))
            waiting.extendleft(preempted)  # youngest first in, so the oldest victim ends up at the head
        rec.steps.append(t)
        rec.levels.append((running, memory.seqs_running) + memory.levels(waiting[0] if waiting else None))
        t = _next_step(t, memory.next_event_step(), waiting, blocked, arrived, arrival_step)
    return rec


def _admit_from_head(memory: KVMemory, waiting: deque, t: int, seqs_per_request: int, max_batch_seqs: int) -> int:
    """Admit waiting requests first come, first served until one does not fit; return how many were admitted."""
    admitted = 0
    while waiting:
        if memory.seqs_running + seqs_per_request > max_batch_seqs or not memory.admit(waiting[0], t):
            break
        waiting.popleft()
        admitted += 1
    return admitted


def _next_step(t, next_event, waiting, blocked, arrived, arrival_step) -> int | None:
    """The next step where something can happen (the loop ends before asking when all are done)."""
    if waiting and not blocked:
        return t + 1  # admission may proceed (after a preemption, or under the batch limit)
    candidates = [] if next_event is None else [next_event]
    if arrived < len(arrival_step):
        candidates.append(int(arrival_step[arrived]))
    return max(t + 1, min(candidates)) if candidates else t + 1
