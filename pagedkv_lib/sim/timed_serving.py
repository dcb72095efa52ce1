"""A serving loop in seconds: chunked prefill under a token budget, and preemption by swap or recompute.

The step simulator (:mod:`.loop`) counts memory; this one adds time, to ask what a scheduling
choice costs a user. Each step of the engine runs a batch of at most ``token_budget`` tokens
and lasts ``decode_step_s + prefill_tokens * prefill_token_s + moved_bytes / link_bytes_per_s``
(reading the weights once per step, computing the prefill tokens, and swapping over the host
link, serially: a deliberately simple model whose constants live in :mod:`.preemption_cost`).

Two schedules:

* **no chunking** (vLLM's first scheduler): when a waiting request fits, the step is a
  *prefill step*: it admits whole prompts, first come first served, while they fit the budget
  and memory, and no running request decodes: every one of them **stalls** for the step;
* **chunked prefill** (vLLM v1, Hugging Face transformers' continuous batching): every running
  request decodes one token first, then prompts fill what is left of the budget in chunks, the
  oldest unfinished prompt first. Decodes never stall; a long prompt takes several steps.

Memory: ``num_blocks`` blocks of ``block_size`` tokens (counted, not named: a request of ``k``
KV tokens holds ``ceil(k / S)``, as in a full-attention model; no prefix sharing). A swap moves
:func:`~pagedkv_lib.accounting.hybrid_kv_bytes` of the request's ``k`` tokens each way. When a decode needs a block and none is
free, the youngest running request is preempted:

* ``"recompute"``: its blocks are dropped and it goes back to the head of the queue, to prefill
  its prompt and the tokens it generated again;
* ``"swap"``: its blocks move to host memory (``cpu_blocks`` of room; when full, it is
  recomputed), and it resumes, before any new admission, once its blocks fit again, paying the
  transfer back;
* ``"cheaper"``: whichever :func:`~.preemption_cost.cheaper_preemption` says costs less for it.

With ``prefix_caching=True`` (vLLM v1's default), a request preempted by recompute leaves its full
blocks in the free queue as a cached prefix, put back tail-first: free blocks are reused from the
queue's head, so the blocks other requests take first are its *last* ones, and what is left of it
is always a prefix. When it is admitted again, those surviving blocks are prefix-cache hits
(``reused_tokens``) and only the rest is prefilled again. (vLLM does this by hashing block
contents; here no two requests share a prompt, so a preempted request is the only one that can hit
its own blocks, and :class:`_FreeQueue` tracks that by owner.)

Where a run's time went: :meth:`TimedResult.time_parts` splits its makespan into the steps' weight reads, the
prompts' prefill, prefill again after a recompute, swap transfers and idle time (:mod:`.makespan_gap` sets two
runs side by side); read-only counters beside it say how often a swap-in was undone in its own step and how
many steps a swapped request held back admissions.

Per-request semantics: a prefill that completes produces the request's next token (its first,
or the next one after a recompute); each decode step writes the last token's K/V and produces
the next. A request holds ``prompt + generated - 1`` KV tokens while it decodes.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..accounting import blocks_needed, get_model, hybrid_kv_bytes
from ..validation import check_choice, check_int, check_number
from .preemption_cost import (DEFAULT_FLOPS_PER_S, H100_SXM_HBM_BYTES_PER_S, PCIE4_X16_BYTES_PER_S,
                              cheaper_preemption, weights_seconds_per_token)
from .timed_result import TimedResult
from .workloads import Trace

PREEMPTIONS = ("recompute", "swap", "cheaper")
"""Preemption modes :func:`serve_timed` accepts."""


def decode_step_seconds(model="OPT-13B", hbm_bytes_per_s: float = H100_SXM_HBM_BYTES_PER_S) -> float:
    """A decode step's floor: reading the weights once (``weight_bytes / hbm_bytes_per_s``)."""
    spec = get_model(model)
    if spec.weight_bytes is None:
        raise ValueError(f"model {spec.name!r} has no num_params: pass decode_step_s")
    return spec.weight_bytes / hbm_bytes_per_s


