"""Paged KV memory for the simulator: the real :class:`~pagedkv_lib.blocks.manager.BlockManager` under load.

Every running sequence is a request of the block manager. Without sharing the manager runs
with prefix caching off and every sequence gets its own blocks (parallel samples and beams
copy their prompt and history). With sharing, prefix caching is on (equal prefixes share
full blocks), parallel samples fork the prompt, and beams fork their parents: shared blocks
are copied on write. A request is a :class:`~.paged_samples.SampleGroup` (which calls the
manager once per block, not per token) or a :class:`~.paged_beams.BeamGroup`.

Token ids are deterministic per position (:class:`~.token_ids.TokenIds`). Within a step,
releases and block openings run in admission order (then sample index), the order a
token-by-token run uses, so even the cache's eviction order matches: :mod:`.reference` is
that run, and the tests check every series against it.

Preemption by recompute: when a sequence cannot get a block, the youngest running request
(last admitted) is freed and put back at the head of the queue; on readmission every
unfinished sequence is prefilled again with its prompt and the tokens it had generated
(with sharing on, the prefix cache may still hold some of those blocks).

Invariant the categories rely on (the reference checks it against the manager's own
unique-token count): at the end of every step a block shared by more than one sequence is
full (forks and prefix hits share full blocks; a shared partial block is copied when the
next token is written, which happens in the same step). So the tail slack is
``S * (block-table entries) - logical tokens`` and the stored token states are
``S * used_blocks - slack``.
"""
from __future__ import annotations

import operator

import numpy as np

from ..accounting import blocks_needed
from ..blocks.manager import BlockManager
from ..errors import OutOfBlocksError
from .events import EventCalendar
from .paged_beams import BeamGroup
from .paged_samples import SampleGroup
from .token_ids import TokenIds
from .workloads import Trace

_within_step = operator.attrgetter("sort_key")


