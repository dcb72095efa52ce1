"""The shared paged-batch builder: its cache holds each request's logical K/V at its slots, garbage elsewhere."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.testing import boundary_lengths, random_paged_batch


@settings(max_examples=30, deadline=None)
@given(lens=st.lists(st.integers(1, 40), min_size=1, max_size=5), S=st.sampled_from([1, 3, 4, 16]),
       shuffle=st.booleans(), seed=st.integers(0, 10))
def test_each_token_sits_at_its_slot_and_every_other_slot_is_garbage(lens, S, shuffle, seed):
    b = random_paged_batch(lens, block_size=S, shuffle=shuffle, seed=seed)
    flat_k = b.k_cache.view(-1, *b.k_cache.shape[2:])
    for r, t in enumerate(lens):
        pos = torch.arange(t)
        slots = b.block_tables[r, pos // S] * S + pos % S
        assert torch.equal(flat_k[slots], b.keys[r])
    owned = b.owned_slots()
    assert int(owned.sum()) == sum(lens)
    assert torch.isnan(b.k_cache[~owned]).all() and torch.isnan(b.v_cache[~owned]).all()
    ids = [i for row in b.owned_blocks() for i in row]
    assert len(ids) == len(set(ids)), "no physical block is owned twice"


def test_boundary_lengths_cover_one_and_every_residue_that_breaks_kernels():
    S = 16
    assert {t % S for t in boundary_lengths(S)} >= {0, 1, S - 1} and 1 in boundary_lengths(S)
