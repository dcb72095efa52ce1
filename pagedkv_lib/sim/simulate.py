"""Serving simulator: continuous batching of a request trace under a KV-cache budget.

:func:`simulate` runs one memory policy over a :class:`~pagedkv_lib.sim.workloads.Trace` and returns
a :class:`SimResult` with per-step series (numpy arrays) and a summary dict;
:func:`run_policies` runs several, :func:`compare_policies` returns their summaries as table
rows and :func:`block_size_sweep` varies the paged block size; :func:`~.tables.format_table` prints rows.
The loop itself is :mod:`.loop`; figures are in :mod:`.plots`.

Policies (the PagedAttention paper's Figure 2 systems, and vLLM):

* ``"max"``, ``"pow2"``, ``"oracle"``: each sequence reserves one contiguous range when it is
  admitted, of the model's context length, of the next power of two at or above its final
  length, or of exactly its final length (:mod:`.contiguous_memory`);
* ``"paged"``: blocks of ``block_size`` tokens from the real block manager, nothing shared
  (:mod:`.paged_memory`);
* ``"paged+sharing"``: the same with prefix caching, forked samples and forked beams.

Memory categories, in token slots, summing to the budget at every step:

* ``token_states``: KV states of tokens already in the cache (counted once when shared);
* ``reservation``: contiguous slots reserved for tokens the request will still generate;
* ``internal_fragmentation``: contiguous slots reserved beyond the request's final length;
* ``external_fragmentation``: free contiguous slots in gaps too short for the run the queue's
  head would reserve (the arena's definition, :mod:`pagedkv_lib.blocks.contiguous`); 0 when no one
  waits, and 0 for paged policies, where any free block serves any sequence;
* ``slack``: paged slots after the last token in each sequence's last block (``W``);
* ``free``: the rest.

Shares in the summary are time averages over *occupied* memory (everything but ``free``):
``sum_t category(t) / sum_t (budget - free(t))``. That is what the paper's Figure 2 reports
for a loaded server; an idle cache would otherwise dilute every share. Blocks saved by
sharing are ``1 - sum_t used_blocks(t) / sum_t table_blocks(t)``: physical blocks against the
block-table entries the same sequences hold, what they would need without sharing.

How close this comes to the paper (figures in ``benchmarks/RESULTS.md``, OPT-13B on 40 GiB):

* Token-state share on ShareGPT-like traces: max about 20% (paper 20.4%) and paged about 98%
  (96.3%) agree, and the order max < pow2 < oracle < paged holds; pow2 (about 38% against
  26.8%) and oracle (about 51% against 38.2%) keep more token states than the paper's Orca
  baselines. Likely causes: our arena places exact-size runs first fit, where the paper names
  a buddy allocator (power-of-two splitting) as its source of external fragmentation; our runs
  are offline (every request queued at step 0, the arena always full) where the paper
  averaged over serving experiments at set request rates; our lengths are synthetic.
* Sharing on Alpaca-like traces: parallel sampling saves about 7-12% for n = 2..6 (paper
  6.1-9.8%). Only full prompt blocks stay shared (the last, partly filled prompt block is
  copied when the samples first write), and 19-token prompts hold at most one or two full
  blocks of 16. Beam search saves about 39-64% for k = 2..6 (paper 37.6-55.2%): our beams
  pick parents uniformly at random, a neutral model whose lineages merge within about ``k``
  steps, so beams share nearly all their history; a real model's beams need not, and the
  wider the beam the larger the gap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import loop
from ..validation import check_choice, check_int, check_number
from ..accounting import GiB, get_model, kv_capacity
from .contiguous_memory import ContiguousMemory
from .paged_memory import PagedMemory
from .workloads import Trace

POLICIES = ("max", "pow2", "oracle", "paged", "paged+sharing")
"""Policy names :func:`simulate` accepts, in the order the paper's Figure 2 lists the systems."""

CATEGORIES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "slack", "free")
"""Memory categories of every result, in token slots; they sum to the budget at each step."""

PAPER_TOKEN_STATE_SHARE = {"max": 0.204, "pow2": 0.268, "oracle": 0.382, "paged": 0.963}
"""Share of KV memory holding token states in the paper's Figure 2 (Orca Max/Pow2/Oracle, vLLM)."""

