"""A calendar of future steps: what each memory policy has to do at a step, and the next such step.

The simulator skips steps where nothing happens, so a memory policy files each future
happening (a sequence opening a block, a sequence finishing) under the step it happens at,
and the loop asks for the earliest step that holds anything.
"""
from __future__ import annotations

import heapq


class EventCalendar:
    """Items filed by step. ``pop_due(t)`` hands back step ``t``'s items, sorted by ``key`` if given.

    Invariant: every step with items is on the heap (a step popped early, or emptied, stays on
    the heap until :meth:`next_step` discards it), so the heap's smallest live entry is the
    next step with work.
    """

    def __init__(self, key=None):
        self._items: dict[int, list] = {}
        self._heap: list[int] = []
        self._key = key

    def schedule(self, step: int, item) -> None:
        """File ``item`` under ``step``."""
        bucket = self._items.get(step)
        if bucket is None:
            self._items[step] = bucket = []
            heapq.heappush(self._heap, step)
        bucket.append(item)

    def pop_due(self, step: int) -> list:
        """Remove and return the items filed under ``step`` (sorted by ``key``; empty if none)."""
        items = self._items.pop(step, [])
        if self._key is not None and len(items) > 1:
            items.sort(key=self._key)
        return items

    def next_step(self) -> int | None:
        """The earliest step that holds items, or ``None``."""
        heap = self._heap
        while heap and heap[0] not in self._items:
            heapq.heappop(heap)
        return heap[0] if heap else None
