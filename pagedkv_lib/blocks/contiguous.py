"""Contiguous KV reservation, the baseline paging replaces, with the paper's memory categories.

Systems before PagedAttention (the paper's Orca baselines) give each request one contiguous
run of token slots, reserved when the request is admitted, because the attention kernel reads
a request's K/V as one array. The run must be as long as the request can ever get, so the
reservation depends on what the server knows about the final length:

* ``"max"``: the model's maximum length ``max_len`` for every request (Orca-Max);
* ``"pow2"``: the next power of two of the final length, capped at ``max_len`` (Orca-Pow2);
* ``"oracle"``: exactly the final length (Orca-Oracle, an unreachable ideal).

:class:`ContiguousArena` places runs in one linear arena of ``num_slots`` token slots, first fit
(the lowest-addressed free gap that is long enough), and never moves a run once placed. At any
moment every slot is in exactly one of five categories, so they always sum to ``num_slots``:

* ``token_states``: slots holding a token's K/V (the live tokens of admitted requests);
* ``reservation``: slots held for tokens the request will still generate (``final - live``);
* ``internal_fragmentation``: slots reserved beyond the final length, never used (``run - final``);
* ``external_fragmentation``: free slots in gaps too short to place the *next waiting request's*
  run. It depends on that request, so :meth:`ContiguousArena.categories` takes its final length;
  with no request waiting nothing is blocked and it is 0 by definition;
* ``free``: the remaining free slots, in gaps the next request's run would fit in (every free slot
  when no request waits). A server that admits whenever it can leaves ``free == 0`` while a
  request waits, and then the paper's four categories alone sum to the arena.
"""
from __future__ import annotations

import bisect

from ..errors import InvariantError, OutOfBlocksError, UnknownRequestError
from ..validation import check_choice, check_int, check_new_id, unhashable_id_error

RESERVATION_POLICIES = ("max", "pow2", "oracle")
"""How a contiguous run is sized (the simulator's ``POLICIES`` add the paged ones)."""

ARENA_CATEGORIES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")
"""The arena's slot categories (the simulator's ``CATEGORIES`` add paged ``slack``)."""


def reservation_slots(policy: str, final_len: int, max_len: int) -> int:
    """Token slots a request of ``final_len`` tokens reserves under ``policy`` (see module doc)."""
    policy = check_choice("policy", policy, RESERVATION_POLICIES)
    max_len = check_int("max_len", max_len, minimum=1)
    final_len = check_int("final_len", final_len, minimum=1, maximum=max_len)
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(1 << (final_len - 1).bit_length(), max_len)
    return final_len


class _Run:
    __slots__ = ("start", "size", "live", "final")

    def __init__(self, start: int, size: int, live: int, final: int):
        self.start, self.size, self.live, self.final = start, size, live, final