DEFAULT_MAX_STEPS = 10_000_000
"""Most steps :func:`simulate` runs by default: its per-step series then take up to about 1.2 GiB
(some 14 int64 series, plus temporaries while they are built)."""

_BYTES_PER_STEP = 120  # measured peak while building the series: about 112 bytes a step

PAPER_SHARING_SAVING = {"parallel sampling": (0.061, 0.098), "beam search": (0.376, 0.552)}
"""Block savings from sharing on Alpaca in the paper's Figure 15 (range over n or k = 2, 4, 6)."""


@dataclass(frozen=True, eq=False)
class SimResult:
    """One simulated run. ``series[name][t]`` is the state after step ``t``; ``summary`` the headline numbers.

    Series (int64, one entry per step): the :data:`CATEGORIES` (token slots); ``running``
    (requests) and ``running_seqs`` (sequences) in the batch; ``waiting`` requests queued;
    ``admitted``, ``completed`` and ``preempted`` requests at that step; ``logical_tokens``
    (sum of ``T_i`` over running sequences); for paged policies ``used_blocks`` and
    ``table_blocks`` (block-table entries summed over running sequences).
    """

    policy: str
    trace_name: str
    capacity_tokens: int
    block_size: int | None
    series: dict
    summary: dict

    @property
    def num_steps(self) -> int:
        """Steps from step 0 (the first request's arrival) to the step the last request completed, inclusive."""
        return len(self.series["running"])


GPU_MEMORY_GIB = 40.0
"""The GPU memory (GiB) the simulator serves on unless told otherwise, as the lessons' labs do."""


def kv_budget_blocks(model="OPT-13B", gpu_memory_gib: float = GPU_MEMORY_GIB, block_size: int = 16, **kwargs) -> int:
    """Blocks of ``block_size`` tokens the KV cache gets on a GPU of ``gpu_memory_gib`` GiB (via ``kv_capacity``)."""
    gib = check_number("gpu_memory_gib", gpu_memory_gib, low=0.0, high=1e6, low_open=True)
    return kv_capacity(model, int(gib * GiB), block_size=block_size, **kwargs).blocks


