"""Playing the page's batch on the real allocators gives the ledger's figures where the shared
prefix fills whole blocks, and exactly prefix % S more stored tokens per further member where not."""
import pytest
from hypothesis import given, settings, strategies as st

from pagedkv_lib.lesson import replay
from pagedkv_lib.accounting import reserved_slots, tail_slack
from pagedkv_lib.ledger import PAGE_BATCH, Request, allocate, without_sharing


@pytest.mark.parametrize("S", [1, 2, 3, 4, 6, 8, 12, 16])
def test_shared_play_matches_the_ledger_up_to_the_partial_prefix_block(S):
    manager = replay.play_paged(PAGE_BATCH, S)
    manager.check_invariants()
    led = allocate(PAGE_BATCH, S).summary()
    got = manager.stats().summary()
    assert got["logical"] == led["logical"] == 46
    assert got["unique"] == led["unique"] + (len(PAGE_BATCH) - 1) * (12 % S)


def test_the_page_batch_at_S8_stores_30_unique_tokens_where_the_ledger_says_22():
    assert replay.play_paged(PAGE_BATCH, 8).stats().unique_tokens == 30
    assert allocate(PAGE_BATCH, 8).unique_tokens == 22


@pytest.mark.parametrize("S", [1, 4, 8, 16])
def test_unshared_play_stores_each_request_as_a_plain_sequence(S):
    """Eq. 3 on T = 15, 17, 14; the ledger without sharing agrees only when the prefix fills whole
    blocks, since it starts every tail in a fresh block."""
    T = [r.tokens for r in PAGE_BATCH]
    got = replay.play_paged(PAGE_BATCH, S, share=False).stats().summary()
    assert got == {"logical": 46, "unique": 46, "reserved": reserved_slots(T, S), "slack": tail_slack(T, S)}
    if 12 % S == 0:
        assert got == allocate(without_sharing(PAGE_BATCH), S).summary()


def test_steps_stop_the_batch_part_way():
    assert replay.live_tokens(PAGE_BATCH, steps=4) == {"A1": 15, "A2": 16, "A3": 14}
    manager = replay.play_paged(PAGE_BATCH, 4, steps=1)
    assert [manager.num_tokens(r.id) for r in PAGE_BATCH] == [13, 13, 13]
    arena = replay.play_contiguous(PAGE_BATCH, "oracle", 32, steps=1)
    assert arena.categories() == {"token_states": 39, "reservation": 7, "internal_fragmentation": 0,
                                  "external_fragmentation": 0, "free": 0}


def test_contiguous_play_reserves_per_policy():
    arena = replay.play_contiguous(PAGE_BATCH, "max", 32)
    assert [arena.placement(r.id)[1] for r in PAGE_BATCH] == [32, 32, 32]
    assert arena.categories()["internal_fragmentation"] == 96 - 46
    assert [replay.play_contiguous(PAGE_BATCH, "pow2", 32).placement(r.id)[1] for r in PAGE_BATCH] == [16, 32, 16]


@pytest.mark.parametrize("call, error, match", [
    (lambda: replay.live_tokens(PAGE_BATCH, steps=-1), ValueError, "steps"),
    (lambda: replay.play_paged([{"id": "x", "prefix": 0, "tail": 3}], 4, steps=0), ValueError,
     "would hold no tokens"),
    (lambda: replay.play_paged(PAGE_BATCH, 0), ValueError, "block_size"),
    (lambda: replay.play_paged(PAGE_BATCH, 4, share="yes"), TypeError, "share must be True or False"),
    (lambda: replay.play_contiguous(PAGE_BATCH, "fifo"), ValueError, "policy"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


batches = st.lists(st.tuples(st.integers(0, 20), st.integers(1, 9), st.sampled_from([None, "g", "h"])),
                   min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(batches, st.integers(1, 8), st.booleans(), st.none() | st.integers(0, 9))
def test_any_batch_plays_to_a_consistent_manager_holding_its_live_tokens(reqs, S, share, steps):
    batch = [Request(f"r{i}", p, t, g) for i, (p, t, g) in enumerate(reqs)]
    live = replay.live_tokens(batch, steps) if steps != 0 or all(r.prefix for r in batch) else None
    if live is None:
        return
    manager = replay.play_paged(batch, S, share=share, steps=steps)
    manager.check_invariants()
    assert {r.id: manager.num_tokens(r.id) for r in batch} == live
    stats = manager.stats()
    assert stats.logical_tokens == sum(live.values()) and stats.unique_tokens <= stats.logical_tokens
    if not share:
        assert stats.unique_tokens == stats.logical_tokens
