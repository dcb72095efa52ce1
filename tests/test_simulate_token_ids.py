"""Token ids for the simulator: two positions share an id exactly when they sit in the same shared prefix."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.sim.token_ids import TokenIds
from pagedkv_lib.sim.workloads import parallel_sampling, shared_prefix, trace_from_lengths


@st.composite
def traces(draw):
    R = draw(st.integers(1, 8))
    prompt = draw(st.lists(st.integers(1, 12), min_size=R, max_size=R))
    output = draw(st.lists(st.integers(1, 12), min_size=R, max_size=R))
    trace = trace_from_lengths(prompt, output, max_context=64)
    if draw(st.booleans()):
        trace = shared_prefix(trace, draw(st.integers(1, 6)), num_prefixes=draw(st.integers(1, 3)),
                              seed=draw(st.integers(0, 5)))
    n = draw(st.integers(1, 3))
    return parallel_sampling(trace, n, independent_lengths=True, seed=draw(st.integers(0, 5))) if n > 1 else trace


@settings(max_examples=100, deadline=None)
@given(trace=traces())
def test_ids_are_equal_exactly_within_a_shared_prefix(trace):
    ids = TokenIds(trace)
    owner = {}  # id -> what the position is: ("prefix", g, pos), ("prompt", r, pos) or ("output", r, j, pos)
    for r in range(len(trace)):
        p, plen, g = int(trace.prompt_len[r]), int(trace.prefix_len[r]), int(trace.prefix_id[r])
        for j in range(trace.num_samples):
            final = p + int(trace.output_len[r, j])
            whole = list(ids.ids(r, j, 0, final))
            assert whole == [i for a in range(final) for i in ids.ids(r, j, a, a + 1)]  # slices agree
            for pos, tok in enumerate(whole):
                what = ("prefix", g, pos) if pos < plen else ("prompt", r, pos) if pos < p else ("output", r, j, pos)
                assert owner.setdefault(tok, what) == what
    fresh = {ids.fresh() for _ in range(5)}
    assert len(fresh) == 5 and not fresh & set(owner)
    assert all(isinstance(t, (int, np.integer)) and t >= 0 for t in owner)
