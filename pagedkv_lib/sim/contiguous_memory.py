"""Contiguous KV memory for the simulator: one reserved range per sequence, placed first fit.

Each sequence reserves, when its request is admitted, a contiguous range of token slots sized
by the policy: the model's context (``"max"``), the next power of two at or above its final
length (``"pow2"``), or its final length (``"oracle"``); it keeps the range until it finishes.
A request (all its samples or beams) is admitted only if every range finds a gap.

Nothing changes between a request's admission and its completion, so the simulator visits a
contiguous run only at arrivals, admissions and completions. Per step, with ``T`` the tokens
a sequence holds, ``F`` its final length and ``R`` its reservation (``R >= F``):
token states ``T``, reservation ``F - T``, internal fragmentation ``R - F``; external
fragmentation is what the arena reports: free gaps too short for the run the queue's head
would reserve (its longest sequence), 0 when no request waits. Only admissions, completions
and arrivals change the arena or the head, so a level held between visited steps is exact.
"""
from __future__ import annotations

import numpy as np

from ..blocks.contiguous import ContiguousArena
from ..errors import OutOfBlocksError
from .events import EventCalendar
from .workloads import Trace


class ContiguousMemory:
    """A :class:`~pagedkv_lib.blocks.contiguous.ContiguousArena` of ``capacity_tokens`` slots serving a trace.

    Refuses (``ValueError``) a trace with a request whose ranges together exceed the arena:
    it could never be admitted. Levels per visited step: ``reserved`` slots, ``final_total`` (final lengths summed over
    running sequences), ``token_jumps`` (logical tokens added at admissions minus those removed
    at frees) and ``external_fragmentation`` (the arena's free gaps too short for the queue head's run).
    """

    LEVELS = ("reserved", "final_total", "token_jumps", "external_fragmentation")

    def __init__(self, trace: Trace, capacity_tokens: int, *, policy: str, context: int):
        self.capacity = capacity_tokens
        self.arena = ContiguousArena(capacity_tokens, policy, context)
        self.prompt = trace.prompt_len.tolist()
        final = trace.final_len if trace.beam_width == 1 else np.repeat(trace.final_len, trace.beam_width, axis=1)
        self.final = final.tolist()
        self.size = [[self.arena.reservation_for(f) for f in row] for row in self.final]
        need = max(sum(row) for row in self.size)
        if need > capacity_tokens:
            raise ValueError(f"the KV budget is too small: a request of trace {trace.name!r} needs {need} token slots "
                             f"under policy {policy!r}, but only {capacity_tokens} are available")
        self.frees = EventCalendar()  # step -> sequences whose last token came the step before
        self.left: dict[int, int] = {}  # running request -> sequences not yet finished
        self.seqs_running = 0
        self.reserved = 0
        self.final_total = 0
        self.token_jumps = 0

    def levels(self, head: int | None) -> tuple[int, int, int, int]:
        external = 0
        if head is not None:  # the arena judges gaps against the head's longest sequence
            external = self.arena.categories(max(self.final[head]))["external_fragmentation"]
        return (self.reserved, self.final_total, self.token_jumps, external)

    def next_event_step(self) -> int | None:
        return self.frees.next_step()

    def admit(self, request: int, t: int) -> bool:
        """Reserve a range for every sequence of ``request`` (all or none); schedule their ends."""
        placed = []
        for seq, final in enumerate(self.final[request]):
            key = f"{request}.{seq}"
            try:
                self.arena.admit(key, self.prompt[request], final)
            except OutOfBlocksError:
                for done in placed:
                    self.arena.release(done)
                return False
            placed.append(key)
        self.left[request] = len(placed)
        for seq, final in enumerate(self.final[request]):
            self.seqs_running += 1
            self.reserved += self.size[request][seq]
            self.final_total += final
            self.token_jumps += self.prompt[request]
            self.frees.schedule(t + final - self.prompt[request], (request, seq, final))
        return True

    def release(self, t: int) -> tuple[list[int], bool]:
        """Free the sequences that finished at step ``t - 1``; return the requests now complete, and
        whether anything was freed."""
        finished = self.frees.pop_due(t)
        done = []
        for request, seq, final in finished:
            self.arena.release(f"{request}.{seq}")
            self.seqs_running -= 1
            self.reserved -= self.size[request][seq]
            self.final_total -= final
            self.token_jumps -= final
            self.left[request] -= 1
            if not self.left[request]:
                del self.left[request]
                done.append(request)
        return done, bool(finished)

    def advance(self, t: int) -> list[int]:
        """Contiguous reservations never grow, so nothing happens mid-flight and nothing is preempted."""
        return []

    def categories(self, series: dict) -> dict[str, np.ndarray]:
        """Per-step memory categories (token slots) and logical tokens from the dense levels."""
        logical = series["token_jumps"] + np.cumsum(series["running_seqs"])
        external = series["external_fragmentation"]
        free = self.capacity - series["reserved"] - external
        return {"token_states": logical, "reservation": series["final_total"] - logical,
                "internal_fragmentation": series["reserved"] - series["final_total"],
                "external_fragmentation": external,
                "slack": np.zeros_like(logical), "free": free, "logical_tokens": logical}

    def summary(self, series: dict) -> dict:
        """Contiguous runs have no blocks and share nothing."""
        return {"num_blocks": None, "sharing_saving": None, "mean_table_blocks": None, "max_table_blocks": None,
                "prefix_hit_rate": None, "cow_copies": None}
