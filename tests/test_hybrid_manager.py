"""Hybrid models (sliding-window + full-attention layers): the grouped block manager and its accounting.

The worked examples of vLLM's ``docs/design/hybrid_kv_cache_manager.md`` come first (allocation
of a 112-token request; a full-attention hit found left to right; the sliding-window hits of a
15-token prompt, found right to left), then property tests: after every random operation the
manager's invariants hold, every prompt's hit is the longest prefix a brute-force check accepts
in every group, and a manager whose groups are all full attention behaves exactly like the plain
block manager.
"""
import collections.abc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pagedkv_lib import accounting as acc
from pagedkv_lib.accounting import ModelSpec
from pagedkv_lib.blocks.block_hash import chain_hashes
from pagedkv_lib.blocks.hybrid_manager import HybridBlockManager
from pagedkv_lib.blocks.hybrid_prefix_hits import full_attention_hit, longest_common_hit, sliding_window_hit
from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.errors import DuplicateRequestError, InvariantError, OutOfBlocksError, UnknownRequestError

# The doc's case-2 model: 10 full-attention and 20 sliding-window layers of one kv hidden size.
DOC_MODEL = ModelSpec("doc case 2", 30, 1, 64, sliding_window=32, num_sliding_layers=20)


# ------------------------------------------------------------------ the doc's worked examples

def test_doc_allocation_example_112_tokens_take_11_blocks():
    """Block size 16, window 32, 112 tokens: 7 blocks for the full group, 2 for each sliding group."""
    groups = acc.kv_cache_groups(DOC_MODEL)
    assert (groups.group_layers, groups.full_groups, groups.sliding_groups) == (10, 1, 2)
    bm = HybridBlockManager.for_model(DOC_MODEL, num_blocks=64, block_size=16)
    assert bm.windows == (None, 32, 32)
    bm.add_request("r", list(range(112)))
    full, sw1, sw2 = bm.block_tables("r")
    assert len(full) == len(sw1) == len(sw2) == 7
    assert None not in full
    assert sw1[:5] == sw2[:5] == [None] * 5          # the doc's "/": no block for early tokens
    assert None not in sw1[5:] + sw2[5:]
    held = {b for t in (full, sw1, sw2) for b in t if b is not None}
    assert len(held) == 11 == acc.hybrid_blocks_per_request(DOC_MODEL, 112, 16)
    assert 64 - bm.num_free_blocks == 11
    bm.check_invariants()


def test_doc_full_attention_hit_is_scanned_left_to_right():
    cached = {0, 1, 2, 3, 4, 5, 6, 8, 9}              # block 7 missing: later ones do not count
    assert full_attention_hit(cached.__contains__, 10) == 7
    assert full_attention_hit(cached.__contains__, 3) == 3


def test_doc_sliding_window_hits_of_a_15_token_prompt():
    """Window 4, block size 1, 15-token prompt: hits of 5, 6 and 14 tokens are possible; 14 is found first."""
    cached = {2, 3, 4, 5, 11, 12, 13}
    valid = [h for h in range(15) if all(i in cached for i in range(max(0, h - 4 + 1), h))]
    assert valid == [0, 5, 6, 14]
    assert sliding_window_hit(cached.__contains__, 14, window=4, block_size=1) == 14
    assert sliding_window_hit(cached.__contains__, 13, window=4, block_size=1) == 6
    assert sliding_window_hit(cached.__contains__, 5, window=4, block_size=1) == 5
    assert sliding_window_hit(cached.__contains__, 4, window=4, block_size=1) == 0


def test_doc_intersection_takes_the_sliding_hit_within_the_full_hit():
    full_cached, sw_cached = set(range(10)), {2, 3, 4, 5, 11, 12, 13}
    scans = [lambda lim: full_attention_hit(full_cached.__contains__, lim),
             lambda lim: sliding_window_hit(sw_cached.__contains__, lim, 4, 1)]
    assert longest_common_hit(scans, 14) == 6


# ------------------------------------------------------------------ the manager under random traces

