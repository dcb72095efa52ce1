"""Paged attention equals dense attention: paging changes where K/V live, never the result."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention import fast as F
from pagedkv_lib.attention.batch import boundary_lengths, random_paged_batch


def dense_decode(q, keys, values):
    """The spec: each request's query against its own contiguous K/V."""
    return torch.stack([A.dense_attention(q[b : b + 1], k, v)[0] for b, (k, v) in enumerate(zip(keys, values))])


def naive_attention(q, k, v, causal):
    """Per query head, per query: softmax over the keys it may see, by the textbook formula."""
    t_q, h_q, d = q.shape
    t_k, h_kv, _ = k.shape
    out = torch.empty(t_q, h_q, d, dtype=torch.float64)
    for h in range(h_q):
        kh, vh = k[:, h // (h_q // h_kv)].double(), v[:, h // (h_q // h_kv)].double()
        for i in range(t_q):
            visible = t_k - t_q + i + 1 if causal else t_k
            w = torch.softmax(kh[:visible] @ q[i, h].double() / math.sqrt(d), 0)
            out[i, h] = w @ vh[:visible]
    return out


# ---------------------------------------------------------------- dense reference

@pytest.mark.parametrize("t_q,t_k,causal", [(1, 1, True), (1, 7, True), (5, 5, True), (3, 9, True), (4, 6, False)])
@pytest.mark.parametrize("group", [1, 4])
def test_dense_reference_matches_textbook_formula(t_q, t_k, causal, group):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(t_q, 2 * group, 16, generator=gen)
    k, v = torch.randn(2, t_k, 2, 16, generator=gen)
    out = A.dense_attention(q, k, v, causal=causal)
    torch.testing.assert_close(out.double(), naive_attention(q, k, v, causal), atol=1e-5, rtol=1e-5)


def test_dense_gqa_equals_attention_with_repeated_heads():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(6, 8, 16, generator=gen)
    k, v = torch.randn(2, 6, 2, 16, generator=gen)
    repeated = A.dense_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
    torch.testing.assert_close(A.dense_attention(q, k, v), repeated)


def test_gather_kv_returns_the_logical_kv_of_a_request():
    batch = random_paged_batch([1, 16, 21], block_size=8)
    for b, t in enumerate(batch.seq_lens.tolist()):
        k, v = A.gather_kv(batch.k_cache, batch.v_cache, batch.block_tables[b], t)
        assert torch.equal(k, batch.keys[b]) and torch.equal(v, batch.values[b])


# ---------------------------------------------------------------- decode: the spec and the fast versions

SPEC = [A.paged_decode_reference, A.paged_decode_gather, A.paged_decode_online]
DECODE = SPEC + [F.paged_decode_gather_fast, F.paged_decode_online_fast]
S = 16


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("group", [1, 4, 8])
def test_paged_decode_equals_dense_at_block_boundaries(decode, group):
    """T = 1 and T mod S = 0, 1, S-1; shuffled blocks; NaN in every slot no request owns."""
    batch = random_paged_batch(boundary_lengths(S), block_size=S, group=group, head_dim=32, seed=3)
    out = decode(*batch.args())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, dense_decode(batch.q, batch.keys, batch.values), atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=5), block_size=st.sampled_from([1, 2, 3, 8, 16]),
       h_kv=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 4, 8]), step_blocks=st.integers(1, 12),
       seed=st.integers(0, 2**16))