class ContiguousArena:
    """A linear arena of ``num_slots`` token slots holding one contiguous run per request.

    Step-friendly API for a simulator: :meth:`admit` a request (its final length is known to the
    policy), :meth:`grow` its live tokens as it decodes, :meth:`release` it when done, and read
    :meth:`categories` at any step.
    """

    def __init__(self, num_slots: int, policy: str, max_len: int):
        self.num_slots = check_int("num_slots", num_slots, minimum=1)
        self.policy = check_choice("policy", policy, RESERVATION_POLICIES)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self._runs: dict[str, _Run] = {}
        self._order: list[tuple[int, str]] = []  # (start, request id), sorted by start

    def gaps(self):
        """Free gaps as (start, length) in slots, in address order, zero-length gaps skipped."""
        end = 0
        for start, rid in self._order:
            if start > end:
                yield end, start - end
            end = start + self._runs[rid].size
        if self.num_slots > end:
            yield end, self.num_slots - end

    def _first_fit(self, size: int) -> int | None:
        return next((start for start, length in self.gaps() if length >= size), None)

    def reservation_for(self, final_len: int) -> int:
        """Slots a request of ``final_len`` tokens would reserve in this arena."""
        return reservation_slots(self.policy, final_len, self.max_len)

    def fits(self, final_len: int) -> bool:
        """Whether a request of ``final_len`` tokens could be admitted now."""
        return self._first_fit(self.reservation_for(final_len)) is not None

    def admit(self, request_id: str, prompt_len: int, final_len: int) -> int:
        """Reserve a run for a request and return its first slot.

        ``prompt_len`` tokens are live at once; ``final_len`` (prompt plus output, tokens) sets the
        reservation. Raises ``OutOfBlocksError`` (nothing changes) when no free gap is long enough,
        and ``ValueError`` when the run is longer than the whole arena, since it could never fit.
        """
        check_new_id("request_id", request_id, self._runs, "admitted")
        final_len = check_int("final_len", final_len, minimum=1, maximum=self.max_len)
        prompt_len = check_int("prompt_len", prompt_len, minimum=1, maximum=final_len)
        size = self.reservation_for(final_len)
        if size > self.num_slots:
            raise ValueError(f"a request of final_len {final_len} reserves {size} slots under policy "
                             f"{self.policy!r}, more than the arena's {self.num_slots}: it can never fit")
        start = self._first_fit(size)
        if start is None:
            raise OutOfBlocksError(f"no free gap of {size} slots for request {request_id!r} "
                                   f"(largest gap: {max((g for _, g in self.gaps()), default=0)} slots)")
        self._runs[request_id] = _Run(start, size, prompt_len, final_len)
        bisect.insort(self._order, (start, request_id))
        return start

    def grow(self, request_id: str, n: int = 1) -> None:
        """``n`` more tokens of the request become live (decode steps); never beyond its final length."""
        run = self._run(request_id)
        n = check_int("n", n, minimum=0, maximum=run.final - run.live)
        run.live += n

    def release(self, request_id: str) -> None:
        """Free the request's whole run."""
        run = self._run(request_id)
        del self._runs[request_id]
        self._order.pop(bisect.bisect_left(self._order, (run.start, request_id)))

    def placement(self, request_id: str) -> tuple[int, int, int, int]:
        """``(start slot, reserved slots, live tokens, final tokens)`` of an admitted request."""
        run = self._run(request_id)
        return run.start, run.size, run.live, run.final

    def request_ids(self) -> list[str]:
        """Admitted request ids in address order."""
        return [rid for _, rid in self._order]

    def categories(self, next_request_len: int | None = None) -> dict[str, int]:
        """Slots per category (keys in :data:`ARENA_CATEGORIES` order); the values sum to ``num_slots``.

        ``next_request_len`` is the final length (tokens) of the next waiting request, or ``None``
        when no request waits (then ``external_fragmentation`` is 0; see the module doc).
        """
        if next_request_len is not None:
            next_request_len = check_int("next_request_len", next_request_len, minimum=1, maximum=self.max_len)
        need = None if next_request_len is None else self.reservation_for(next_request_len)
        out = dict.fromkeys(ARENA_CATEGORIES, 0)
        for run in self._runs.values():
            out["token_states"] += run.live
            out["reservation"] += run.final - run.live
            out["internal_fragmentation"] += run.size - run.final
        for _, length in self.gaps():
            out["free" if need is None or length >= need else "external_fragmentation"] += length
        return out

    def check_invariants(self) -> None:
        """Runs lie inside the arena, never overlap, and each holds ``live <= final <= size`` slots."""
        end = 0
        if len(self._order) != len(self._runs) or sorted(self._order) != self._order:
            raise InvariantError("invariant broken: the address-ordered run list disagrees with the runs")
        for start, rid in self._order:
            run = self._runs[rid]
            if run.start != start or start < end or not (1 <= run.live <= run.final <= run.size):
                raise InvariantError(f"invariant broken: run of {rid!r} overlaps another or holds "
                                   f"more than it reserved ({start}, {run.size}, {run.live}, {run.final})")
            end = start + run.size
        if end > self.num_slots:
            raise InvariantError(f"invariant broken: a run ends at slot {end}, past the arena of {self.num_slots}")

    def _run(self, request_id) -> _Run:
        try:
            run = self._runs.get(request_id)
        except TypeError:
            raise unhashable_id_error("request_id", request_id) from None
        if run is None:
            raise UnknownRequestError(f"request_id {request_id!r} is not admitted (never admitted, or "
                                      f"already released)")
        return run
