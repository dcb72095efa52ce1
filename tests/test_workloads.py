"""Synthetic traces: the datasets' means, the caps, and what each sharing pattern changes."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.sim.workloads import (ALPACA, PAPER_PREFIX_LENGTHS, SHAREGPT, Trace, alpaca_like, beam_search,
                                       parallel_sampling, poisson_arrivals, shared_prefix, sharegpt_like, synthetic,
                                       trace_from_lengths)


@pytest.mark.parametrize("make, params", [(sharegpt_like, SHAREGPT), (alpaca_like, ALPACA)])
def test_means_land_within_4_percent_of_the_papers_dataset_means(make, params):
    trace = make(20_000, seed=1)
    assert trace.prompt_len.mean() == pytest.approx(params["prompt_mean"], rel=0.04)
    assert trace.output_len.mean() == pytest.approx(params["output_mean"], rel=0.04)


@pytest.mark.parametrize("make", [sharegpt_like, alpaca_like])
def test_lengths_are_right_skewed(make):
    trace = make(5000, seed=2)
    for lengths in (trace.prompt_len, trace.output_len[:, 0]):
        assert lengths.mean() > np.median(lengths)
        assert np.percentile(lengths, 99) > 3 * np.median(lengths)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**16), ctx=st.integers(256, 4096),
       make=st.sampled_from([sharegpt_like, alpaca_like]))
def test_every_request_fits_its_context_and_prompts_stay_within_half(n, seed, ctx, make):
    if make is sharegpt_like:
        ctx *= 4  # a context long enough for a 338-token mean output
    trace = make(n, seed=seed, max_context=ctx)
    assert len(trace) == n
    assert trace.prompt_len.min() >= 1 and trace.output_len.min() >= 1
    assert trace.prompt_len.max() <= ctx // 2
    assert trace.final_len.max() <= ctx
    assert np.all(trace.arrival_s == 0)


def test_same_seed_same_trace_other_seed_other_trace():
    a, b, c = sharegpt_like(300, seed=5), sharegpt_like(300, seed=5), sharegpt_like(300, seed=6)
    assert np.array_equal(a.prompt_len, b.prompt_len) and np.array_equal(a.output_len, b.output_len)
    assert not np.array_equal(a.prompt_len, c.prompt_len)


def test_parallel_samples_run_the_requests_length_by_default():
    base = alpaca_like(500, seed=3)
    trace = parallel_sampling(base, 4)
    assert trace.output_len.shape == (500, 4) and trace.num_samples == 4 and trace.seqs_per_request == 4
    assert np.array_equal(trace.prompt_len, base.prompt_len)
    assert np.all(trace.output_len == base.output_len)


def test_independent_sample_lengths_come_from_the_traces_own_lengths():
    base = alpaca_like(500, seed=3)
    trace = parallel_sampling(base, 4, independent_lengths=True, seed=1)
    assert np.array_equal(trace.output_len[:, 0], base.output_len[:, 0])
    assert set(np.unique(trace.output_len[:, 1:])) <= set(np.unique(base.output_len))
    assert np.mean(trace.output_len[:, 1] != trace.output_len[:, 0]) > 0.9
    assert trace.final_len.max() <= base.max_context


def test_beam_search_sets_the_width_and_excludes_parallel_sampling():
    base = alpaca_like(50)
    trace = beam_search(base, 3)
    assert trace.beam_width == 3 and trace.seqs_per_request == 3 and trace.num_samples == 1
    with pytest.raises(ValueError, match="n=1|one sequence"):
        parallel_sampling(trace, 2)
    with pytest.raises(ValueError, match="one sequence"):
        beam_search(parallel_sampling(base, 2), 2)


@pytest.mark.parametrize("prefix_len", PAPER_PREFIX_LENGTHS)
def test_shared_prefix_prepends_the_same_length_to_every_prompt(prefix_len):
    base = sharegpt_like(400, seed=4)
    trace = shared_prefix(base, prefix_len, num_prefixes=3, seed=2)
    assert np.array_equal(trace.prompt_len, base.prompt_len + prefix_len)
    assert np.all(trace.prefix_len == prefix_len)
    assert set(trace.prefix_id.tolist()) == {0, 1, 2}
    assert trace.final_len.max() <= base.max_context
    assert np.all(trace.output_len <= base.output_len)
    with pytest.raises(ValueError, match="already has shared prefixes"):
        shared_prefix(trace, 10)


def test_poisson_arrivals_start_at_zero_and_keep_the_rate():
    trace = poisson_arrivals(alpaca_like(5000, seed=1), 4.0, seed=3)
    gaps = np.diff(trace.arrival_s)
    assert trace.arrival_s[0] == 0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 4.0, rel=0.06)
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.1)  # exponential: std equals mean


def test_trace_arrays_are_read_only():
    trace = alpaca_like(10)
    with pytest.raises(ValueError):
        trace.prompt_len[0] = 5


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(prompt_len=[0, 3], output_len=[1, 1]), ValueError, "prompt_len must be >= 1, got 0"),
    (dict(prompt_len=[4, 3], output_len=[1, -2]), ValueError, "output_len must be >= 1, got -2"),
    (dict(prompt_len=[4.0, 3.0], output_len=[1, 1]), TypeError, "prompt_len must hold integers"),
    (dict(prompt_len=[4, 3], output_len=[1]), ValueError, "equally long"),
    (dict(prompt_len=[], output_len=[]), ValueError, "at least one request"),
    (dict(prompt_len=[4, 3], output_len=[1, 1], arrival_s=[1.0, 0.5]), ValueError, "non-decreasing"),
    (dict(prompt_len=[4, 3], output_len=[1, 1], prefix_id=[0, 0], prefix_len=[5, 3]), ValueError,
     "prefix_len\\[0\\] = 5 exceeds prompt_len\\[0\\] = 4"),
    (dict(prompt_len=[4, 3], output_len=[1, 1], prefix_id=[0, 0], prefix_len=[2, 3]), ValueError,
     "request 1 gives prefix 0 a length of 3 tokens, an earlier request gave it 2"),
    (dict(prompt_len=[4, 3], output_len=[1, 1], prefix_id=[-1, -1], prefix_len=[2, 0]), ValueError,
     "prefix_len 2 but no prefix_id"),
    (dict(prompt_len=[4, 3], output_len=[10, 1], max_context=12), ValueError,
     "request 0 needs 14 tokens, more than max_context=12"),
])
def test_bad_traces_raise_naming_the_field_and_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        trace_from_lengths(**kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda: sharegpt_like(0), "num_requests must be an integer >= 1, got 0"),
    (lambda: sharegpt_like(10, seed=-1), "seed must be an integer >= 0, got -1"),
    (lambda: parallel_sampling(alpaca_like(5), 0), "n must be an integer >= 1, got 0"),
    (lambda: beam_search(alpaca_like(5), 0), "width must be an integer >= 1, got 0"),
    (lambda: poisson_arrivals(alpaca_like(5), 0.0), "rate_per_s must be a number in \\(0.0, inf\\), got 0.0"),
    (lambda: shared_prefix(alpaca_like(5, max_context=256), 250), "leaves no room for output"),
    (lambda: sharegpt_like(5, max_context=256), "prompt_mean must be a number in \\[1.0, 128\\), got 161.31"),
    (lambda: synthetic(5, prompt_mean=0.5, output_mean=10, prompt_sigma=1, output_sigma=1),
     "prompt_mean must be a number in \\[1.0, 1024"),
    (lambda: parallel_sampling("not a trace", 2), "trace must be a Trace, got str"),
])
def test_bad_generator_arguments_raise_naming_the_argument(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def test_describe_reports_the_sharing_pattern():
    trace = poisson_arrivals(shared_prefix(parallel_sampling(alpaca_like(100), 2), 80, num_prefixes=2), 10.0)
    d = trace.describe()
    assert d["requests"] == 100 and d["samples_per_request"] == 2 and d["prefixes"] == 2
    assert d["mean_prompt_tokens"] == pytest.approx(trace.prompt_len.mean())
    assert d["arrival_span_s"] > 0
    assert isinstance(trace, Trace)


def test_a_prefix_id_needs_a_prefix_length_as_in_trace_files():
    with pytest.raises(ValueError, match="request 1 has prefix_id 3 but prefix_len 0; a shared prefix needs "
                                         "prefix_len >= 1"):
        trace_from_lengths([4, 3], [1, 1], prefix_id=[-1, 3], prefix_len=[0, 0])
    trace = trace_from_lengths([4, 3], [1, 1], prefix_id=[10**12, -1], prefix_len=[2, 0])  # any id >= 0 names a prefix
    assert trace.prefix_id.tolist() == [10**12, -1]


def test_an_integer_too_large_for_int64_is_named_not_a_dtype_puzzle():
    with pytest.raises(ValueError, match="prompt_len must hold integers in \\[-2\\*\\*63, 2\\*\\*63\\) \\(int64\\), "
                                         "got 10{30}"):
        trace_from_lengths([10**30, 3], [1, 1])
