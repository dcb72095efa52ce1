"""Hash-chained prefix caching (vLLM v1 style) against the exact tree: same hits, same evictions; and its price.

The exact tree (:class:`BlockManager`) is the reference: over random traces of add / append /
fork / free, the hashed manager must return the same hits and the same copy pairs, hold the
same block tables, keep the same free queue (uncached stack and LRU order of cached blocks) and
count the same evictions, after every step, with every collision-free hash. Then the price:
a short hash collides, and a collision serves a wrong hit the tree never serves.
"""
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from pagedkv_lib.blocks.block_hash import (HASH_BITS, HASH_FUNCTIONS, builtin_hash, chain_hashes,
                                           collision_probability, find_collision, sha256, truncated_hash,
                                           wrong_hit_probability)
from pagedkv_lib.blocks.hashed_prefix_cache import HashedBlockManager
from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.errors import InvariantError, OutOfBlocksError

SYSTEMS = [(), (1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9, 9, 9), (5,) * 12, (1, 2)]


def _view(bm):
    """What must agree between the two managers: tables, tokens, ref counts, the free queue, event counts."""
    s = bm.stats()
    return ({r: (bm.block_table(r), bm.token_ids(r)) for r in bm.request_ids()},
            [bm.ref_count(b) for b in range(bm.num_blocks)], bm.free_queue(),
            (s.evictions, s.prefix_hit_tokens, s.blocks_allocated, s.blocks_freed, s.cow_copies))


def _apply(bm, op):
    """Run one operation; return its result or the type of the error it raised."""
    kind, *args = op
    try:
        if kind == "add":
            rid, prompt, salt = args
            return bm.add_request(rid, prompt, salt=salt)
        if kind == "append":
            return bm.append_tokens(*args)
        if kind == "fork":
            return bm.fork(*args)
        return bm.free(*args)
    except OutOfBlocksError:
        return OutOfBlocksError


@st.composite
def traces(draw):
    """A random operation sequence over a small pool, with shared system prompts so prefixes repeat."""
    ops, live, n = [], [], 0
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["add", "add", "append", "append", "fork", "free"]))
        if kind == "add" or not live:
            n += 1
            prompt = list(draw(st.sampled_from(SYSTEMS))) + draw(st.lists(st.integers(0, 3), max_size=9))
            ops.append(("add", f"r{n}", prompt or [0], draw(st.sampled_from([None, None, "tenant"]))))
            live.append(f"r{n}")
        elif kind == "append":
            ops.append(("append", draw(st.sampled_from(live)), draw(st.lists(st.integers(0, 3), max_size=6))))
        elif kind == "fork":
            n += 1
            ops.append(("fork", draw(st.sampled_from(live)), f"r{n}"))
            live.append(f"r{n}")
        else:
            rid = draw(st.sampled_from(live))
            live.remove(rid)
            ops.append(("free", rid))
    return ops


@settings(max_examples=150, deadline=None)
@given(ops=traces(), S=st.sampled_from([1, 2, 4]), num_blocks=st.integers(4, 24),
       hash_name=st.sampled_from(sorted(HASH_FUNCTIONS)))
def test_hashed_manager_makes_the_same_hits_and_evictions_as_the_exact_tree(ops, S, num_blocks, hash_name):
    tree, hashed = BlockManager(num_blocks, S), HashedBlockManager(num_blocks, S, hash_fn=hash_name)
    live = set()
    for op in ops:
        if op[0] in ("append", "free") and op[1] not in live or op[0] == "fork" and op[1] not in live:
            continue
        want, got = _apply(tree, op), _apply(hashed, op)
        assert got == want, op
        if want is not OutOfBlocksError:
            if op[0] in ("add", "fork"):
                live.add(op[-1] if op[0] == "fork" else op[1])
            elif op[0] == "free":
                live.discard(op[1])
        assert _view(hashed) == _view(tree), op
        hashed.check_invariants()
        tree.check_invariants()


