"""Paged KV memory for the simulator: the real :class:`~pagedkv_lib.allocator.BlockManager` under load.

Every running sequence is a request of the block manager. Without sharing the manager runs
with prefix caching off and every sequence gets its own blocks (parallel samples and beams
copy their prompt and history). With sharing, prefix caching is on (equal prefixes share
full blocks), parallel samples fork the prompt, and beams fork their parents: shared blocks
are copied on write.

A block at a time. A sequence's token count grows by one per step, but its block count
changes only when a token opens a new block. So the simulator calls the manager only at the
step a sequence writes the first token of a new block, handing it every token written since
the last call up to and including that one; when a sequence finishes or is preempted it
hands over the rest (which never needs a block). The manager thus holds exactly
``ceil(T / S)`` blocks per sequence at every step (``T`` the true token count after the step)
and has cached every block the sequence filled by the time anyone could look it up (only the
sequence itself, prefilled again after a preemption, can match its output's ids), as a
token-by-token run would. Token ids are deterministic per position
(:class:`~pagedkv_lib.sim_token_ids.TokenIds`). Within
a step, releases and block openings run in admission order (then sample index), the order a
token-by-token run uses, so even the cache's eviction order matches
(``tests/test_simulate_reference.py`` checks every series against such a run). Beams choose
their parents every step, so beam groups advance token by token.

Preemption by recompute: when a sequence cannot get a block, the youngest running request
(last admitted) is freed and put back at the head of the queue; on readmission every
unfinished sequence is prefilled again with its prompt and the tokens it had generated
(with sharing on, the prefix cache may still hold some of those blocks).

Invariant the categories rely on (the reference test checks it against the manager's own
unique-token count): at the end of every step a block shared by more than one sequence is full (forks and prefix hits share full blocks; a shared partial block is
copied when the next token is written, which happens in the same step). So the tail slack is
``S * (block-table entries) - logical tokens`` and the stored token states are
``S * used_blocks - slack``.
"""
from __future__ import annotations

import heapq
import operator

import numpy as np

from .accounting import blocks_needed
from .allocator import BlockManager
from .errors import OutOfBlocksError
from .sim_token_ids import TokenIds
from .workloads import Trace

_key = operator.attrgetter("key")


class _Seq:
    """One running sample. It holds ``start`` tokens at its admission step ``adm``, so
    ``start + (t - adm)`` before step ``t``, and finishes at ``final`` tokens. The manager has
    its first ``sent`` tokens (the true count at the last call; less than the true count in
    between, never in another block). ``key`` orders work within a step (admission, then sample)."""

    __slots__ = ("name", "group", "j", "start", "adm", "final", "sent", "alive", "key")

    def __init__(self, name, group, j, start, adm, final):
        self.name, self.group, self.j = name, group, j
        self.start, self.adm, self.final, self.sent = start, adm, final, start
        self.alive = True
        self.key = (group.order, j)


class _Samples:
    """A running request with ``n >= 1`` independent samples; complete when the last one finishes."""

    __slots__ = ("r", "order", "seqs", "left", "alive")

    def __init__(self, r, order):
        self.r, self.order, self.seqs, self.left, self.alive = r, order, [], 0, True


class _Beams:
    """A running beam-search request: ``k`` beams of equal length, ``start`` tokens at step ``adm``.

    ``names`` are the beams' manager ids, ``hist`` their token ids (length ``start + t - adm``
    before step ``t``); ``held`` is every id the group has in the manager (it differs from
    ``names`` only in the middle of a step); ``table`` its block-table entries.
    """

    __slots__ = ("r", "order", "key", "names", "hist", "held", "pending", "start", "adm", "table", "alive")

    def __init__(self, r, order, hist, adm):
        self.r, self.order, self.key, self.hist, self.adm = r, order, (order, 0), hist, adm
        self.start = len(hist[0])
        self.names: list[str] = []
        self.held: dict[str, None] = {}  # insertion-ordered, so frees happen in a fixed order
        self.pending: dict[str, int] = {}  # beams that already wrote this step's token
        self.table = 0
        self.alive = True


