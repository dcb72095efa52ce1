"""The teaching ledger: the subject page's witness, and identities that hold for every batch."""
import pytest
from hypothesis import given, strategies as st

from pagedkv_lib import accounting as acc
from pagedkv_lib.ledger import PAGE_BATCH, Request, allocate, without_sharing


def test_page_witness_at_block_size_4():
    led = allocate(PAGE_BATCH, block_size=4)
    assert led.summary() == {"logical": 46, "unique": 22, "reserved": 28, "slack": 6}
    assert led.tables == {"A1": [0, 1, 2, 3], "A2": [0, 1, 2, 4, 5], "A3": [0, 1, 2, 6]}


def test_page_witness_at_block_size_8():
    led = allocate(PAGE_BATCH, block_size=8)
    assert (led.reserved_slots, led.slack) == (40, 18)


def test_default_block_size_is_8_and_dicts_work():
    batch = [{"id": r.id, "group": r.group, "prefix": r.prefix, "tail": r.tail} for r in PAGE_BATCH]
    assert allocate(batch) == allocate(PAGE_BATCH, 8)


def test_partial_prefix_block_is_not_filled_by_the_tail():
    # prefix 5 at S=4 leaves 3 free slots in block 1; the page's ledger still starts the tail in a new block
    led = allocate([Request("a", 5, 1, "g")], block_size=4)
    assert led.tables["a"] == [0, 1, 2]
    assert led.slack == 3 * 4 - 6


def test_same_group_different_prefix_lengths_do_not_share():
    led = allocate([Request("a", 8, 0, "g"), Request("b", 4, 0, "g")], block_size=4)
    assert set(led.tables["a"]).isdisjoint(led.tables["b"])


requests = st.lists(
    st.builds(lambda p, t, g: (p, t, g), st.integers(0, 60), st.integers(0, 60),
              st.sampled_from([None, "g1", "g2", "g3"])),
    max_size=12,
).map(lambda rows: [Request(f"r{i}", p, t, g) for i, (p, t, g) in enumerate(rows)])


@given(requests, st.integers(1, 64))
def test_ledger_identities(reqs, S):
    led = allocate(reqs, S)
    distinct = {b for table in led.tables.values() for b in table}
    assert led.reserved_slots == S * len(distinct) == S * led.num_blocks
    assert distinct == set(range(len(distinct)))          # ids are dense, handed out in order
    assert led.slack == led.reserved_slots - led.unique_tokens >= 0
    assert led.unique_tokens <= led.logical_tokens == sum(r.tokens for r in reqs)
    for r in reqs:
        table = led.tables[r.id]
        assert len(table) == len(set(table))              # no block twice in one table
        assert len(table) * S >= r.tokens                  # the table covers the request


@given(requests, st.integers(1, 64))
def test_sharing_never_increases_reserved_slots(reqs, S):
    shared, alone = allocate(reqs, S), allocate(without_sharing(reqs), S)
    assert shared.reserved_slots <= alone.reserved_slots
    assert shared.logical_tokens == alone.logical_tokens == alone.unique_tokens


@given(requests, st.integers(1, 64))
def test_without_sharing_agrees_with_accounting(reqs, S):
    # with no groups, every request's prefix and tail are allocated separately (page semantics)
    led = allocate(without_sharing(reqs), S)
    parts = [n for r in reqs for n in (r.prefix, r.tail)]
    assert led.reserved_slots == acc.reserved_slots(parts, S)
    assert led.slack == acc.tail_slack(parts, S)


@pytest.mark.parametrize("batch, block_size, words", [
    (PAGE_BATCH, 0, ["block_size", "0", ">= 1"]),
    ([Request("a", 1, 1), Request("a", 2, 2)], 4, ["unique", "'a'"]),
    ([{"id": "a", "prefix": -3, "tail": 1}], 4, ["prefix", "'a'", "-3"]),
    ([{"id": "a", "prefix": 2, "tail": 1.5}], 4, ["tail", "1.5", "integer"]),
    ([{"id": "a", "prefix": 2}], 4, ["missing", "tail"]),
    ([{"id": "a", "prefix": 2, "tail": 1, "grp": "x"}], 4, ["unknown", "grp"]),
    ([{"id": "", "prefix": 2, "tail": 1}], 4, ["id", "non-empty"]),
    ({"id": "a", "prefix": 2, "tail": 1}, 4, ["list of requests"]),
])
def test_bad_input_is_explained(batch, block_size, words):
    with pytest.raises((ValueError, TypeError)) as info:
        allocate(batch, block_size)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@given(requests, st.integers(1, 64))
def test_block_fill_accounts_for_every_stored_token(reqs, S):
    led = allocate(reqs, S)
    assert set(led.block_fill) == set(range(led.num_blocks))
    assert all(1 <= f <= S for f in led.block_fill.values())
    assert sum(led.block_fill.values()) == led.unique_tokens
    for r in reqs:   # a request's blocks hold exactly its tokens
        assert sum(led.block_fill[b] for b in led.tables[r.id]) == r.tokens


def test_page_witness_fill_at_block_size_8():
    led = allocate(PAGE_BATCH, 8)
    assert [led.block_fill[b] for b in led.tables["A1"]] == [8, 4, 3]


def test_numpy_lengths_become_python_ints():
    import numpy as np
    r = Request("a", np.int32(2**31 - 1), np.int32(5))
    assert type(r.prefix) is int and r.tokens == 2**31 + 4     # no int32 wrap-around
    small = Request("b", np.int64(12), np.int8(3), "g")
    assert all(type(v) is int for v in allocate([small], np.int64(4)).summary().values())


def test_shared_saved_tokens_is_logical_minus_unique():
    assert allocate(PAGE_BATCH, 8).shared_saved_tokens == 46 - 22 == 24