def test_only_full_blocks_are_keyed_and_the_last_prompt_token_is_computed():
    bm = HashedBlockManager(16, 4)
    assert bm.add_request("a", list(range(8))) == 0
    assert len(bm.prefix_cache) == 2                       # two full blocks, keyed
    assert bm.add_request("b", list(range(8))) == 4        # 8 tokens: the block of token 7 is computed again
    assert bm.add_request("c", list(range(9))) == 8        # 9 tokens: both full blocks hit
    assert bm.add_request("d", list(range(6))) == 4
    bm.check_invariants()


def test_a_finished_request_goes_back_tail_first_so_its_last_blocks_are_evicted_first():
    bm = HashedBlockManager(8, 2)
    bm.add_request("a", [1, 2, 3, 4, 5, 6, 7])   # blocks 0, 1, 2 full, 3 partial
    bm.free("a")
    uncached, cached = bm.free_queue()
    assert cached == [2, 1, 0]                   # LRU front first: the tail block is evicted first
    assert uncached[0] == 3                      # the partial block is not cached (and is reused first)
    bm.add_request("big", list(range(100, 111)))  # 11 tokens: 6 blocks, so one cached block is evicted
    assert bm.stats().evictions == 1
    bm.free("big")
    assert bm.add_request("again", [1, 2, 3, 4, 5, 6, 7]) == 4  # blocks 0 and 1 survived
    bm.check_invariants()


def test_salt_enters_the_first_key_and_separates_every_later_block():
    assert chain_hashes([1, 2, 3, 4], 2, salt="a") != chain_hashes([1, 2, 3, 4], 2, salt="b")
    assert chain_hashes([1, 2, 3, 4], 2, salt="a")[1] != chain_hashes([1, 2, 3, 4], 2)[1]
    bm = HashedBlockManager(8, 2)
    bm.add_request("a", [1, 2, 3, 4, 5], salt="a")
    assert bm.add_request("b", [1, 2, 3, 4, 5], salt="b") == 0
    assert bm.add_request("c", [1, 2, 3, 4, 5], salt="a") == 4


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(st.integers(0, 5), max_size=24), S=st.integers(1, 4), salt=st.sampled_from([None, "t", 7, ("x", 1)]),
       cut=st.integers(0, 6))
def test_every_key_of_a_salted_request_is_the_one_chain_rule(tokens, S, salt, cut):
    """Keys extended from block ``cut`` continue the whole chain; the cache keys a salted prompt's blocks with
    exactly those keys; and the salt is in block 0's hash only (block 1 hashed on block 0's key, no salt)."""
    keys = chain_hashes(tokens, S, salt=salt)
    cut = min(cut, len(keys))
    assert keys[:cut] + chain_hashes(tokens, S, salt=salt, start=cut, parent=keys[cut - 1] if cut else None) == keys
    if len(keys) >= 2:
        assert keys[1] == sha256(keys[0], tuple(tokens[S:2 * S]), ())
        assert keys[0] == sha256(None, tuple(tokens[:S]), () if salt is None else (salt,))
    bm = HashedBlockManager(16, S)
    if tokens and len(tokens) <= 16 * S:
        bm.add_request("r", tokens, salt=salt)
        assert [bm.prefix_cache.node_of(b) for b in bm.block_table("r")[:len(keys)]] == keys
        bm.check_invariants()


def test_extending_keys_needs_the_parent_of_the_first_block():
    keys = chain_hashes([1, 2, 3, 4], 2, salt="a")
    with pytest.raises(ValueError, match="parent"):
        chain_hashes([1, 2, 3, 4], 2, salt="a", start=1)
    with pytest.raises(ValueError, match="parent"):
        chain_hashes([1, 2, 3, 4], 2, start=0, parent=keys[0])
    with pytest.raises(ValueError, match="start"):
        chain_hashes([1, 2, 3, 4], 2, start=-1)


