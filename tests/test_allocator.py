"""The paged block manager: prefix caching, eviction order, fork and copy-on-write, errors, atomicity."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pagedkv_lib.blocks.manager import (BlockManager, DuplicateRequestError, InvariantError,
                                   UnknownRequestError, slot_mapping_batch)
from pagedkv_lib.errors import OutOfBlocksError, PagedKVError


def state(bm):
    """Everything an atomic call must leave untouched. Reads private structures on purpose:
    the claim under test is that a failed call changes *no* structure, not just the public view."""
    pool, cache = bm._pool, bm._pool.cache
    return (bm.stats(), bm.free_queue(), list(pool.ref_cnt), dict(cache.block_of), list(cache.key), list(cache.uid),
            {rid: (list(s.table), list(s.tokens), s.parent, s.chained) for rid, s in bm._seqs.items()})


# ------------------------------------------------------------------ prefix caching

def test_fresh_pool_hands_out_blocks_in_order():
    bm = BlockManager(8, 4)
    assert bm.add_request("a", range(10)) == 0
    assert bm.block_table("a") == [0, 1, 2]
    assert bm.num_free_blocks == 5


def test_second_prompt_reuses_the_full_blocks_of_a_shared_prefix():
    bm = BlockManager(8, 4)
    bm.add_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert bm.add_request("b", [1, 2, 3, 4, 5, 6, 7, 8, 0, 0]) == 8
    assert bm.block_table("b")[:2] == bm.block_table("a")[:2]
    assert bm.ref_count(bm.block_table("a")[0]) == 2
    assert bm.stats().prefix_hit_tokens == 8 and bm.stats().prefix_queries_tokens == 19


def test_lookup_stops_at_the_first_miss_even_if_later_blocks_match():
    bm = BlockManager(8, 2)
    bm.add_request("a", [1, 2, 3, 4, 5, 6, 0])
    # block 1 differs, so block 2 ([5, 6]) must not be reused although its tokens match
    assert bm.add_request("b", [1, 2, 9, 9, 5, 6, 0]) == 2


def test_last_prompt_token_is_never_served_from_cache():
    bm = BlockManager(8, 4)
    bm.add_request("a", range(8))
    # same 8 tokens: both blocks are cached, but the last token must be computed, so only one is reused
    assert bm.add_request("b", range(8)) == 4
    assert bm.block_table("b")[0] == bm.block_table("a")[0]
    assert bm.block_table("b")[1] != bm.block_table("a")[1]
    # a prompt exactly one cached block long reuses nothing
    assert bm.add_request("c", range(4)) == 0
    bm.check_invariants()


def test_salt_separates_tenants():
    bm = BlockManager(16, 4)
    bm.add_request("a", range(9), salt="tenant-1")
    assert bm.add_request("b", range(9), salt="tenant-2") == 0
    assert bm.add_request("c", range(9), salt="tenant-1") == 8
    assert bm.add_request("d", range(9)) == 0


def test_salts_that_compare_equal_across_types_are_refused_and_distinct_salts_never_share():
    # 1 == 1.0 == True (and they hash alike), so accepting all three would let them share entries.
    bm = BlockManager(32, 4)
    assert bm.add_request("int", range(9), salt=1) == 0
    for salt in (1.0, True):
        with pytest.raises(TypeError, match="salt must be None, a str, bytes, an int"):
            bm.add_request("other", range(9), salt=salt)
    assert "other" not in bm
    assert bm.add_request("str", range(9), salt="1") == 0
    assert bm.add_request("bytes", range(9), salt=b"1") == 0
    assert bm.add_request("tuple", range(9), salt=(1,)) == 0
    assert bm.add_request("tuple2", range(9), salt=("t", 1, None, b"x", (2,))) == 0
    assert bm.add_request("again", range(9), salt=1) == 8  # the same salt still shares
    assert bm.add_request("again-tuple", range(9), salt=(1,)) == 8
    bm.check_invariants()


def test_decode_blocks_are_cached_once_full():
    bm = BlockManager(8, 4)
    bm.add_request("a", [1, 2, 3])
    bm.append_tokens("a", [4, 5, 6])
    bm.free("a")
    assert bm.add_request("b", [1, 2, 3, 4, 5]) == 4


def test_without_prefix_caching_nothing_is_shared_or_kept():
    bm = BlockManager(8, 4, enable_prefix_caching=False)
    bm.add_request("a", range(9))
    assert bm.add_request("b", range(9)) == 0
    bm.free("a")
    assert bm.stats().cached_free_blocks == 0
    bm.check_invariants()


# ------------------------------------------------------------------ free queue and eviction

def test_free_releases_tail_first_so_prefix_blocks_are_evicted_last():
    bm = BlockManager(5, 2)
    bm.add_request("a", [1, 2, 3, 4, 5, 6, 7, 8])  # four full blocks 0..3, all cached
    bm.free("a")
    assert bm.free_queue() == ([4], [3, 2, 1, 0])
    bm.add_request("b", [9, 9, 9])  # needs two blocks: the uncached block 4, then evicts 3
    assert bm.block_table("b") == [4, 3]
    assert bm.stats().evictions == 1
    # the prefix blocks 0 and 1 survived, so the original prompt still hits them
    assert bm.add_request("c", [1, 2, 3, 4, 0]) == 4
    assert bm.block_table("c") == [0, 1, 2]


def test_uncached_free_blocks_are_used_before_any_cached_block_is_evicted():
    bm = BlockManager(4, 2)
    bm.add_request("a", [1, 2, 3, 4])  # blocks 0, 1: cached once full
    bm.add_request("b", [7])           # block 2: partial, never cached
    bm.free("a")
    bm.free("b")
    assert bm.free_queue() == ([2, 3], [1, 0])
    bm.add_request("c", [5, 6, 7, 8])
    assert bm.block_table("c") == [2, 3]
    assert bm.stats().evictions == 0


def test_a_hit_on_a_cached_free_block_takes_it_out_of_the_free_queue():
    bm = BlockManager(4, 2)
    bm.add_request("a", [1, 2, 3])
    bm.free("a")
    assert bm.stats().cached_free_blocks == 1
    before = bm.num_free_blocks
    assert bm.add_request("b", [1, 2, 5]) == 2
    assert bm.stats().cached_free_blocks == 0
    assert bm.num_free_blocks == before - 2  # one hit taken out of the queue, one new block
    assert bm.ref_count(bm.block_table("b")[0]) == 1
    bm.check_invariants()


def test_freeing_everything_returns_every_block():
    bm = BlockManager(16, 4)
    bm.add_request("a", range(13))
    bm.fork("a", "b")
    bm.append_tokens("b", [1, 2, 3, 4, 5])
    bm.add_request("c", range(6))
    for rid in ("a", "b", "c"):
        bm.free(rid)
    s = bm.stats()
    assert (s.used_blocks, s.free_blocks, s.logical_tokens, s.unique_tokens) == (0, 16, 0, 0)
    bm.check_invariants()


# ------------------------------------------------------------------ fork and copy-on-write

def test_fork_shares_every_block_including_the_partial_last_one():
    bm = BlockManager(8, 4)
    bm.add_request("p", range(6))
    bm.fork("p", "c")
    assert bm.block_table("c") == bm.block_table("p")
    assert [bm.ref_count(b) for b in bm.block_table("p")] == [2, 2]
    assert bm.num_free_blocks == 6


def test_writing_a_shared_partial_block_copies_it_first():
    bm = BlockManager(8, 4)
    bm.add_request("p", range(6))
    bm.fork("p", "c")
    src = bm.block_table("p")[-1]
    pairs = bm.append_tokens("p", [7])
    assert pairs == [(src, bm.block_table("p")[-1])] and pairs[0][0] != pairs[0][1]
    # the child is now the only holder of src, so it writes in place
    assert bm.append_tokens("c", [8]) == []
    assert bm.block_table("c")[-1] == src
    assert bm.stats().cow_copies == 1
    bm.check_invariants()


def test_appending_after_a_shared_full_block_needs_no_copy():
    bm = BlockManager(8, 4)
    bm.add_request("p", range(8))
    bm.fork("p", "c")
    assert bm.append_tokens("p", [1]) == [] and bm.append_tokens("c", [2]) == []
    assert bm.block_table("p")[:2] == bm.block_table("c")[:2]
    assert bm.block_table("p")[2] != bm.block_table("c")[2]


def test_slot_mapping_follows_the_block_table():
    bm = BlockManager(8, 4)
    bm.add_request("x", range(3))
    bm.add_request("y", range(100, 110))
    table = bm.block_table("y")
    got = bm.slot_mapping("y", np.arange(10))
    assert got.dtype == np.int64
    assert got.tolist() == [table[p // 4] * 4 + p % 4 for p in range(10)]


@given(st.lists(st.integers(1, 30), min_size=1, max_size=6), st.integers(1, 5), st.data())
def test_batched_slot_mapping_equals_per_request_slot_mapping(lengths, S, data):
    bm = BlockManager(256, S, enable_prefix_caching=False)
    ids = [f"r{i}" for i in range(len(lengths))]
    for rid, T in zip(ids, lengths):
        bm.add_request(rid, [1] * T)
    tables = bm.padded_block_tables(ids)
    pos = np.array([data.draw(st.integers(0, T - 1)) for T in lengths])
    expect = np.array([bm.slot_mapping(rid, [p])[0] for rid, p in zip(ids, pos)])
    assert np.array_equal(slot_mapping_batch(tables, pos, S), expect)
    pos2 = np.stack([pos, np.full_like(pos, -1)], axis=1)  # a padded second column
    out = slot_mapping_batch(tables, pos2, S)
    assert np.array_equal(out[:, 0], expect) and (out[:, 1] == -1).all()


# ------------------------------------------------------------------ running out is atomic

def test_out_of_blocks_on_add_changes_nothing():
    bm = BlockManager(4, 2)
    bm.add_request("a", [1, 2, 3, 4, 5])  # 3 blocks
    bm.free("a")                          # 2 cached free + 1 uncached
    bm.add_request("b", [9])              # takes the uncached one
    before = state(bm)
    with pytest.raises(OutOfBlocksError, match="needs 4 new blocks"):
        bm.add_request("c", [8, 8, 8, 8, 8, 8, 8])  # 4 blocks; 3 free (1 uncached, 2 evictable)
    assert state(bm) == before
    assert isinstance(OutOfBlocksError(), PagedKVError)


def test_out_of_blocks_on_copy_on_write_changes_nothing():
    bm = BlockManager(2, 4)
    bm.add_request("p", range(5))
    bm.fork("p", "c")
    before = state(bm)
    assert not bm.can_append("p")
    with pytest.raises(OutOfBlocksError):
        bm.append_tokens("p", [1])  # the shared partial block needs a copy, and no block is free
    assert state(bm) == before


def test_out_of_blocks_even_when_a_hit_would_otherwise_be_evictable():
    # the only free blocks are the cached ones this prompt hits: they cannot also serve as new blocks
    bm = BlockManager(3, 2)
    bm.add_request("a", [1, 2, 3, 4, 5])
    bm.free("a")
    before = state(bm)
    with pytest.raises(OutOfBlocksError):
        bm.add_request("b", [1, 2, 3, 4, 6, 6, 6])
    assert state(bm) == before


# ------------------------------------------------------------------ bad input

def _loaded():
    bm = BlockManager(8, 4)
    bm.add_request("a", range(5))
    return bm


@pytest.mark.parametrize("call, error, words", [
    (lambda bm: bm.add_request("a", [1]), DuplicateRequestError, "'a' is already a live request"),
    (lambda bm: bm.add_request("b", []), ValueError, "empty prompt"),
    (lambda bm: bm.add_request("", [1]), TypeError, "request_id must be a non-empty string"),
    (lambda bm: bm.add_request(7, [1]), TypeError, "got 7"),
    (lambda bm: bm.add_request("b", [1, -2]), ValueError, "got -2"),
    (lambda bm: bm.add_request("b", [1, 2.0]), TypeError, "got 2.0"),
    (lambda bm: bm.add_request("b", "abc"), TypeError, "got 'abc'"),
    (lambda bm: bm.add_request("b", [1], salt=[1]), TypeError, r"salt must be None, a str.*got \[1\] \(list\)"),
    (lambda bm: bm.add_request("b", [1], salt=1.0), TypeError, r"salt must be None.*got 1.0 \(float\)"),
    (lambda bm: bm.add_request("b", [1], salt=True), TypeError, r"salt must be None.*not a bool.*got True"),
    (lambda bm: bm.add_request("b", [1], salt=("t", True)), TypeError, r"got \('t', True\) \(tuple\)"),
    (lambda bm: bm.append_tokens(["a"], [1]), TypeError, r"^request_id must be a request id.*\['a'\] \(list"),
    (lambda bm: bm.free(["a"]), TypeError, r"^request_id must be a request id.*\['a'\]"),
    (lambda bm: ["a"] in bm, TypeError, r"^request_id must be a request id.*\['a'\]"),
    (lambda bm: bm.fork(["a"], "b"), TypeError, r"^parent_id must be a request id.*\['a'\]"),
    (lambda bm: bm.block_table({"a": 1}), TypeError, r"^request_id must be a request id.*\(dict"),
    (lambda bm: bm.padded_block_tables("ac"), TypeError, r"^request_ids must be a sequence.*got 'ac' \(str\)"),
    (lambda bm: bm.padded_block_tables(["a"], pad=0), ValueError, r"^pad must be an integer <= -1, got 0$"),
    (lambda bm: bm.padded_block_tables(["a"], pad=3), ValueError, r"^pad must be an integer <= -1, got 3$"),
    (lambda bm: bm.padded_block_tables(["a", ["b"]]), TypeError, r"^request_id must be a request id"),
    (lambda bm: bm.append_tokens("zz", [1]), UnknownRequestError, "'zz' is not a live request"),
    (lambda bm: bm.append_tokens("a", [True]), TypeError, "got True"),
    (lambda bm: bm.append_tokens("a", [-1]), ValueError, r"token_ids\[0\] must be an integer >= 0, got -1"),
    (lambda bm: bm.append_tokens("a", [1.0]), TypeError, "got 1.0"),
    (lambda bm: bm.fork("zz", "b"), UnknownRequestError, "parent_id 'zz'"),
    (lambda bm: bm.fork("a", "a"), DuplicateRequestError, "child_id 'a'"),
    (lambda bm: bm.free("zz"), UnknownRequestError, "'zz'"),
    (lambda bm: bm.slot_mapping("a", [5]), ValueError, r"\[0, 4\].*got 5"),
    (lambda bm: bm.slot_mapping("a", [0.5]), TypeError, "float"),
    (lambda bm: bm.ref_count(8), ValueError, "block_id must be an integer in \\[0, 7\\], got 8"),
    (lambda bm: bm.can_append("a", -1), ValueError, "num_tokens"),
])
def test_bad_input_raises_a_clear_error_and_changes_nothing(call, error, words):
    bm = _loaded()
    before = state(bm)
    with pytest.raises(error, match=words):
        call(bm)
    assert state(bm) == before


def test_double_free_is_an_error():
    bm = _loaded()
    bm.free("a")
    with pytest.raises(UnknownRequestError, match="already freed"):
        bm.free("a")


@pytest.mark.parametrize("kwargs, words", [
    ({"num_blocks": 0, "block_size": 4}, "num_blocks must be an integer >= 1, got 0"),
    ({"num_blocks": 4, "block_size": 0}, "block_size must be an integer >= 1, got 0"),
    ({"num_blocks": 4, "block_size": 2.0}, "block_size must be an integer >= 1, got 2.0"),
    ({"num_blocks": 4, "block_size": 4, "enable_prefix_caching": 1}, "enable_prefix_caching"),
])
def test_bad_pool_shape_is_rejected(kwargs, words):
    with pytest.raises((TypeError, ValueError), match=words):
        BlockManager(**kwargs)


def test_numpy_token_ids_are_accepted_and_float_arrays_are_not():
    bm = BlockManager(8, 4)
    bm.add_request("a", np.arange(6, dtype=np.int32))
    bm.append_tokens("a", np.array([7]))
    bm.append_tokens("a", [np.int64(8)])  # a numpy scalar in a list is converted too
    assert bm.token_ids("a") == [0, 1, 2, 3, 4, 5, 7, 8] and type(bm.token_ids("a")[-1]) is int
    with pytest.raises(TypeError, match="dtype float64"):
        bm.append_tokens("a", np.array([1.0]))


def test_check_invariants_names_what_broke():
    bm = _loaded()
    bm._pool.ref_cnt[0] += 1  # corrupt on purpose
    with pytest.raises(InvariantError, match="ref count of block 0 is 2 but 1 tables hold it"):
        bm.check_invariants()


def test_queries_describe_the_live_requests():
    bm = BlockManager(8, 4)
    bm.add_request("a", [3, 1, 4, 1, 5])
    bm.fork("a", "b")
    bm.append_tokens("b", (9, 2))
    assert ("a" in bm, "b" in bm, "c" in bm) == (True, True, False)
    assert bm.num_requests == 2 and bm.request_ids() == ["a", "b"]
    assert bm.token_ids("b") == [3, 1, 4, 1, 5, 9, 2] and bm.num_tokens("a") == 5
    bm.free("a")
    assert "a" not in bm and bm.num_requests == 1 and bm.request_ids() == ["b"]
    bm.request_ids().clear()  # a copy: the manager keeps its requests
    assert bm.request_ids() == ["b"]


@pytest.mark.parametrize("tables, positions, words", [
    ([0, 1], [0], "block_tables must be 2-D"),
    ([[0, 1]], [0, 1], r"positions must have shape \(1,\) or \(1, P\)"),
    ([[0, 1]], [-2], "positions must be >= 0"),
    ([[0, 1]], [8], "needs logical block 2"),
    ([[0, -1]], [5], "padding entry"),
    ([[0.0, 1.0]], [1], "block_tables must hold integers"),
])
def test_batched_slot_mapping_rejects_bad_shapes_and_padding(tables, positions, words):
    with pytest.raises((TypeError, ValueError), match=words):
        slot_mapping_batch(tables, positions, 4)


def test_batched_slot_mapping_of_an_empty_batch_is_empty():
    bm = BlockManager(4, 4)
    tables = bm.padded_block_tables([])
    assert tables.shape == (0, 0) and tables.dtype == np.int64
    for positions in (np.zeros(0, np.int64), np.zeros((0, 3), np.int64), []):
        out = slot_mapping_batch(tables, positions, 4)
        assert out.shape == np.asarray(positions).shape and out.dtype == np.int64


def test_batched_slot_mapping_of_only_padding_reads_no_block():
    # Zero columns: no position may read a block, but padding reads none.
    assert slot_mapping_batch(np.zeros((2, 0), np.int64), [-1, -1], 4).tolist() == [-1, -1]
    assert slot_mapping_batch(np.zeros((1, 0), np.int64), [[-1, -1]], 4).tolist() == [[-1, -1]]
    with pytest.raises(ValueError, match="needs logical block 0, but block_tables have only 0 columns"):
        slot_mapping_batch(np.zeros((2, 0), np.int64), [-1, 0], 4)
    # Padding positions past the table's columns are never looked up either.
    assert slot_mapping_batch([[3]], [[1, -1, -1]], 4).tolist() == [[13, -1, -1]]


def test_batched_slot_mapping_names_a_ragged_argument():
    with pytest.raises(ValueError, match=r"^block_tables must be a rectangular array.*\[\[0, 1\], \[2\]\]"):
        slot_mapping_batch([[0, 1], [2]], [0, 0], 4)
    with pytest.raises(ValueError, match=r"^positions must be a rectangular array"):
        slot_mapping_batch([[0], [1]], [[0, 1], [0]], 4)


def test_padding_of_padded_block_tables_is_never_a_real_block():
    bm = BlockManager(8, 4)
    bm.add_request("long", range(9))
    bm.add_request("short", range(2))
    tables = bm.padded_block_tables(["long", "short"], pad=-5)
    assert tables[1, 1:].tolist() == [-5, -5]
    assert slot_mapping_batch(tables, [8, 1], 4).tolist() == [bm.slot_mapping("long", [8])[0],
                                                               bm.slot_mapping("short", [1])[0]]
    with pytest.raises(ValueError, match="padding entry"):
        slot_mapping_batch(tables, [8, 5], 4)  # "short" has no block 1: its padding is recognised
    assert bm.padded_block_tables(("short",)).tolist() == [bm.block_table("short")]


def test_appends_after_fork_and_after_a_prefix_hit_on_a_full_last_block_stay_correct():
    # The append fast path trusts a per-request capacity; fork and prefix hits must turn it off
    # whenever writing into the last block could touch a block another table holds.
    bm = BlockManager(16, 4)
    bm.add_request("a", [1, 2, 3, 4, 5])        # blocks 0 (full, cached) and 1 (1 token)
    bm.fork("a", "b")
    assert bm.append_tokens("a", [6]) == [(1, 2)]  # shared partial block: copy-on-write
    assert bm.append_tokens("b", [7]) == []        # block 1 is b's alone now: written in place
    assert bm.append_tokens("b", [8]) == []
    assert bm.block_table("a") == [0, 2] and bm.block_table("b") == [0, 1]
    bm.check_invariants()
    bm.add_request("c", [9, 9, 9, 9])           # block 3, full, cached, its last block
    assert bm.add_request("d", [9, 9, 9, 9, 1]) == 4  # d maps c's full last block
    assert bm.append_tokens("c", [5]) == []     # a new block for c; block 3 is never written
    assert bm.block_table("c") == [3, 5] and bm.block_table("d")[0] == 3
    assert bm.token_ids("c") == [9, 9, 9, 9, 5] and bm.token_ids("d") == [9, 9, 9, 9, 1]
    bm.check_invariants()


# ------------------------------------------------------------------ exact prefix chains

# Two different first blocks whose tuples have equal Python hashes (the pair from issue 8).
FIRST, SECOND = [1, 2, 3, 4], [14, 2, 3, 2116210326155295291]
M = 2**61 - 1  # Python hashes an int modulo M, so t and t + M hash alike


def test_the_colliding_pair_collides_in_this_python():
    assert FIRST != SECOND and hash(tuple(FIRST)) == hash(tuple(SECOND))
    assert hash((None, tuple(FIRST), None)) == hash((None, tuple(SECOND), None))  # as hash-chained first blocks


def test_blocks_with_equal_hashes_never_serve_each_others_children():
    bm = BlockManager(16, 4)
    bm.add_request("first", FIRST + [0])                            # caches FIRST
    assert bm.add_request("second", SECOND + [5, 6, 7, 8, 0]) == 0  # SECOND only collides with it
    # [5, 6, 7, 8] was computed after SECOND: a prompt that starts with FIRST must compute it again.
    assert bm.add_request("after-first", FIRST + [5, 6, 7, 8, 0]) == 4
    assert bm.add_request("after-second", SECOND + [5, 6, 7, 8, 0]) == 8
    assert bm.block_table("after-second")[:2] == bm.block_table("second")[:2]
    assert bm.block_table("after-first")[:2] == [bm.block_table("first")[0], bm.block_table("after-first")[1]]
    assert bm.block_table("after-first")[1] != bm.block_table("second")[1]
    bm.check_invariants()


def test_a_block_cached_during_decode_continues_only_its_own_prefix():
    bm = BlockManager(16, 4)
    bm.add_request("first", FIRST + [0])
    bm.add_request("second", SECOND + [5])
    bm.append_tokens("second", [6, 7, 8])                           # its second block fills: cached
    assert bm.add_request("after-first", FIRST + [5, 6, 7, 8, 0]) == 4
    assert bm.add_request("after-second", SECOND + [5, 6, 7, 8, 0]) == 8
    bm.check_invariants()


BLOCKS = [(1, 2), (1 + M, 2), (3, 4), (3 + M, 4)]  # block size 2; each pair has equal hashes


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=3), min_size=1, max_size=6))
def test_a_hit_is_the_longest_exactly_equal_cached_prefix_even_when_hashes_collide(prompts):
    bm = BlockManager(64, 2)  # big enough that nothing is evicted
    computed = set()  # every full-block prefix whose states some request computed
    for i, blocks in enumerate(prompts):
        prompt = [t for block in blocks for t in block] + [0]
        expected = 0
        while expected < len(blocks) and tuple(prompt[:2 * expected + 2]) in computed:
            expected += 1
        assert bm.add_request(f"r{i}", prompt) == 2 * expected
        computed.update(tuple(prompt[:2 * j + 2]) for j in range(len(blocks)))
    bm.check_invariants()


def test_check_invariants_sees_a_request_that_lost_its_place_in_the_chain():
    bm = BlockManager(8, 4)
    bm.add_request("a", range(9))
    bm._seqs["a"].parent = None  # corrupt on purpose: the chain would restart at its third block
    with pytest.raises(InvariantError, match="does not continue the cached block"):
        bm.check_invariants()


def test_check_invariants_sees_a_cached_block_whose_key_names_other_tokens():
    bm = BlockManager(8, 4)
    bm.add_request("a", range(9))
    cache, b = bm._pool.cache, bm.block_table("a")[1]
    key = cache.key[b]
    del cache.block_of[key]
    cache.key[b] = (key[0], (9, 9, 9, 9), key[2])  # corrupt on purpose
    cache.block_of[cache.key[b]] = b
    with pytest.raises(InvariantError, match="holds other tokens than its key"):
        bm.check_invariants()
