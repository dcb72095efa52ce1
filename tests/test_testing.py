"""The shared paged-batch builder: its cache holds each request's logical K/V at its slots, garbage elsewhere."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention.batch import boundary_lengths, random_paged_batch


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


def _cells(picture: str) -> str:
    """The slot letters of a PagedBatch.draw picture, block after block."""
    return "".join(line.split("|")[1].replace(" ", "") for line in picture.splitlines() if "|" in line)


def test_slot_owner_names_the_request_of_every_token_and_draw_shows_it():
    b = random_paged_batch([3, 6], block_size=4, spare_blocks=1, seed=2)   # 1 + 2 + 1 blocks of 4 slots
    owner = b.slot_owner()
    assert [int((owner == r).sum()) for r in range(2)] == [3, 6] and int((owner == -1).sum()) == 16 - 9
    cells = _cells(b.draw())
    assert (cells.count("a"), cells.count("b"), cells.count(".")) == (3, 6, 7)
    assert b.draw().splitlines()[0] == f"a: T=3, blocks {b.owned_blocks()[0]}"
    read = owner[None] == torch.arange(2)[:, None, None]
    read[0, b.block_tables[1, 0], 0] = True                                  # request a strays into b's block
    cells = _cells(b.draw(read))
    assert (cells.count("!"), cells.count("A"), cells.count("B"), cells.count(".")) == (1, 3, 5, 7)


def test_slots_read_finds_what_a_function_of_the_cache_depends_on():
    """slots_read runs the function once per slot: here a 'decode' that reads block 0, slot 1 only."""
    b = random_paged_batch([2, 2], block_size=2, spare_blocks=0, shuffle=False, garbage=0.0)

    def reads_one_slot(q, k_cache, v_cache, tables, lens):
        return q + k_cache[0, 1].sum() + v_cache[0, 1].sum()

    read = b.slots_read(reads_one_slot)
    assert read.shape == (2, 2, 2) and read[:, 0, 1].all() and int(read.sum()) == 2