def test_keys_have_a_constant_size_whatever_the_prefix_length():
    keys = chain_hashes(list(range(4096)), 16, hash_fn="sha256")
    assert {len(k) for k in keys} == {32}
    assert {len(k) for k in chain_hashes(list(range(4096)), 16, hash_fn="blake2b-64")} == {8}
    assert chain_hashes([2**70, 1], 2) != chain_hashes([1, 2**70], 2)  # huge token ids are encoded too


def test_a_16_bit_hash_collides_and_serves_a_wrong_hit_that_the_tree_never_serves():
    short = truncated_hash("sha256", 16)
    a, b = find_collision(short, 4)
    assert a != b and short(None, a, ()) == short(None, b, ())
    hashed, tree = HashedBlockManager(8, 4, hash_fn=short), BlockManager(8, 4)
    for bm in (hashed, tree):
        bm.add_request("first", list(a) + [7])
    assert hashed.add_request("second", list(b) + [7]) == 4        # a wrong hit: b is served a's states
    assert hashed.block_table("second")[0] == hashed.block_table("first")[0]
    assert tree.add_request("second", list(b) + [7]) == 0          # the exact tree compares tokens
    hashed.check_invariants()                                     # keys are consistent: nothing notices


def test_pythons_builtin_hash_collides_on_crafted_token_ids():
    M = 2**61 - 1                                  # Python hashes ints modulo 2**61 - 1
    assert builtin_hash(None, (1, 2), ()) == builtin_hash(None, (1 + M, 2), ())
    bm = HashedBlockManager(8, 2, hash_fn="builtin")
    bm.add_request("a", [1, 2, 3])
    assert bm.add_request("b", [1 + M, 2, 3]) == 2  # a wrong hit
    assert HashedBlockManager(8, 2, hash_fn="sha256").add_request("a", [1 + M, 2, 3]) == 0


def test_birthday_bound_matches_the_exact_product_and_the_textbook_half_point():
    for n, b in [(10, 8), (300, 16), (5000, 32)]:
        exact = 1 - math.prod(1 - i / 2**b for i in range(n))
        assert collision_probability(n, b) == pytest.approx(exact, rel=0.02)
    assert collision_probability(2**32, 64) == pytest.approx(1 - math.exp(-0.5), rel=1e-6)
    assert collision_probability(10**9, 256) > 0.0          # tiny, but not rounded to zero
    assert collision_probability(10**9, 256) < collision_probability(10**9, 64) < 0.03
    assert wrong_hit_probability(1000, 64, lookups=10**6) == pytest.approx(1000 * 10**6 / 2**64, rel=1e-6)
    assert wrong_hit_probability(2**16, 16) == 1.0 and wrong_hit_probability(0, 16, 5) == 0.0
    assert HASH_BITS == {"builtin": 64, "blake2b-64": 64, "sha256": 256}


def test_birthday_bound_predicts_collisions_of_a_truncated_hash():
    """Seeded experiment: how often n random blocks share a 12-bit key, against the bound."""
    short, rng, n, trials = truncated_hash("blake2b-64", 12), random.Random(0), 60, 400
    hits = 0
    for _ in range(trials):
        keys = [short(None, (rng.randrange(2**62), rng.randrange(2**62)), ()) for _ in range(n)]
        hits += len(set(keys)) < n
    p = collision_probability(n, 12)
    assert abs(hits / trials - p) < 4 * math.sqrt(p * (1 - p) / trials)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="hash_fn"):
        HashedBlockManager(4, 2, hash_fn="md5")
    with pytest.raises(ValueError, match="bits"):
        truncated_hash("sha256", 0)
    with pytest.raises(ValueError, match="num_cached_blocks"):
        wrong_hit_probability(-1, 64)
    with pytest.raises(ValueError, match="no collision"):
        find_collision(sha256, 2, max_tries=100)


def test_the_invariant_check_catches_a_block_holding_the_wrong_key():
    bm = HashedBlockManager(8, 2)
    bm.add_request("a", [1, 2, 3, 4, 5])
    bm.prefix_cache._key_of[bm.block_table("a")[1]] = b"\x00" * 32   # corrupt on purpose
    with pytest.raises(InvariantError, match="key"):
        bm.check_invariants()