def test_spec_decodes_equal_dense_on_random_tables(lens, block_size, h_kv, group, step_blocks, seed):
    batch = random_paged_batch(lens, block_size=block_size, num_kv_heads=h_kv, group=group, head_dim=8, seed=seed)
    expected = dense_decode(batch.q, batch.keys, batch.values)
    for decode in (A.paged_decode_reference, A.paged_decode_gather):
        torch.testing.assert_close(decode(*batch.args()), expected, atol=1e-5, rtol=1e-5)
    online = A.paged_decode_online(*batch.args(), step_blocks=step_blocks)
    torch.testing.assert_close(online, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("step_blocks", [1, 5, 16, 32, 48, 1000])
def test_online_walk_equals_dense_for_any_step_size(step_blocks):
    """Steps that end inside, at the end of, and beyond a request's blocks."""
    lens = [1, 15, 16, 17, 100, 255, 256, 257, 300, 511, 600, 31, 47]
    batch = random_paged_batch(lens, block_size=S, group=4, seed=8)
    out = A.paged_decode_online(*batch.args(), step_blocks=step_blocks)
    torch.testing.assert_close(out, dense_decode(batch.q, batch.keys, batch.values), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
def test_paged_decode_reads_exactly_the_slots_each_request_owns(decode):
    """Found by experiment (PagedBatch.slots_read): request b's output depends on its own slots only."""
    batch = random_paged_batch([3, 6, 1, 4], block_size=4, spare_blocks=2, seed=11)
    kwargs = {"step_blocks": 1} if "online" in decode.__name__ else {}
    read = batch.slots_read(decode, **kwargs)
    owner = batch.slot_owner()
    assert torch.equal(read, owner[None] == torch.arange(4)[:, None, None]), batch.draw(read)


def test_slots_read_sees_a_decode_that_reads_too_far():
    """The experiment can fail: a decode that attends to one slot past each request's end is caught."""
    batch = random_paged_batch([3, 6], block_size=4, spare_blocks=1, garbage=0.0, seed=12)

    def one_too_many(q, k_cache, v_cache, tables, lens):
        return A.paged_decode_reference(q, k_cache, v_cache, tables, lens + 1)

    read = batch.slots_read(one_too_many)
    assert not torch.equal(read, batch.slot_owner()[None] == torch.arange(2)[:, None, None])
    assert "!" in batch.draw(read)                       # a slot read by a request that does not own it


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
def test_paged_decode_reads_only_the_blocks_a_length_uses(decode):
    """Table entries past ceil(T/S) are padding: a huge id there changes nothing and raises nothing."""
    batch = random_paged_batch([5, 40], block_size=8, pad=10**6, seed=4)
    torch.testing.assert_close(decode(*batch.args()), dense_decode(batch.q, batch.keys, batch.values),
                               atol=1e-5, rtol=1e-5)


def test_shared_blocks_serve_every_request_that_maps_them():
    """Two requests whose tables share prefix blocks (what prefix caching and fork produce)."""
    batch = random_paged_batch([32, 8], block_size=8, seed=5)
    tables = batch.block_tables
    shared = torch.tensor([[*tables[0, :4].tolist(), -1], [*tables[0, :2].tolist(), *tables[1, :1].tolist(), -1, -1]])
    (k0, k1), (v0, v1) = batch.keys, batch.values
    keys, values = [k0, torch.cat([k0[:16], k1])], [v0, torch.cat([v0[:16], v1])]
    for decode in DECODE:
        out = decode(batch.q, batch.k_cache, batch.v_cache, shared, torch.tensor([32, 24]))
        torch.testing.assert_close(out, dense_decode(batch.q, keys, values), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
def test_half_precision_stays_within_documented_tolerance(decode, dtype):
    """Low-precision results match fp32 on the same rounded inputs to TOLERANCES[dtype]."""
    batch = random_paged_batch(boundary_lengths(S), block_size=S, group=4, head_dim=32, dtype=dtype, seed=6)
    out = decode(*batch.args())
    assert out.dtype == dtype
    expected = dense_decode(batch.q.float(), [k.float() for k in batch.keys], [v.float() for v in batch.values])
    atol, rtol = A.TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


# ---------------------------------------------------------------- prefill with a cached prefix

@pytest.mark.parametrize("num_cached,num_new", [(0, 1), (0, 13), (16, 1), (16, 7), (24, 9), (5, 11)])
@pytest.mark.parametrize("group", [1, 4])
def test_prefill_after_cached_prefix_equals_full_causal_prefill(num_cached, num_new, group):
    """New tokens reading the cached prefix give the rows a from-scratch prefill would give them."""
    total = num_cached + num_new
    batch = random_paged_batch([total], block_size=8, group=group, seed=7)
    k, v = batch.keys[0], batch.values[0]
    q_all = torch.randn(total, 2 * group, 16, generator=torch.Generator().manual_seed(7))
    full = A.dense_attention(q_all, k, v, causal=True)
    out = A.paged_prefill(q_all[num_cached:], batch.k_cache, batch.v_cache, batch.block_tables[0], num_cached)
    torch.testing.assert_close(out, full[num_cached:], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- writing the cache

def test_write_kv_skips_padding_and_places_each_token_at_its_slot():
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    k, v = torch.randn(2, 3, 2, 8)
    A.write_kv(k_cache, v_cache, k, v, torch.tensor([9, -1, 2]))
    torch.testing.assert_close(k_cache[2, 1], k[0])        # slot 9 = block 2, offset 1
    torch.testing.assert_close(v_cache[0, 2], v[2])        # slot 2 = block 0, offset 2
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 2  # the padding token went nowhere


def test_write_kv_then_gather_kv_round_trips_a_request():
    """Writing a request's tokens at the slots of its table, then gathering, gives them back."""
    batch = random_paged_batch([13], block_size=4, seed=13)
    k_cache, v_cache = torch.zeros_like(batch.k_cache), torch.zeros_like(batch.v_cache)
    pos = torch.arange(13)
    A.write_kv(k_cache, v_cache, batch.keys[0], batch.values[0], batch.block_tables[0, pos // 4] * 4 + pos % 4)
    k, v = A.gather_kv(k_cache, v_cache, batch.block_tables[0], 13)
    assert torch.equal(k, batch.keys[0]) and torch.equal(v, batch.values[0])


@pytest.mark.parametrize("slots,match", [([0, 12, 1], r"outside \[0, 12\)"), ([0, -2, 1], "outside"),
                                         ([3, 3, -1], "twice"), ([0, 1], r"\(2,\)")])
def test_write_kv_rejects_bad_slots_and_leaves_the_cache_unchanged(slots, match):
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    k, v = torch.randn(2, 3, 2, 8)
    with pytest.raises(ValueError, match=match):
        A.write_kv(k_cache, v_cache, k, v, torch.tensor(slots))
    assert not k_cache.any() and not v_cache.any()


def test_write_kv_accepts_an_empty_slot_list():
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    A.write_kv(k_cache, v_cache, torch.zeros(0, 2, 8), torch.zeros(0, 2, 8), [])
    assert not k_cache.any() and not v_cache.any()
    with pytest.raises(TypeError, match="slot_mapping must hold integers"):
        A.write_kv(k_cache, v_cache, torch.zeros(1, 2, 8), torch.zeros(1, 2, 8), [0.0])


# ---------------------------------------------------------------- bad input names the shapes

def _decode_args():
    """B=2 (5 and 17 tokens), H_q=4, D=16, blocks of 8 tokens; tables of 4 entries (32 tokens)."""
    batch = random_paged_batch([5, 17], block_size=8, group=2, spare_blocks=2, extra_columns=1)
    return batch.args()


def test_decode_args_have_the_shapes_the_messages_below_name():
    q, k_cache, _, tables, _ = _decode_args()
    assert q.shape == (2, 4, 16) and k_cache.shape == (6, 8, 2, 16) and tables.shape == (2, 4)


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("change,match", [
    (lambda a: (torch.randn(3, 4, 16), *a[1:]), r"\(3, 4, 16\).*\(2, 4\)"),                # batch mismatch
    (lambda a: (torch.randn(2, 3, 16), *a[1:]), r"\(2, 3, 16\).*\(\d+, 8, 2, 16\).*multiple"),  # heads
    (lambda a: (torch.randn(2, 4, 8), *a[1:]), r"\(2, 4, 8\).*head dims"),
    (lambda a: (*a[:2], a[2][:, :4], *a[3:]), r"same shape"),
    (lambda a: (*a[:3], a[3], torch.tensor([5, 40])), r"capacity.*\(2, 4\)"),              # beyond capacity
    (lambda a: (*a[:3], torch.tensor([[0, -1, -1, -1], [1, 99, 2, -1]]), a[4]), r"\[99\].*\(\d+, 8, 2, 16\)"),
    (lambda a: (*a[:3], a[3], torch.tensor([0, 17])), r">= 1"),
])
def test_bad_decode_input_raises_value_error_naming_the_shapes(decode, change, match):
    with pytest.raises(ValueError, match=match):
        decode(*change(_decode_args()))


@pytest.mark.parametrize("decode", [A.paged_decode_online, F.paged_decode_online_fast], ids=lambda f: f.__name__)
def test_online_decodes_refuse_a_step_of_no_blocks(decode):
    with pytest.raises(ValueError, match="step_blocks must be an integer >= 1, got 0"):
        decode(*_decode_args(), step_blocks=0)


def test_bad_prefill_and_dense_input_raise_value_error():
    _, k_cache, v_cache, tables, _ = _decode_args()
    with pytest.raises(ValueError, match=r"num_cached=10 \+ 30 new tokens.*= 40 tokens exceed the capacity of "
                                         r"block_table with shape \(4,\): 4 blocks x 8 tokens = 32"):
        A.paged_prefill(torch.randn(30, 4, 16), k_cache, v_cache, tables[0], 10)
    with pytest.raises(ValueError, match=r"q has shape \(0, 4, 16\): prefill needs at least one new token"):
        A.paged_prefill(torch.randn(0, 4, 16), k_cache, v_cache, tables[0], 0)
    with pytest.raises(ValueError, match=r"\(4, 3, 16\).*multiple"):
        A.dense_attention(torch.randn(4, 3, 16), torch.randn(4, 2, 16), torch.randn(4, 2, 16))
    with pytest.raises(ValueError, match=r"\(5, 2, 16\).*\(4, 2, 16\)"):
        A.dense_attention(torch.randn(5, 2, 16), torch.randn(4, 2, 16), torch.randn(4, 2, 16))
    with pytest.raises(TypeError, match="float16"):
        A.dense_attention(torch.randn(1, 2, 16).half(), torch.randn(4, 2, 16), torch.randn(4, 2, 16))


def test_messages_name_the_arguments_the_caller_passed():
    _, k_cache, v_cache, tables, _ = _decode_args()
    with pytest.raises(ValueError, match=r"num_cached=9 \+ 1 new tokens.*= 10 tokens.*block_table with shape \(1,\)"):
        A.paged_prefill(torch.randn(1, 4, 16), k_cache, v_cache, tables[1, :1], 9)
    with pytest.raises(ValueError, match=r"num_tokens=33 exceed the capacity of block_table with shape \(4,\)"):
        A.gather_kv(k_cache, v_cache, tables[0], 33)
    with pytest.raises(ValueError, match=r"block_table \(2,\) names block ids \[99\]"):
        A.gather_kv(k_cache, v_cache, torch.tensor([0, 99]), 9)
    with pytest.raises(ValueError, match=r"block_table \(2,\) names block ids \[99\]"):
        A.paged_prefill(torch.randn(2, 4, 16), k_cache, v_cache, torch.tensor([0, 99]), 7)


BAD_SCALES = [(float("nan"), ValueError), (float("inf"), ValueError), (0.0, ValueError), (-1.0, ValueError),
              ("x", TypeError), (True, TypeError)]


def _every_attention(scale):
    """Each torch attention function once, on valid inputs (the same for every ``scale``), with ``scale``."""
    q, k_cache, v_cache, tables, lens = _decode_args()
    for decode in DECODE:
        yield lambda decode=decode: decode(q, k_cache, v_cache, tables, lens, scale=scale)
    yield lambda: A.paged_prefill(q[:1], k_cache, v_cache, tables[0], 4, scale=scale)
    k, v = A.gather_kv(k_cache, v_cache, tables[0], 5)
    yield lambda: A.dense_attention(q[:1], k, v, scale=scale)


@pytest.mark.parametrize("scale, error", BAD_SCALES)
def test_every_attention_function_refuses_a_scale_that_is_not_positive_and_finite(scale, error):
    for call in _every_attention(scale):
        with pytest.raises(error, match=r"scale must be a number in \(0.0, inf\)"):
            call()


def test_a_valid_scale_is_used_and_none_means_one_over_sqrt_head_dim():
    assert A.check_scale(None, 16) == 0.25 and A.check_scale(2, 16) == 2.0
    for default, explicit in zip(_every_attention(None), _every_attention(0.25)):
        torch.testing.assert_close(default(), explicit(), atol=0, rtol=0)
    other = list(_every_attention(0.5))
    assert not torch.equal(other[0](), next(_every_attention(0.25))())
