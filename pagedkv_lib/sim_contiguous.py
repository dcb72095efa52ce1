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

import heapq

import numpy as np

from .contiguous import ContiguousArena
from .errors import OutOfBlocksError
from .workloads import Trace


class ContiguousMemory:
    """A :class:`~pagedkv_lib.contiguous.ContiguousArena` of ``capacity_tokens`` slots serving a trace.

    Levels per visited step: ``reserved`` slots, ``final_total`` (final lengths summed over
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
        self.frees: dict[int, list] = {}
        self._heap: list[int] = []
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
        return self._heap[0] if self._heap else None

    def admit(self, r: int, t: int) -> bool:
        """Reserve a range for every sequence of ``r`` (all or none); schedule their ends."""
        placed = []
        for j, final in enumerate(self.final[r]):
            key = f"{r}.{j}"
            try:
                self.arena.admit(key, self.prompt[r], final)
            except OutOfBlocksError:
                for done in placed:
                    self.arena.release(done)
                return False
            placed.append(key)
        self.left[r] = len(placed)
        for j, key in enumerate(placed):
            final = self.final[r][j]
            self.seqs_running += 1
            self.reserved += self.size[r][j]
            self.final_total += final
            self.token_jumps += self.prompt[r]
            self._at(t + final - self.prompt[r], ((r, j), final))
        return True

    def release(self, t: int) -> tuple[list[int], bool]:
        """Free the sequences that finished at step ``t - 1``; return the requests now complete, and
        whether anything was freed."""
        if not self._heap or self._heap[0] != t:
            return [], False
        heapq.heappop(self._heap)
        done = []
        for (r, j), final in self.frees.pop(t):
            self.arena.release(f"{r}.{j}")
            self.seqs_running -= 1
            self.reserved -= self.size[r][j]
            self.final_total -= final
            self.token_jumps -= final
            self.left[r] -= 1
            if not self.left[r]:
                del self.left[r]
                done.append(r)
        return done, True

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

    def _at(self, step: int, item) -> None:
        bucket = self.frees.get(step)
        if bucket is None:
            self.frees[step] = bucket = []
            heapq.heappush(self._heap, step)
        bucket.append(item)