def _valid_hit(bm, keys, h):
    """Brute force: does every group still hold every block the token after an ``h``-block prefix reads?"""
    S = bm.block_size
    for g, w in enumerate(bm.windows):
        first = 0 if w is None else max(0, h * S - w + 1) // S
        if any(bm._cache.cached_block((g, keys[i])) is None for i in range(first, h)):
            return False
    return True


@st.composite
def hybrid_traces(draw):
    ops, live, n = [], [], 0
    base = draw(st.lists(st.integers(0, 2), min_size=0, max_size=24))
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["add", "add", "append", "append", "free"]))
        if kind == "add" or not live:
            n += 1
            cut = draw(st.integers(0, len(base)))
            ops.append(("add", f"r{n}", base[:cut] + draw(st.lists(st.integers(0, 2), min_size=1, max_size=8))))
            live.append(f"r{n}")
        elif kind == "append":
            ops.append(("append", draw(st.sampled_from(live)), draw(st.lists(st.integers(0, 2), max_size=7))))
        else:
            rid = draw(st.sampled_from(live))
            live.remove(rid)
            ops.append(("free", rid))
    return ops


@settings(max_examples=150, deadline=None)
@given(ops=hybrid_traces(), S=st.sampled_from([1, 2, 4]), num_blocks=st.integers(6, 60),
       windows=st.lists(st.one_of(st.none(), st.integers(1, 9)), min_size=1, max_size=4))
def test_invariants_hold_and_every_hit_is_the_longest_valid_one(ops, S, num_blocks, windows):
    windows = [None] + windows
    bm, live = HybridBlockManager(num_blocks, S, windows, hash_fn="blake2b-64"), set()
    for kind, rid, *arg in ops:
        if kind != "add" and rid not in live:
            continue
        try:
            if kind == "add":
                keys = chain_hashes(arg[0], S, hash_fn="blake2b-64")
                limit = (len(arg[0]) - 1) // S
                best = max(h for h in range(limit + 1) if _valid_hit(bm, keys, h))
                assert bm.add_request(rid, arg[0]) == best * S
                live.add(rid)
            elif kind == "append":
                bm.append_tokens(rid, arg[0])
            else:
                bm.free(rid)
                live.discard(rid)
        except OutOfBlocksError:
            pass
        bm.check_invariants()
        for r in live:  # a sliding group never holds more than its window needs
            T = bm.num_tokens(r)
            for w, table in zip(bm.windows, bm.block_tables(r)):
                held = sum(b is not None for b in table)
                assert held == (acc.blocks_needed(T, S) if w is None else acc.window_blocks(T, w, S))


@settings(max_examples=100, deadline=None)
@given(ops=hybrid_traces(), S=st.sampled_from([1, 2, 4]), num_blocks=st.integers(4, 30))
def test_with_only_full_attention_it_is_the_plain_block_manager(ops, S, num_blocks):
    hybrid, plain, live = HybridBlockManager(num_blocks, S, [None]), BlockManager(num_blocks, S), set()
    for kind, rid, *arg in ops:
        if kind != "add" and rid not in live:
            continue
        results = []
        for bm in (hybrid, plain):
            try:
                results.append(bm.add_request(rid, arg[0]) if kind == "add" else
                               bm.append_tokens(rid, arg[0]) if kind == "append" else bm.free(rid))
            except OutOfBlocksError:
                results.append(OutOfBlocksError)
        assert results[0] == results[1] or kind == "append" and results == [None, []]
        if results[1] is not OutOfBlocksError:
            (live.add if kind == "add" else live.discard if kind == "free" else lambda r: None)(rid)
        assert hybrid.free_queue() == plain.free_queue()
        assert {r: hybrid.block_tables(r)[0] for r in live} == {r: plain.block_table(r) for r in live}


def test_out_of_blocks_changes_nothing_and_bad_arguments_are_named():
    bm = HybridBlockManager(6, 4, [None, 4])
    bm.add_request("a", list(range(9)))
    before = (bm.free_queue(), bm.block_tables("a"))
    with pytest.raises(OutOfBlocksError):
        bm.add_request("b", list(range(100, 120)))
    with pytest.raises(OutOfBlocksError):
        bm.append_tokens("a", list(range(20)))
    assert (bm.free_queue(), bm.block_tables("a")) == before
    bm.check_invariants()
    with pytest.raises(ValueError, match="windows"):
        HybridBlockManager(8, 4, [16, 16])
    with pytest.raises(ValueError, match=r"windows\[1\] must be an integer >= 1, got 0"):
        HybridBlockManager(8, 4, [None, 0])
    for bad in (32, "None", None):
        with pytest.raises(TypeError, match=f"windows must be a sequence .*got {bad!r}"):
            HybridBlockManager(8, 4, bad)