def serve_timed(trace: Trace, *, num_blocks: int, block_size: int = 16, token_budget: int = 2048,
                chunked_prefill: bool = True, preemption: str = "recompute", cpu_blocks: int = 0,
                prefix_caching: bool = False, max_running: int = 256, model="OPT-13B",
                link_bytes_per_s: float = PCIE4_X16_BYTES_PER_S,
                flops_per_s: float = DEFAULT_FLOPS_PER_S, prefill_tokens_per_s: float | None = None,
                decode_step_s: float | None = None) -> TimedResult:
    """Serve a single-sample ``trace`` step by step; return times, stalls and preemptions (:class:`TimedResult`)."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a pagedkv_lib.sim.Trace, got {type(trace).__name__}")
    if trace.num_samples > 1 or trace.beam_width > 1:
        raise ValueError(f"serve_timed serves one sequence per request; trace {trace.name!r} has n="
                         f"{trace.num_samples}, beam_width={trace.beam_width}")
    for name, flag in (("chunked_prefill", chunked_prefill), ("prefix_caching", prefix_caching)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    engine = _Engine(trace, check_int("num_blocks", num_blocks, minimum=1), check_int("block_size", block_size, minimum=1),
                     check_int("token_budget", token_budget, minimum=1), chunked_prefill, prefix_caching,
                     check_choice("preemption", preemption, PREEMPTIONS), check_int("cpu_blocks", cpu_blocks, minimum=0),
                     check_int("max_running", max_running, minimum=1), get_model(model),
                     check_number("link_bytes_per_s", link_bytes_per_s, low=0.0, high=float("inf"), low_open=True,
                                  high_open=True),
                     check_number("flops_per_s", flops_per_s, low=0.0, high=float("inf"), low_open=True, high_open=True),
                     prefill_tokens_per_s, decode_step_s)
    return engine.run()


class _Engine:
    """The state of one run; :meth:`run` steps it until every request has finished."""

    def __init__(self, trace, num_blocks, S, budget, chunked, prefix_caching, preemption, cpu_blocks, max_running,
                 spec, link, flops, prefill_tps, decode_s):
        self.S, self.num_blocks, self.budget, self.chunked = S, num_blocks, budget, chunked
        self.preemption, self.cpu_blocks, self.max_running, self.spec = preemption, cpu_blocks, max_running, spec
        self.link, self.flops, self.prefill_tps = link, flops, prefill_tps
        self.prefill_token_s = weights_seconds_per_token(spec, prefill_tps, flops)
        self.decode_s = decode_step_seconds(spec) if decode_s is None else check_number(
            "decode_step_s", decode_s, low=0.0, high=float("inf"), high_open=True)
        self.prompt = trace.prompt_len.tolist()
        self.output = trace.output_len[:, 0].tolist()
        self.arrival = (trace.arrival_s - trace.arrival_s[0]).tolist()
        R = len(self.prompt)
        longest = max(p + o for p, o in zip(self.prompt, self.output))
        if blocks_needed(longest, S) > num_blocks:
            raise ValueError(f"num_blocks={num_blocks} is too small: a request of trace {trace.name!r} needs "
                             f"{blocks_needed(longest, S)} blocks of {S} tokens")
        if not chunked and longest > budget:
            raise ValueError(f"token_budget={budget} is too small without chunked prefill: a request of "
                             f"{longest} tokens may have to be prefilled in one step")
        self.kv = [0] * R           # KV tokens in GPU blocks
        self.target = list(self.prompt)  # tokens to prefill before decoding (prompt, or prompt + generated)
        self.generated = [0] * R
        self.last_token = [0.0] * R
        self.ttft = [0.0] * R
        self.finish = [0.0] * R
        self.waiting: deque[int] = deque()
        self.swapped: deque[int] = deque()
        self.running: list[int] = []  # admission order
        self.used = 0                 # GPU blocks held
        self.free_queue = _FreeQueue(num_blocks) if prefix_caching else None
        self.cpu_used = 0
        self.gaps: list[float] = []
        self.counts = dict(stalled=0, steps=0, swap=0, recompute=0, swapped_bytes=0, recomputed=0, peak=0, step_max=0,
                           reused=0, prefilled=0, swapped_tokens=0, undone=0, undone_bytes=0, held=0)
        self.idle_s = 0.0
        self.swapped_in_now: set[int] = set()  # requests swapped back in during the current step

    # ------------------------------------------------------------------ the loop

    def run(self) -> TimedResult:
        R, now, arrived, done = len(self.prompt), 0.0, 0, 0
        while done < R:
            while arrived < R and self.arrival[arrived] <= now:
                self.waiting.append(arrived)
                arrived += 1
            if not (self.running or self.waiting or self.swapped):
                self.idle_s += self.arrival[arrived] - now
                now = self.arrival[arrived]
                continue
            now, finished = self._step(now)
            done += finished
        c = self.counts
        return TimedResult(np.array(self.ttft), np.array(self.finish), np.array(self.gaps), c["stalled"], c["steps"],
                           c["swap"], c["recompute"], c["swapped_bytes"], c["recomputed"], c["peak"], c["step_max"],
                           c["reused"], prompt_tokens=sum(self.prompt), prefill_tokens=c["prefilled"],
                           idle_s=self.idle_s, decode_step_s=self.decode_s, prefill_token_s=self.prefill_token_s,
                           link_bytes_per_s=self.link, swapped_tokens=c["swapped_tokens"], undone_swaps=c["undone"],
                           undone_swap_bytes=c["undone_bytes"], admissions_held_steps=c["held"])

    def _step(self, now: float) -> tuple[float, int]:
        """One engine step from time ``now``; returns the time it ends and how many requests finished."""
        moved = self._resume_swapped()
        if self.swapped and self.waiting:
            self.counts["held"] += 1
        decoding = [r for r in self.running if self.kv[r] >= self.target[r]]
        prefill_step = not self.chunked and self._head_fits()
        opening = 0  # blocks the decodes open at the step's end
        if prefill_step:
            self.counts["stalled"] += len(decoding)
            decoding = []
        else:
            decoding, swapped_out, opening = self._make_room(decoding)
            moved += swapped_out
        prefilled, completed = self._schedule_prefill(self.budget - len(decoding), opening)
        if not (decoding or prefilled or moved) and self.running:
            moved += self._preempt(self.running[-1])  # prompts stuck without blocks: free the youngest
        end = now + self.decode_s + prefilled * self.prefill_token_s + moved / self.link
        self.counts["steps"] += 1
        self.counts["prefilled"] += prefilled
        self.counts["step_max"] = max(self.counts["step_max"], prefilled + len(decoding))
        self.counts["peak"] = max(self.counts["peak"], self.used + opening)
        finished = self._decode(decoding, end)
        for r in completed:
            finished += self._token(r, end)
        return end, finished

    def _decode(self, decoding: list[int], t: float) -> int:
        """Every request in ``decoding`` writes its last token's K/V and produces the next at time ``t``.

        The hot loop (once per generated token): :meth:`_token` inlined, for a request that has
        produced its first token already. Returns how many requests finished.
        """
        S, kv, last, generated, output, gaps = self.S, self.kv, self.last_token, self.generated, self.output, self.gaps
        finished = 0
        for r in decoding:
            if kv[r] % S == 0:
                self._take(1)  # this token's K/V opens a block (_make_room kept one free)
            kv[r] += 1
            gaps.append(t - last[r])
            last[r] = t
            generated[r] += 1
            if generated[r] == output[r]:
                self.finish[r] = t
                self._give_back(r)
                self.running.remove(r)
                finished += 1
        return finished

    def _token(self, r: int, t: float) -> int:
        """Request ``r`` produces a token at time ``t``; returns 1 if that was its last (its blocks are freed)."""
        if self.generated[r] == 0:
            self.ttft[r] = t - self.arrival[r]
        else:
            self.gaps.append(t - self.last_token[r])
        self.last_token[r] = t
        self.generated[r] += 1
        if self.generated[r] < self.output[r]:
            return 0
        self.finish[r] = t
        self._give_back(r)
        self.running.remove(r)
        return 1

    # ------------------------------------------------------------------ memory: blocks, preemption and resumption

    def _take(self, blocks: int) -> None:
        """Allocate ``blocks`` free blocks (with prefix caching, from the free queue's head: an eviction)."""
        self.used += blocks
        if self.free_queue is not None:
            self.free_queue.take(blocks)

    def _give_back(self, r: int, keep_cached: bool = False) -> None:
        """Free request ``r``'s blocks; with ``keep_cached`` its full blocks stay cached for it (tail-first)."""
        blocks = blocks_needed(self.kv[r], self.S)
        self.used -= blocks
        if self.free_queue is not None:
            full = self.kv[r] // self.S if keep_cached else 0
            self.free_queue.put(blocks - full)      # a partly filled last block is never cached
            self.free_queue.put(full, owner=r)

    def _make_room(self, decoding: list[int]) -> tuple[list[int], int, int]:
        """Preempt the youngest running requests until every decode's next block fits; return the decodes left,
        the bytes swapped out, and how many blocks those decodes will open."""
        S, moved = self.S, 0
        need = sum(self.kv[r] % S == 0 for r in decoding)
        while need > self.num_blocks - self.used:
            victim = self.running[-1]
            if victim in decoding and self.kv[victim] % S == 0:
                need -= 1
            if victim in decoding:
                decoding.remove(victim)
            moved += self._preempt(victim)
        return decoding, moved, need

    def _preempt(self, r: int) -> int:
        """Take request ``r``'s blocks away by swap or recompute; return the bytes swapped out."""
        blocks = blocks_needed(self.kv[r], self.S)
        self.running.remove(r)
        mode = self.preemption
        if mode == "cheaper":
            mode = cheaper_preemption(self.kv[r], self.spec, link_bytes_per_s=self.link, flops_per_s=self.flops,
                                      prefill_tokens_per_s=self.prefill_tps)
        swap = mode == "swap" and self.cpu_used + blocks <= self.cpu_blocks
        self._give_back(r, keep_cached=not swap)
        if swap:
            self.cpu_used += blocks
            self.swapped.append(r)
            self.counts["swap"] += 1
            moved = hybrid_kv_bytes(self.spec, self.kv[r])
            self.counts["swapped_bytes"] += moved
            self.counts["swapped_tokens"] += self.kv[r]
            if r in self.swapped_in_now:   # back in at this step's start, out again: the round trip bought nothing
                self.counts["undone"] += 1
                self.counts["undone_bytes"] += 2 * moved
            return moved
        self.counts["recompute"] += 1
        self.counts["recomputed"] += self.kv[r]
        self.kv[r] = 0
        self.target[r] = self.prompt[r] + self.generated[r]
        self.waiting.appendleft(r)
        return 0

    def _resume_swapped(self) -> int:
        """Swap requests back in, oldest first, while their blocks fit; return the bytes moved."""
        moved = 0
        if self.swapped_in_now:
            self.swapped_in_now.clear()
        while self.swapped and len(self.running) < self.max_running:
            r = self.swapped[0]
            blocks = blocks_needed(self.kv[r], self.S)
            if blocks > self.num_blocks - self.used:
                break
            self.swapped.popleft()
            self.cpu_used -= blocks
            self._take(blocks)
            self.running.append(r)
            self.swapped_in_now.add(r)
            moved += hybrid_kv_bytes(self.spec, self.kv[r])
            self.counts["swapped_bytes"] += hybrid_kv_bytes(self.spec, self.kv[r])
        return moved

    # ------------------------------------------------------------------ prefill

    def _head_fits(self) -> bool:
        """Without chunking: can the queue's head be admitted whole now (the step is then a prefill step)?"""
        if not self.waiting or self.swapped or len(self.running) >= self.max_running:
            return False
        r = self.waiting[0]
        return blocks_needed(self.target[r], self.S) <= self.num_blocks - self.used

    def _schedule_prefill(self, budget: int, reserved: int) -> tuple[int, list[int]]:
        """Prefill tokens within ``budget``: unfinished prompts of running requests first, then admissions.

        ``reserved`` free blocks are left for the step's decodes. Returns the tokens prefilled and
        the requests whose prefill completed this step. Without chunking a prompt is prefilled
        whole or not at all. Admission is first come, first served: the first waiting request that
        does not fit stops it.
        """
        S, total, completed = self.S, 0, []
        if self.chunked:
            for r in self.running:
                if budget <= 0:
                    break
                if self.kv[r] < self.target[r]:
                    take = self._chunk(r, budget, reserved)
                    budget, total = budget - take, total + take
                    if self.kv[r] == self.target[r]:
                        completed.append(r)
        while self.waiting and budget > 0 and not self.swapped and len(self.running) < self.max_running:
            r = self.waiting[0]
            cached = self.free_queue.cached(r) if self.free_queue is not None else 0  # blocks still holding r's prefix
            if not self.chunked and self.target[r] - cached * S > budget:
                break
            if blocks_needed(min(self.target[r], cached * S + budget), S) > self.num_blocks - self.used - reserved:
                break
            self.waiting.popleft()
            self.running.append(r)
            if self.free_queue is not None:
                self.free_queue.reuse(r)
            if cached:
                self.used += cached
                self.kv[r] = cached * S
                self.counts["reused"] += cached * S
                self.counts["recomputed"] -= cached * S
            take = self._chunk(r, budget, reserved)
            budget, total = budget - take, total + take
            if self.kv[r] == self.target[r]:
                completed.append(r)
        return total, completed

    def _chunk(self, r: int, budget: int, reserved: int) -> int:
        """Prefill as much of request ``r``'s remaining prompt as the budget and the free blocks but
        ``reserved`` allow."""
        S = self.S
        free_slots = (self.num_blocks - self.used - reserved) * S + (-self.kv[r]) % S
        take = min(self.target[r] - self.kv[r], budget, free_slots)
        self._take(blocks_needed(self.kv[r] + take, S) - blocks_needed(self.kv[r], S))
        self.kv[r] += take
        return take


class _FreeQueue:
    """The free blocks in the order they are reused (vLLM's free block queue), counted, not named.

    ``runs`` holds ``[owner, count]`` from the head (reused first) to the tail; owner ``None``
    marks blocks that hold nothing anyone will ask for. A preempted request's full blocks are one
    run, put back tail-first: its last block nearest the head. Taking blocks from the head eats
    a run from its head, that is, the request's last blocks first, so what is left of the run is
    always the request's first ``count`` blocks: a prefix it can hit.
    """

    def __init__(self, num_blocks: int):
        self.runs: deque[list] = deque([[None, num_blocks]])
        self.by_owner: dict[int, list] = {}

    def put(self, count: int, owner: int | None = None) -> None:
        """Blocks freed: at the tail (reused last)."""
        if count:
            run = [owner, count]
            self.runs.append(run)
            if owner is not None:
                self.by_owner[owner] = run

    def take(self, count: int) -> None:
        """Reuse ``count`` blocks from the head (the caller knows that many are free)."""
        while count:
            run = self.runs[0]
            step = min(count, run[1])
            run[1] -= step
            count -= step
            if run[1] == 0:
                self.runs.popleft()

    def cached(self, owner: int) -> int:
        """How many of ``owner``'s first blocks are still in the queue."""
        run = self.by_owner.get(owner)
        return run[1] if run else 0

    def reuse(self, owner: int) -> None:
        """``owner``'s cached blocks, if any are left, leave the queue (a prefix hit); :meth:`take` drops
        the emptied run when it reaches it."""
        run = self.by_owner.pop(owner, None)
        if run is not None:
            run[1] = 0