def simulate(trace: Trace, policy: str = "paged", *, model="OPT-13B", gpu_memory_gib: float = GPU_MEMORY_GIB,
             num_blocks: int | None = None, block_size: int = 16, max_batch: int = 256,
             watermark: float = 0.01, step_seconds: float = 0.05, seed: int = 0,
             max_steps: int = DEFAULT_MAX_STEPS, progress: bool = True) -> SimResult:
    """Serve ``trace`` with ``policy``; return per-step series and a summary.

    The KV budget is ``num_blocks`` blocks of ``block_size`` tokens if given, otherwise what
    ``kv_capacity`` leaves on a GPU of ``gpu_memory_gib`` GiB next to ``model``'s weights. Every
    policy gets the same ``num_blocks * block_size`` token slots. ``model`` also sets the
    context length (tokens) that ``"max"`` reserves and that no request may exceed.
    ``max_batch`` caps running sequences; paged admission keeps ``watermark`` of the blocks
    free (vLLM's default 1%) so a just-admitted request is not preempted at once.
    ``step_seconds`` turns arrival times into steps, counted from the first arrival: step 0
    starts at ``trace.arrival_s[0]`` (so unix-epoch timestamps work as well as times from 0 s),
    and a request arriving at ``a`` seconds joins the queue at step ``ceil((a - arrival_s[0]) /
    step_seconds)``. ``seed`` drives beam search's choices.

    The series hold one entry per step, idle steps included (about 120 bytes a step), so a run
    may last at most ``max_steps`` steps: a trace whose arrivals span more than that many steps
    is refused before anything is simulated (raise ``step_seconds`` or split the trace), and a
    run that outlasts it is refused before its series are built.
    A tqdm progress bar appears when ``progress`` and the run lasts over a second.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a pagedkv_lib.sim.Trace, got {type(trace).__name__}")
    policy = check_choice("policy", policy, POLICIES)
    spec = get_model(model)
    S = check_int("block_size", block_size, minimum=1)
    N = _budget_blocks(spec, gpu_memory_gib, num_blocks, S)
    max_batch = check_int("max_batch", max_batch, minimum=1)
    frac = check_number("watermark", watermark, low=0.0, high=1.0, high_open=True)
    step_s = check_number("step_seconds", step_seconds, low=0.0, high=math.inf, low_open=True, high_open=True)
    seed = check_int("seed", seed, minimum=0)
    max_steps = check_int("max_steps", max_steps, minimum=1)
    context = spec.max_context or int(trace.final_len.max())
    _check_fits(trace, context, max_batch)
    memory: loop.KVMemory
    if policy in ("paged", "paged+sharing"):
        memory = PagedMemory(trace, N, S, sharing=policy == "paged+sharing", watermark_blocks=int(frac * N),
                             seed=seed)
    else:
        memory = ContiguousMemory(trace, N * S, policy=policy, context=context)
    arrival_step = arrival_steps(trace.arrival_s, step_s, max_steps)
    rec = _serve(memory, trace, policy, arrival_step, max_batch, max_steps, progress)
    series = rec.dense(max(rec.completed) + 1, arrival_step)
    series.update(memory.categories(series))
    del series["token_jumps"]
    paged_block_size = S if isinstance(memory, PagedMemory) else None
    summary = _summarize(trace, policy, series, N * S, paged_block_size, memory)
    return SimResult(policy, trace.name, N * S, paged_block_size, series, summary)


def _budget_blocks(spec, gpu_memory_gib: float, num_blocks: int | None, S: int) -> int:
    """``num_blocks`` if given (checked), else the blocks of ``S`` tokens ``spec`` leaves on the GPU."""
    if num_blocks is not None:
        return check_int("num_blocks", num_blocks, minimum=1)
    N = kv_budget_blocks(spec, gpu_memory_gib, S)
    if N < 1:
        raise ValueError(f"a GPU of {gpu_memory_gib} GiB leaves no room for a single block of {S} tokens "
                         f"of {spec.name}")
    return N


def _serve(memory, trace: Trace, policy: str, arrival_step: np.ndarray, max_batch: int, max_steps: int,
           progress: bool) -> loop.Record:
    """Run the loop (with a progress bar if asked); refuse a run longer than ``max_steps`` before densifying it."""
    bar = _progress_bar(progress, len(trace), f"{policy} on {trace.name}")
    try:
        rec = loop.run(memory, arrival_step, trace.seqs_per_request, max_batch, bar)
    finally:
        if bar is not None:
            bar.close()
    num_steps = max(rec.completed) + 1
    if num_steps > max_steps:
        raise ValueError(f"the run of trace {trace.name!r} under policy {policy!r} lasted {num_steps:,} steps, more "
                         f"than max_steps={max_steps:,} (its per-step series would take about "
                         f"{_size_text(num_steps * _BYTES_PER_STEP)}); raise max_steps or serve fewer requests")
    return rec


def arrival_steps(arrival_s, step_seconds: float, max_steps: int = DEFAULT_MAX_STEPS) -> np.ndarray:
    """The step at which each arrival joins the queue, counting from the first arrival (step 0).

    ``arrival_s`` are non-decreasing times in seconds (a trace's ``arrival_s``); a request
    arriving at ``a`` gets step ``ceil((a - arrival_s[0]) / step_seconds)``. An arrival past a
    step boundary by no more than float rounding (of the division, or of the times themselves:
    unix times near 1.7e9 s resolve only about 2.4e-7 s), and at most a thousandth of a step,
    counts as on it. Raises ``ValueError``, before allocating anything per step, when the last
    arrival would come at step ``max_steps`` or later.
    """
    step_s = check_number("step_seconds", step_seconds, low=0.0, high=math.inf, low_open=True, high_open=True)
    max_steps = check_int("max_steps", max_steps, minimum=1)
    arrival = np.asarray(arrival_s, dtype=np.float64)
    if arrival.ndim != 1 or len(arrival) == 0:
        raise ValueError(f"arrival_s must be a non-empty 1-d array of times in seconds, got shape {arrival.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        slack = min(1e-9 + 4 * float(np.spacing(np.abs(arrival).max())) / step_s, 1e-3)
        raw = (arrival - arrival[0]) / step_s
        steps = np.ceil(raw - slack) if raw[-1] < max_steps + 1 else raw  # inf or huge: refused below
    last = float(steps[-1])
    if not last < max_steps:  # compared in float, before any cast to int64 could overflow
        span = float(arrival[-1] - arrival[0])
        raise ValueError(f"arrival_s spans {span:g} s from the first arrival, which is {_count_text(last)} steps of "
                         f"step_seconds={step_s:g}; at most max_steps={max_steps:,} steps are allowed (each step "
                         f"keeps one entry per series, about {_BYTES_PER_STEP} bytes); raise step_seconds or "
                         f"max_steps, or split the trace")
    return np.maximum(steps, 0).astype(np.int64)


def run_policies(trace: Trace, policies=POLICIES, **kwargs) -> list[SimResult]:
    """Run :func:`simulate` once per policy (same budget and options); return the results in order."""
    if isinstance(policies, str):
        policies = [policies]
    policies = [check_choice("policies", p, POLICIES) for p in policies]
    if not policies:
        raise ValueError(f"policies must name at least one of {', '.join(map(repr, POLICIES))}; got none")
    return [simulate(trace, p, **kwargs) for p in policies]


def compare_policies(trace: Trace, policies=POLICIES, **kwargs) -> list[dict]:
    """One summary row per policy (list of dicts, a table a notebook can print with :func:`~.tables.format_table`)."""
    return [r.summary for r in run_policies(trace, policies, **kwargs)]


def block_size_sweep(trace: Trace, block_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), **kwargs) -> list[dict]:
    """Run ``"paged+sharing"`` at each block size; rows with slack share, sharing saving, tables.

    The budget stays the same in bytes (whole blocks of each size fit into it).
    """
    sizes = [check_int("block_sizes", s, minimum=1) for s in block_sizes]
    if not sizes:
        raise ValueError("block_sizes must hold at least one block size (an integer >= 1); got none")
    return [simulate(trace, "paged+sharing", block_size=s, **kwargs).summary for s in sizes]


def _check_fits(trace: Trace, context: int, max_batch: int) -> None:
    """Every request must fit the model's context and the batch limit (each memory checks its own budget)."""
    final = trace.final_len
    worst = int(final.max())
    if worst > context:
        r = int(np.argmax(final.max(axis=1)))
        raise ValueError(f"request {r} of trace {trace.name!r} needs {worst} tokens, more than the model's "
                         f"context of {context} tokens")
    k = trace.seqs_per_request
    if k > max_batch:
        raise ValueError(f"max_batch={max_batch} is smaller than the {k} sequences each request runs")


def _summarize(trace, policy, series, capacity, S, memory) -> dict:
    occupied = float(np.sum(capacity - series["free"]))
    running = series["running"]
    busy = running > 0
    out = {"policy": policy, "trace": trace.name, "requests": len(trace), "steps": len(running),
           "capacity_tokens": capacity, "block_size": S}
    for c in CATEGORIES[:-1]:
        out[f"share_{c}"] = float(series[c].sum()) / occupied if occupied else 0.0
    out.update({
        "mean_batch": float(running[busy].mean()) if busy.any() else 0.0,
        "peak_batch": int(running.max()),
        "peak_seqs": int(series["running_seqs"].max()),
        "preemptions": int(series["preempted"].sum()),
        "requests_per_step": len(trace) / len(running),
    })
    out.update(memory.summary(series))
    return out


def _count_text(steps: float) -> str:
    return f"{steps:,.0f}" if steps < 1e15 else f"{steps:.3g}"


def _size_text(nbytes: int) -> str:
    return f"{nbytes / GiB:,.1f} GiB" if nbytes >= GiB / 10 else f"{nbytes / 2**20:,.1f} MiB"


def _progress_bar(progress: bool, total: int, desc: str):
    """A tqdm.auto bar that shows itself only once a run has lasted a second (``delay``)."""
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="req", delay=1.0, leave=False)
