"""The fast simulator skips quiet steps; the token-by-token reference (``pagedkv_lib.sim.reference``)
visits every step. They must give the same series, at every step, for every series.

The reference shares only the scheduling rules with the simulator and reads the memory
categories straight from the block manager's and the arena's own ledgers.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.accounting import ModelSpec, blocks_needed
from pagedkv_lib.blocks.contiguous import reservation_slots
from pagedkv_lib.sim import CATEGORIES, arrival_steps, beam_search, simulate
from pagedkv_lib.sim.reference import ContiguousByToken, PagedByToken, run_token_by_token
from pagedkv_lib.sim.workloads import parallel_sampling, shared_prefix, trace_from_lengths


@st.composite
def small_traces(draw):
    R = draw(st.integers(1, 12))
    prompt = draw(st.lists(st.integers(1, 40), min_size=R, max_size=R))
    output = draw(st.lists(st.integers(1, 40), min_size=R, max_size=R))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.05, 0.2, 1.0]), min_size=R, max_size=R))
    trace = trace_from_lengths(prompt, output, arrival_s=np.cumsum(gaps), max_context=2048)
    if draw(st.booleans()):
        trace = shared_prefix(trace, draw(st.integers(1, 20)), num_prefixes=draw(st.integers(1, 2)),
                              seed=draw(st.integers(0, 9)))
    n = draw(st.sampled_from([1, 1, 2, 3]))
    if n == 1:
        return trace
    return parallel_sampling(trace, n, independent_lengths=draw(st.booleans()), seed=draw(st.integers(0, 9)))


def _dense(rows, completed, preempted, admitted, num_steps):
    out = {}
    for key in rows[0]:
        if key != "step":
            out[key] = np.zeros(num_steps, dtype=np.int64)
            for row in rows:
                if row["step"] < num_steps:
                    out[key][row["step"]] = row[key]
    for name, steps in (("completed", completed), ("preempted", preempted), ("admitted", admitted)):
        out[name] = np.bincount(np.asarray(steps, dtype=np.int64), minlength=num_steps)[:num_steps]
    return out


@settings(max_examples=60, deadline=None)
@given(trace=small_traces(), S=st.sampled_from([1, 2, 4, 16]), sharing=st.booleans(),
       spare=st.integers(0, 30), watermark=st.sampled_from([0.0, 0.1]), max_batch=st.sampled_from([4, 256]))
def test_paged_series_equal_a_token_by_token_run(trace, S, sharing, spare, watermark, max_batch):
    need = int(((trace.final_len + S - 1) // S).sum(axis=1).max())
    N = need + spare + (blocks_needed(need + spare, 9) + 1 if watermark else 0)  # 90% of N still fits the largest
    max_batch = max(max_batch, trace.num_samples)
    policy = "paged+sharing" if sharing else "paged"
    result = simulate(trace, policy, num_blocks=N, block_size=S, watermark=watermark, max_batch=max_batch,
                      progress=False)
    memory = PagedByToken(trace, N, S, sharing=sharing, watermark_blocks=int(watermark * N))
    ref = run_token_by_token(memory, arrival_steps(trace.arrival_s, 0.05), trace.seqs_per_request, max_batch)
    assert set(ref) <= set(result.series)
    for key, values in ref.items():
        assert np.array_equal(result.series[key], values), key
    total = sum(result.series[c] for c in CATEGORIES)
    assert np.all(total == N * S)


@settings(max_examples=40, deadline=None)
@given(trace=small_traces(), policy=st.sampled_from(["max", "pow2", "oracle"]), extra=st.integers(0, 200),
       max_batch=st.sampled_from([4, 256]), beams=st.sampled_from([1, 1, 2, 3]))
def test_contiguous_series_equal_a_token_by_token_run(trace, policy, extra, max_batch, beams):
    if beams > 1 and trace.num_samples == 1:
        trace = beam_search(trace, beams)
    context = 128
    max_batch = max(max_batch, trace.seqs_per_request)
    need = max(sum(reservation_slots(policy, int(f), context) for f in row) for row in trace.final_len)
    capacity = need * trace.beam_width + extra
    result = simulate(trace, policy, model=ModelSpec("tiny", 1, 1, 8, max_context=context), num_blocks=capacity,
                      block_size=1, max_batch=max_batch, progress=False)
    memory = ContiguousByToken(trace, capacity, policy=policy, context=context)
    ref = run_token_by_token(memory, arrival_steps(trace.arrival_s, 0.05), trace.seqs_per_request, max_batch)
    assert set(ref) <= set(result.series)
    for key, values in ref.items():
        assert np.array_equal(result.series[key], values), key


def test_the_reference_refuses_beam_search_under_paged_memory():
    trace = beam_search(trace_from_lengths([4], [3]), 2)
    with pytest.raises(ValueError, match="the token-by-token reference runs independent samples, not beam search"):
        PagedByToken(trace, 10, 4, sharing=True, watermark_blocks=0)