def test_the_invariant_check_catches_a_block_kept_behind_the_window():
    bm = HybridBlockManager(32, 2, [None, 2])
    bm.add_request("a", list(range(9)))
    req = bm._requests["a"]
    req.tables[1][0] = req.tables[0][0]  # pretend the sliding group still holds block 0
    with pytest.raises(InvariantError, match="window"):
        bm.check_invariants()


@pytest.mark.parametrize("corrupt, says", [
    (lambda bm: bm._pool._ref_cnt.__setitem__(bm.block_tables("a")[0][0], 2), "ref count of block"),
    (lambda bm: bm._pool._free.append(bm.block_tables("a")[0][-1]), "either in the free queue or referenced"),
    (lambda bm: bm._cache.name_block(bm.free_queue()[0][0], (0, b"stale")), "uncached free block"),
])
def test_the_shared_free_queue_checks_catch_a_broken_pool(corrupt, says):
    """The hybrid manager's invariants include the plain manager's free-queue checks (:func:`check_free_queue`)."""
    bm = HybridBlockManager(32, 2, [None, 2])
    bm.add_request("a", list(range(9)))
    bm.check_invariants()
    corrupt(bm)
    with pytest.raises(InvariantError, match=says):
        bm.check_invariants()


def test_ps2_q9s_worked_example_is_what_the_library_and_the_manager_count():
    """The numbers ps2 Q9's text gives (gpt-oss-20b, T = 4,100, S = 8, 6 GiB), from the accounting and from a
    real manager, and the slip it names (bytes per token from B(T), no whole blocks) off by one."""
    import json
    from pathlib import Path
    cells = json.loads((Path(__file__).parents[1] / "solutions/ps2_math/ps2_math.ipynb").read_text())["cells"]
    text = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("## Q9"))
    assert "holds 530 blocks (513 in the full-attention group, 17 in the sliding-window group), and 61" in text
    assert "instead gives 62" in text
    name, T, S, kv = "gpt-oss-20b", 4100, 8, 6 * acc.GiB
    assert acc.hybrid_blocks_per_request(name, T, S) == 530
    cap = acc.hybrid_kv_capacity(name, kv, T, weight_bytes=0, utilization=1.0, block_size=S)
    assert cap.requests == 61 and kv // acc.hybrid_kv_bytes(acc.get_model(name), T) == 62
    spec = acc.get_model(name)
    bm = HybridBlockManager(kv // cap.page_bytes, S, windows=[None, spec.sliding_window])
    bm.add_request("r", list(range(T)))
    assert [sum(b is not None for b in t) for t in bm.block_tables("r")] == [513, 17]  # None: freed


def test_gemma_3_preset_groups_and_blocks():
    spec = acc.get_model("Gemma-3-27B")
    assert (spec.num_layers, spec.num_sliding_layers, spec.num_full_layers, spec.sliding_window) == (62, 52, 10, 1024)
    assert acc.kv_cache_groups(spec) == acc.KVCacheGroups(10, 1, 6, 8)
    bm = HybridBlockManager.for_model(spec, num_blocks=2000, block_size=16)
    bm.add_request("r", list(range(3000)))
    held = {b for t in bm.block_tables("r") for b in t if b is not None}
    assert len(held) == acc.hybrid_blocks_per_request(spec, 3000, 16) == 188 + 6 * 65  # the window straddles 65 blocks
    assert "Gemma-3-27B" in acc.HYBRID_SOURCES and "gpt-oss-20b" in acc.HYBRID_SOURCES


# ------------------------------------------------------------------ accounting for hybrid models

@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(acc.HYBRID_MODELS)), T=st.integers(1, 200_000), S=st.sampled_from([1, 16, 32]))
def test_hybrid_bytes_against_the_full_attention_twin(name, T, S):
    spec, twin = acc.get_model(name), acc.as_full_attention(name)
    hybrid, full = acc.hybrid_kv_bytes(spec, T), acc.hybrid_kv_bytes(twin, T)
    assert full == T * acc.bytes_per_token(spec) == T * acc.bytes_per_token(twin)
    assert (hybrid == full) if T <= spec.sliding_window else (hybrid < full)
    layer = acc.bytes_per_token(spec) // spec.num_layers
    assert hybrid == layer * (spec.num_full_layers * T + spec.num_sliding_layers * min(T, spec.sliding_window))
    # What the grouped pages hold covers what the layers keep between steps (rounding and padding only
    # add): a sliding layer keeps the W - 1 tokens before the next one, whose own K/V the next step writes.
    groups = acc.kv_cache_groups(spec)
    pages = acc.hybrid_blocks_per_request(spec, T, S) * groups.group_layers * S * layer
    kept = layer * (spec.num_full_layers * T + spec.num_sliding_layers * min(T, spec.sliding_window - 1))
    assert pages >= kept
    assert acc.mean_bytes_per_token(spec, T) == hybrid / T