class PagedMemory:
    """``num_blocks`` blocks of ``block_size`` slots serving a trace, with or without sharing.

    Levels it reports per visited step: ``used_blocks`` (blocks with a reference; cached free
    blocks count as free), ``table_blocks`` (block-table entries summed over running
    sequences, what the same sequences would hold without sharing) and ``token_jumps``
    (logical tokens added at admissions minus those removed at frees and preemptions).
    """

    LEVELS = ("used_blocks", "table_blocks", "token_jumps")

    def __init__(self, trace: Trace, num_blocks: int, block_size: int, *, sharing: bool,
                 watermark_blocks: int, seed: int):
        self.S, self.N, self.sharing = block_size, num_blocks, sharing
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=sharing)
        self.ids = TokenIds(trace)
        self.watermark = watermark_blocks
        self.rng = np.random.default_rng(seed)
        self.k = trace.beam_width
        self.prompt = trace.prompt_len.tolist()
        self.output = trace.output_len.tolist()
        # What recompute keeps: tokens each sample generated, or each beam's token ids.
        self.progress = [[0] * trace.num_samples for _ in range(len(trace))]
        self.beam_hist: dict[int, list[list[int]]] = {}
        self.running: dict[int, _Samples | _Beams] = {}  # insertion order = admission order
        self.grow: dict[int, list] = {}   # step -> samples opening a block, beam groups stepping
        self.frees: dict[int, list] = {}  # step -> samples / beam groups that finished the step before
        self._heap: list[int] = []
        self.seqs_running = 0
        self.table_blocks = 0
        self.token_jumps = 0
        self._names = 0
        self._admissions = 0

    # ------------------------------------------------------------------ loop protocol

    def levels(self, head: int | None) -> tuple[int, int, int]:
        return (self.N - self.bm.num_free_blocks, self.table_blocks, self.token_jumps)

    def next_event_step(self) -> int | None:
        heap = self._heap
        while heap and heap[0] not in self.grow and heap[0] not in self.frees:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def admit(self, r: int, t: int) -> bool:
        """Prefill request ``r`` (again, after a preemption) and write its step-``t`` tokens.

        Returns False, holding nothing, if that needs more blocks than are free or would leave
        fewer than ``watermark_blocks`` free.
        """
        if self.bm.num_free_blocks - self.watermark < self._need_at_least(r):
            return False
        self._admissions += 1
        if self.k > 1:
            g = _Beams(r, self._admissions, self._beam_start(r), t)
        else:
            g = _Samples(r, self._admissions)
        try:
            if self.k > 1:
                self._admit_beams(g, t)
            else:
                self._admit_samples(g, t)
            if self.bm.num_free_blocks < self.watermark:
                raise OutOfBlocksError(f"admitting request {r} would leave fewer than {self.watermark} blocks free")
        except OutOfBlocksError:
            self._drop(g, t, hand_over=False)
            return False
        self.beam_hist.pop(r, None)
        self.running[r] = g
        return True

    def release(self, t: int) -> tuple[list[int], bool]:
        """Free what finished at step ``t - 1``; return the requests now complete, and whether anything was freed.

        Items of a request preempted since they were scheduled are dead: they free nothing, so
        they do not count (a head that failed to fit is then not retried; see :mod:`.sim_loop`).
        """
        done, items = [], self._due(self.frees, t)
        freed = any(item.alive for item in items)
        for item in items:
            if not item.alive:
                continue
            if isinstance(item, _Beams):
                self._drop(item, t)
                group = item
            else:
                self._free_seq(item, t)
                group = item.group
                group.left -= 1
                if group.left:
                    continue
                group.alive = False
            del self.running[group.r]
            done.append(group.r)
        return done, freed

    def advance(self, t: int) -> list[int]:
        """Open the blocks due at step ``t`` and step the beams; return preempted requests, youngest first."""
        preempted: list[int] = []
        for item in self._due(self.grow, t):
            if not item.alive:
                continue
            if isinstance(item, _Beams):
                self._step_beams(item, t, preempted)
            else:
                self._with_room(lambda: self._open(item, t), item.group, t, preempted)
        return preempted

    def categories(self, series: dict) -> dict[str, np.ndarray]:
        """Per-step memory categories (token slots) and logical tokens from the dense levels.

        Relies on the module's invariant (shared blocks are full): slack is the tail slack of
        each sequence's own last block, ``S * table_blocks - logical``.
        """
        S = self.S
        logical = series["token_jumps"] + np.cumsum(series["running_seqs"])
        slack = S * series["table_blocks"] - logical
        zero = np.zeros_like(logical)
        return {"token_states": S * series["used_blocks"] - slack, "reservation": zero, "internal_fragmentation": zero,
                "external_fragmentation": zero, "slack": slack, "free": S * (self.N - series["used_blocks"]),
                "logical_tokens": logical}

    def summary(self, series: dict) -> dict:
        """Paged figures: blocks saved by sharing, block-table sizes, prefix-cache hits, copies on write."""
        table, seqs = series["table_blocks"].sum(), series["running_seqs"].sum()
        stats = self.bm.stats()
        return {"num_blocks": self.N,
                "sharing_saving": 1.0 - float(series["used_blocks"].sum()) / float(table) if table else 0.0,
                "mean_table_blocks": float(table) / float(seqs) if seqs else 0.0,
                "max_table_blocks": max(blocks_needed(p + max(o), self.S) for p, o in zip(self.prompt, self.output)),
                "prefix_hit_rate": stats.prefix_hit_rate, "cow_copies": stats.cow_copies}

    # ------------------------------------------------------------------ samples

    def _admit_samples(self, g: _Samples, t: int) -> None:
        r, bm, prog = g.r, self.bm, self.progress[g.r]
        fork_from = None
        for j, out in enumerate(self.output[r]):
            if prog[j] == out:
                continue  # this sample had finished before the preemption
            start = self.prompt[r] + prog[j]
            seq = _Seq(self._name(r), g, j, start, t, self.prompt[r] + out)
            if fork_from is not None:
                bm.fork(fork_from, seq.name)
            else:
                bm.add_request(seq.name, self.ids.ids(r, j, 0, start))
                if self.sharing and not any(prog):
                    fork_from = seq.name  # samples of a fresh request fork the prompt
            g.seqs.append(seq)
            self.seqs_running += 1
            self.token_jumps += start
            self.table_blocks += -(-start // self.S)
        g.left = len(g.seqs)
        for seq in g.seqs:
            self._open(seq, t)

    def _open(self, seq: _Seq, t: int) -> None:
        """Write through the token of step ``t`` (the admission's first, or one opening a block); schedule the next."""
        pos = seq.start + (t - seq.adm)
        self._hand_over(seq, pos + 1)
        S = self.S
        nxt = -(-(pos + 1) // S) * S  # the next position that opens a block
        if nxt < seq.final:
            self._at(self.grow, seq.adm + nxt - seq.start, seq)
        else:
            self._at(self.frees, seq.adm + seq.final - seq.start, seq)

    def _hand_over(self, seq: _Seq, stop: int) -> None:
        """Give the manager the ids of positions ``sent..stop-1`` (allocates only if one opens a block)."""
        sent = seq.sent
        if stop <= sent:
            return
        self.bm.append_tokens(seq.name, self.ids.ids(seq.group.r, seq.j, sent, stop))
        self.table_blocks += -(-stop // self.S) - -(-sent // self.S)
        seq.sent = stop

    def _free_seq(self, seq: _Seq, t: int, hand_over: bool = True) -> None:
        """Free a sample as of step ``t``, first handing over the tokens it truly holds (so full blocks are cached)."""
        held = seq.start + (t - seq.adm)
        if hand_over:
            self._hand_over(seq, held)
        self.bm.free(seq.name)
        seq.alive = False
        self.seqs_running -= 1
        self.token_jumps -= held
        self.table_blocks -= -(-seq.sent // self.S)

    # ------------------------------------------------------------------ beams

    def _beam_start(self, r: int) -> list[list[int]]:
        """The beams' token ids to prefill: kept from a preemption, or ``k`` references to the prompt."""
        hist = self.beam_hist.get(r)
        return hist if hist is not None else [list(self.ids.ids(r, 0, 0, self.prompt[r]))] * self.k

    def _admit_beams(self, g: _Beams, t: int) -> None:
        bm = self.bm
        fresh = all(h is g.hist[0] for h in g.hist)
        self.seqs_running += self.k  # counted first: _drop always takes the whole group out
        self.token_jumps += self.k * g.start
        for i, h in enumerate(g.hist):
            name = self._name(g.r)
            if self.sharing and fresh and i > 0:
                bm.fork(g.names[0], name)
            else:
                bm.add_request(name, h)
            g.names.append(name)
            g.held[name] = None
        self._beam_append(g)
        self._schedule_beams(g, t)

    def _step_beams(self, g: _Beams, t: int, preempted: list[int]) -> None:
        """New beams pick parents uniformly at random with replacement; then each appends a token."""
        parents = self.rng.integers(0, self.k, size=self.k).tolist()
        for i, name in enumerate(g.names):
            if i not in parents:
                self.bm.free(name)
                g.held.pop(name, None)
        names, hist, seen = [], [], set()
        for c in parents:
            if c in seen:
                name = self._name(g.r)
                copy = ((lambda c=c, name=name: self.bm.fork(g.names[c], name)) if self.sharing
                        else (lambda c=c, name=name: self.bm.add_request(name, g.hist[c])))
                if not self._with_room(copy, g, t, preempted):
                    return
                g.held[name] = None
            else:
                seen.add(c)
                name = g.names[c]
            names.append(name)
            hist.append(g.hist[c])
        g.names, g.hist = names, hist
        if self._with_room(lambda: self._beam_append(g), g, t, preempted):
            self._schedule_beams(g, t)

    def _beam_append(self, g: _Beams) -> None:
        """Every beam writes one token; resumable: beams that already hold it are skipped on a retry."""
        T, pending = len(g.hist[0]), g.pending
        for name in g.names:
            if name not in pending:
                tok = self.ids.fresh()
                self.bm.append_tokens(name, (tok,))
                pending[name] = tok
        g.hist = [h + [pending[name]] for h, name in zip(g.hist, g.names)]
        pending.clear()
        table = self.k * -(-(T + 1) // self.S)
        self.table_blocks += table - g.table
        g.table = table

    def _schedule_beams(self, g: _Beams, t: int) -> None:
        generated = len(g.hist[0]) - self.prompt[g.r]
        self._at(self.grow if generated < self.output[g.r][0] else self.frees, t + 1, g)

    # ------------------------------------------------------------------ preemption and bookkeeping

    def _with_room(self, op, g, t: int, preempted: list[int]) -> bool:
        """Run ``op``; while it lacks blocks, preempt the youngest request. False if ``g`` itself went."""
        while True:
            try:
                op()
                return True
            except OutOfBlocksError:
                victim = next(reversed(self.running.values()))
                self._preempt(victim, t, preempted)
                if victim is g:
                    return False

    def _preempt(self, g, t: int, preempted: list[int]) -> None:
        """Free every sequence of ``g``; queue it for recompute with what it generated before step ``t``."""
        if isinstance(g, _Beams):
            self.beam_hist[g.r] = [h[:g.start + t - g.adm] for h in g.hist]
        else:
            for seq in g.seqs:
                if seq.alive:
                    self.progress[g.r][seq.j] = seq.start + (t - seq.adm) - self.prompt[g.r]
        self._drop(g, t)
        del self.running[g.r]
        preempted.append(g.r)

    def _drop(self, g, t: int, hand_over: bool = True) -> None:
        """Free whatever ``g`` holds in the manager and take it out of the counters (as of step ``t``).

        ``hand_over=False`` (a failed admission) skips handing over tokens: there are none to give.
        """
        g.alive = False
        if isinstance(g, _Beams):
            for name in g.held:
                self.bm.free(name)
            self.seqs_running -= self.k
            self.token_jumps -= self.k * (g.start + t - g.adm)
            self.table_blocks -= g.table
            return
        for seq in g.seqs:
            if seq.alive:
                self._free_seq(seq, t, hand_over)

    def _need_at_least(self, r: int) -> int:
        """Blocks admitting ``r`` takes: exact without sharing (each sequence fills its current block);
        with sharing a lower bound of one, and the manager decides."""
        if self.sharing:
            return 1
        S = self.S
        if self.k > 1:
            hist = self.beam_hist.get(r)
            start = len(hist[0]) if hist else self.prompt[r]
            return self.k * (start // S + 1)
        return sum((self.prompt[r] + g) // S + 1 for g, out in zip(self.progress[r], self.output[r]) if g < out)

    def _name(self, r: int) -> str:
        self._names += 1
        return f"{r}:{self._names}"

    def _due(self, calendar: dict, t: int) -> list:
        """What ``calendar`` holds for step ``t``, in admission order (then sample index)."""
        items = calendar.pop(t, [])
        if len(items) > 1:
            items.sort(key=_key)
        return items

    def _at(self, calendar: dict, step: int, item) -> None:
        bucket = calendar.get(step)
        if bucket is None:
            calendar[step] = bucket = []
            heapq.heappush(self._heap, step)
        bucket.append(item)