class PagedMemory:
    """``num_blocks`` blocks of ``block_size`` slots serving a trace, with or without sharing.

    Refuses (``ValueError``) a trace with a request that needs more blocks than the empty
    cache offers above the watermark: it could never run. Levels it reports per visited step:
    ``used_blocks`` (blocks with a reference; cached free blocks count as free),
    ``table_blocks`` (block-table entries summed over running sequences, what the same
    sequences would hold without sharing) and ``token_jumps`` (logical tokens added at
    admissions minus those removed at frees and preemptions).
    """

    LEVELS = ("used_blocks", "table_blocks", "token_jumps")

    def __init__(self, trace: Trace, num_blocks: int, block_size: int, *, sharing: bool,
                 watermark_blocks: int, seed: int):
        self.block_size, self.num_blocks, self.sharing = block_size, num_blocks, sharing
        self.watermark_blocks = watermark_blocks
        self.beam_width = trace.beam_width
        self.prompt = trace.prompt_len.tolist()
        self.output = trace.output_len.tolist()
        self._check_fits(trace.name)
        self.manager = BlockManager(num_blocks, block_size, enable_prefix_caching=sharing)
        self.token_ids = TokenIds(trace)
        self.rng = np.random.default_rng(seed)
        # What recompute keeps: tokens each sample had generated, or each beam's token ids.
        self.generated = [[0] * trace.num_samples for _ in range(len(trace))]
        self.beam_history: dict[int, list[list[int]]] = {}
        self.running: dict[int, SampleGroup | BeamGroup] = {}  # insertion order = admission order
        self.grow = EventCalendar(key=_within_step)    # samples opening a block, beam groups stepping
        self.finish = EventCalendar(key=_within_step)  # samples / beam groups that finished the step before
        self.seqs_running = 0
        self.table_blocks = 0
        self.token_jumps = 0
        self._names = 0
        self._admissions = 0

    # ------------------------------------------------------------------ the loop's interface (KVMemory)

    def levels(self, head: int | None) -> tuple[int, int, int]:
        return (self.num_blocks - self.manager.num_free_blocks, self.table_blocks, self.token_jumps)

    def next_event_step(self) -> int | None:
        grow, finish = self.grow.next_step(), self.finish.next_step()
        if grow is None or finish is None:
            return finish if grow is None else grow
        return min(grow, finish)

    def admit(self, request: int, t: int) -> bool:
        """Prefill ``request`` (again, after a preemption) and write its step-``t`` tokens.

        Returns False, holding nothing, if that needs more blocks than are free or would leave
        fewer than ``watermark_blocks`` free.
        """
        if self.manager.num_free_blocks - self.watermark_blocks < self._blocks_to_admit(request):
            return False
        self._admissions += 1
        if self.beam_width > 1:
            group = BeamGroup(request, self._admissions, BeamGroup.history_to_prefill(self, request), t)
        else:
            group = SampleGroup(request, self._admissions)
        try:
            group.admit(self, t)
            if self.manager.num_free_blocks < self.watermark_blocks:
                raise OutOfBlocksError(f"admitting request {request} would leave fewer than "
                                       f"{self.watermark_blocks} blocks free")
        except OutOfBlocksError:
            group.drop(self, t, hand_over=False)
            return False
        self.beam_history.pop(request, None)
        self.running[request] = group
        return True

    def release(self, t: int) -> tuple[list[int], bool]:
        """Free what finished at step ``t - 1``; return the requests now complete, and whether anything was freed.

        Items of a request preempted since they were scheduled are dead: they free nothing, so
        they do not count (a head that failed to fit is then not retried; see :mod:`.loop`).
        """
        done, items = [], self.finish.pop_due(t)
        freed = any(item.alive for item in items)
        for item in items:
            if item.alive:
                request = item.finish(self, t)
                if request is not None:
                    del self.running[request]
                    done.append(request)
        return done, freed

    def advance(self, t: int) -> list[int]:
        """Open the blocks due at step ``t`` and step the beams; return preempted requests, youngest first."""
        preempted: list[int] = []
        for item in self.grow.pop_due(t):
            if item.alive:
                item.advance(self, t, preempted)
        return preempted

    def categories(self, series: dict) -> dict[str, np.ndarray]:
        """Per-step memory categories (token slots) and logical tokens from the dense levels.

        Relies on the module's invariant (shared blocks are full): slack is the tail slack of
        each sequence's own last block, ``S * table_blocks - logical``.
        """
        S = self.block_size
        logical = series["token_jumps"] + np.cumsum(series["running_seqs"])
        slack = S * series["table_blocks"] - logical
        zero = np.zeros_like(logical)
        return {"token_states": S * series["used_blocks"] - slack, "reservation": zero, "internal_fragmentation": zero,
                "external_fragmentation": zero, "slack": slack, "free": S * (self.num_blocks - series["used_blocks"]),
                "logical_tokens": logical}

    def summary(self, series: dict) -> dict:
        """Paged figures: blocks saved by sharing, block-table sizes, prefix-cache hits, copies on write."""
        table, seqs = series["table_blocks"].sum(), series["running_seqs"].sum()
        stats = self.manager.stats()
        return {"num_blocks": self.num_blocks,
                "sharing_saving": 1.0 - float(series["used_blocks"].sum()) / float(table) if table else 0.0,
                "mean_table_blocks": float(table) / float(seqs) if seqs else 0.0,
                "max_table_blocks": max(blocks_needed(p + max(o), self.block_size)
                                        for p, o in zip(self.prompt, self.output)),
                "prefix_hit_rate": stats.prefix_hit_rate, "cow_copies": stats.cow_copies}

    # ------------------------------------------------------------------ preemption and bookkeeping

    def with_room(self, op, group, t: int, preempted: list[int]) -> bool:
        """Run ``op``; while it lacks blocks, preempt the youngest request. False if ``group`` itself went."""
        while True:
            try:
                op()
                return True
            except OutOfBlocksError:
                victim = next(reversed(self.running.values()))
                self._preempt(victim, t, preempted)
                if victim is group:
                    return False

    def _preempt(self, group, t: int, preempted: list[int]) -> None:
        """Free every sequence of ``group``; queue it for recompute with what it generated before step ``t``."""
        group.keep_progress(self, t)
        group.drop(self, t)
        del self.running[group.request]
        preempted.append(group.request)

    def new_name(self, request: int) -> str:
        """A fresh block-manager id for a sequence of ``request``."""
        self._names += 1
        return f"{request}:{self._names}"

    def _blocks_to_admit(self, request: int) -> int:
        """Blocks admitting ``request`` takes: exact without sharing (each sequence holds its tokens plus
        the step's one); with sharing a lower bound of one, and the manager decides."""
        if self.sharing:
            return 1
        S = self.block_size
        if self.beam_width > 1:
            kept = self.beam_history.get(request)
            start = len(kept[0]) if kept else self.prompt[request]
            return self.beam_width * blocks_needed(start + 1, S)
        return sum(blocks_needed(self.prompt[request] + done + 1, S)
                   for done, output in zip(self.generated[request], self.output[request]) if done < output)

    def _check_fits(self, trace_name: str) -> None:
        """Every request must fit the empty cache above the watermark: otherwise it could never run."""
        S, copies = self.block_size, self.beam_width
        need = copies * max(sum(blocks_needed(p + o, S) for o in outputs)
                            for p, outputs in zip(self.prompt, self.output))
        room = self.num_blocks - self.watermark_blocks
        if need > room:
            policy = "paged+sharing" if self.sharing else "paged"
            raise ValueError(f"the KV budget is too small: a request of trace {trace_name!r} needs {need} blocks "
                             f"under policy {policy!r}, but only {room} are available")