@given(name=st.sampled_from(sorted(acc.MODELS)), T=st.integers(1, 100_000), S=st.sampled_from([8, 16]))
def test_hybrid_capacity_of_a_full_attention_model_is_kv_capacity(name, T, S):
    flat = acc.kv_capacity(name, 80 * acc.GiB, weight_bytes=0, block_size=S)
    cap = acc.hybrid_kv_capacity(name, 80 * acc.GiB, T, weight_bytes=0, block_size=S)
    assert cap.pages == flat.blocks and cap.page_bytes == flat.block_bytes
    assert cap.requests == flat.blocks // acc.blocks_needed(T, S)


def test_a_hybrid_model_fits_more_long_requests_than_its_full_attention_twin():
    for name in acc.HYBRID_MODELS:
        hybrid = acc.hybrid_kv_capacity(name, 80 * acc.GiB, 32_768, weight_bytes=0)
        twin = acc.hybrid_kv_capacity(acc.as_full_attention(name), 80 * acc.GiB, 32_768, weight_bytes=0)
        assert hybrid.requests > twin.requests
    # Short requests: Gemma 3's 8 padding layers make the grouped hybrid cost more than its twin.
    short = acc.hybrid_kv_capacity("Gemma-3-27B", 80 * acc.GiB, 512, weight_bytes=0)
    twin = acc.hybrid_kv_capacity(acc.as_full_attention("Gemma-3-27B"), 80 * acc.GiB, 512, weight_bytes=0)
    assert short.requests < twin.requests and short.padding_layers == 8


def test_hybrid_model_specs_are_checked():
    with pytest.raises(ValueError, match="sliding_window"):
        ModelSpec("x", 4, 1, 8, num_sliding_layers=2)
    with pytest.raises(ValueError, match="num_sliding_layers"):
        ModelSpec("x", 4, 1, 8, sliding_window=16, num_sliding_layers=5)
    with pytest.raises(ValueError, match="window"):
        acc.window_blocks(10, 0, 4)
    assert acc.window_blocks(112, 32, 16) == 2 and acc.window_blocks(0, 32, 16) == 0


# ------------------------------------------------------------------ bad input: the plain manager's errors, word for word

def _managers():
    """A plain and a hybrid manager with the same live request ``"a"`` (the hybrid has one full group)."""
    plain, hybrid = BlockManager(8, 4), HybridBlockManager(8, 4, [None])
    for bm in (plain, hybrid):
        bm.add_request("a", [1, 2, 3, 4, 5])
    return plain, hybrid


def _state(bm):
    tables = bm.block_tables("a")[0] if isinstance(bm, HybridBlockManager) else bm.block_table("a")
    return bm.request_ids(), tables, bm.num_tokens("a"), bm.free_queue()


def _raised(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return type(exc), str(exc)
    return None


BAD_CALLS = [
    ("add_request", ([1], [1])), ("add_request", ("", [1])), ("add_request", (None, [1])), ("add_request", (7, [1])),
    ("add_request", ("a", [1])), ("add_request", ("b", [])), ("add_request", ("b", "abc")), ("add_request", ("b", 5)),
    ("add_request", ("b", [1, -2])), ("add_request", ("b", [1.0])), ("add_request", ("b", [True])),
    ("add_request", ("b", np.zeros((2, 2), dtype=int))), ("add_request", ("b", np.zeros(3))),
    ("append_tokens", ([1], [1])), ("append_tokens", ({}, [1])), ("append_tokens", ("zz", [1])),
    ("append_tokens", (None, [1])), ("append_tokens", ("a", [-1])), ("append_tokens", ("a", "x")),
    ("append_tokens", ("a", None)), ("free", ([1],)), ("free", ("zz",)), ("free", (None,)), ("free", ({"a"},)),
    ("num_tokens", ([1],)), ("num_tokens", ("zz",)), ("ref_count", (-1,)), ("ref_count", (8,)),
    ("ref_count", ("0",)), ("ref_count", (1.0,)), ("token_ids", ([1],)), ("token_ids", ("zz",)), ("salt", ({},)),
    ("salt", ("zz",)), ("__contains__", ([1],)),
]
BAD_SALTS = [1.5, True, [1], ("x", 1.0), {"k": 1}]


@pytest.mark.parametrize("method, args", BAD_CALLS + [("add_request", ("b", [1], s)) for s in BAD_SALTS])
def test_both_managers_reject_the_same_bad_input_the_same_way(method, args):
    """The same bad call raises the same error type and message in both managers, and changes nothing."""
    plain, hybrid = _managers()
    before = [_state(plain), _state(hybrid)]
    kwargs = {"salt": args[2]} if len(args) == 3 else {}
    raised = [_raised(lambda bm=bm: getattr(bm, method)(*args[:2], **kwargs)) for bm in (plain, hybrid)]
    assert raised[0] is not None and raised[0] == raised[1]
    assert raised[0][0] in (TypeError, ValueError, UnknownRequestError, DuplicateRequestError)
    assert [_state(plain), _state(hybrid)] == before
    for bm in (plain, hybrid):
        bm.check_invariants()


@settings(max_examples=60, deadline=None)
@given(request_id=st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3),
                            st.lists(st.text(max_size=2), max_size=2), st.dictionaries(st.text(max_size=1), st.integers()),
                            st.sets(st.integers(), max_size=2), st.binary(max_size=2)),
       method=st.sampled_from(["append_tokens", "free", "num_tokens"]))
def test_any_bad_request_id_gets_the_plain_managers_error(request_id, method):
    """An id that is not live, hashable or not, is refused alike: ``TypeError`` naming ``request_id`` for one
    that cannot be looked up (unhashable), ``UnknownRequestError`` for one that is not live."""
    if request_id == "a":
        return
    plain, hybrid = _managers()
    args = (request_id, [1]) if method == "append_tokens" else (request_id,)
    raised = [_raised(lambda bm=bm: getattr(bm, method)(*args)) for bm in (plain, hybrid)]
    assert raised[0] == raised[1]
    kind, message = raised[0]
    assert "request_id" in message and repr(request_id) in message
    assert kind is (UnknownRequestError if isinstance(request_id, collections.abc.Hashable) else TypeError)


@pytest.mark.parametrize("make", [lambda **kw: BlockManager(**kw), lambda **kw: HybridBlockManager(windows=[None], **kw)])
@pytest.mark.parametrize("kwargs, error", [(dict(num_blocks=0, block_size=4), ValueError),
                                           (dict(num_blocks=8, block_size=2.0), TypeError),
                                           (dict(num_blocks=8, block_size=4, enable_prefix_caching=1), TypeError)])
def test_both_managers_check_their_sizes_alike(make, kwargs, error):
    with pytest.raises(error) as raised:
        make(**kwargs)
    name = next(k for k in ("enable_prefix_caching", "block_size", "num_blocks") if k in str(raised.value))
    assert repr(kwargs[name]) in str(raised.value) or str(kwargs[name]) in str(raised.value)
