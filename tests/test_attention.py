"""Paged attention equals dense attention: paging changes where K/V live, never the result."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib import attention as A


def make_paged(lens, block_size, h_kv, d, *, dtype=torch.float32, spare_blocks=3, seed=0):
    """Random logical K/V per request, written through write_kv into shuffled physical blocks.

    Returns (k_cache, v_cache, block_tables padded with -1, seq_lens, logical [(k, v)] per request).
    """
    gen = torch.Generator().manual_seed(seed)
    n_blocks = [math.ceil(t / block_size) for t in lens]
    num_blocks = sum(n_blocks) + spare_blocks
    k_cache = torch.zeros(num_blocks, block_size, h_kv, d, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    physical = torch.randperm(num_blocks, generator=gen)
    tables = torch.full((len(lens), max(n_blocks) + 1), -1, dtype=torch.int64)
    logical, start = [], 0
    for b, (t, n) in enumerate(zip(lens, n_blocks)):
        tables[b, :n] = physical[start : start + n]
        start += n
        k = torch.randn(t, h_kv, d, generator=gen).to(dtype)
        v = torch.randn(t, h_kv, d, generator=gen).to(dtype)
        pos = torch.arange(t)
        slots = tables[b, pos // block_size] * block_size + pos % block_size
        A.write_kv(k_cache, v_cache, k, v, slots)
        logical.append((k, v))
    return k_cache, v_cache, tables, torch.tensor(lens), logical


def dense_decode(q, logical):
    """The spec: each request's query against its own contiguous K/V."""
    return torch.stack([A.dense_attention(q[b : b + 1], k, v)[0] for b, (k, v) in enumerate(logical)])


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


# ---------------------------------------------------------------- decode: both paged versions

DECODE = [A.paged_decode_gather, A.paged_decode_online]
S = 16
BOUNDARY_LENS = [1, S, S + 1, 2 * S - 1, 3 * S, 5 * S + 1, 7 * S - 1]   # T mod S = 0, 1, S-1 and T = 1


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("group", [1, 4, 8])
def test_paged_decode_equals_dense_at_block_boundaries(decode, group):
    k_cache, v_cache, tables, lens, logical = make_paged(BOUNDARY_LENS, S, 2, 32)
    q = torch.randn(len(BOUNDARY_LENS), 2 * group, 32, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(decode(q, k_cache, v_cache, tables, lens), dense_decode(q, logical),
                               atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=5), block_size=st.sampled_from([1, 2, 3, 8, 16]),
       h_kv=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 4, 8]), step_blocks=st.integers(1, 12),
       seed=st.integers(0, 2**16))
def test_paged_decode_equals_dense_on_random_tables(lens, block_size, h_kv, group, step_blocks, seed):
    k_cache, v_cache, tables, seq_lens, logical = make_paged(lens, block_size, h_kv, 8, seed=seed)
    q = torch.randn(len(lens), h_kv * group, 8, generator=torch.Generator().manual_seed(seed))
    expected = dense_decode(q, logical)
    torch.testing.assert_close(A.paged_decode_gather(q, k_cache, v_cache, tables, seq_lens), expected,
                               atol=1e-5, rtol=1e-5)
    online = A.paged_decode_online(q, k_cache, v_cache, tables, seq_lens, step_blocks=step_blocks)
    torch.testing.assert_close(online, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("step_blocks", [1, 5, 16, 32, 48, 1000])
def test_online_walk_equals_dense_for_any_step_size(step_blocks):
    """Steps that end inside, at the end of, and beyond a request's blocks."""
    lens = [1, 15, 16, 17, 100, 255, 256, 257, 300, 511, 600, 31, 47]
    k_cache, v_cache, tables, seq_lens, logical = make_paged(lens, S, 2, 16)
    q = torch.randn(len(lens), 8, 16, generator=torch.Generator().manual_seed(8))
    out = A.paged_decode_online(q, k_cache, v_cache, tables, seq_lens, step_blocks=step_blocks)
    torch.testing.assert_close(out, dense_decode(q, logical), atol=1e-5, rtol=1e-5)


def test_online_walk_never_copies_more_than_step_blocks(monkeypatch):
    """The memory-lean promise: no copy of a request's whole K/V, only step_blocks blocks at a time.

    On an fp32 cache K is copied a step at a time and V is not copied at all: embedding_bag reads
    at most a step's rows per query head. On a half cache V is copied like K.
    """
    for dtype, copies_v in [(torch.float32, False), (torch.float16, True)]:
        k_cache, v_cache, tables, lens, logical = make_paged([200, 90], 8, 2, 16, dtype=dtype)  # 25, 12 blocks
        q = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(9)).to(dtype)
        expected = dense_decode(q, logical)
        copied, bagged = [], []
        real_select, real_bag = torch.index_select, torch.nn.functional.embedding_bag

        def spy_select(input, dim, index, **kwargs):
            copied.append(index.numel())
            return real_select(input, dim, index, **kwargs)

        def spy_bag(input, weight, *args, **kwargs):
            bagged.append(input.shape[-1])
            return real_bag(input, weight, *args, **kwargs)

        monkeypatch.setattr(torch, "index_select", spy_select)
        monkeypatch.setattr(torch.nn.functional, "embedding_bag", spy_bag)
        out = A.paged_decode_online(q, k_cache, v_cache, tables, lens, step_blocks=4)
        monkeypatch.undo()
        torch.testing.assert_close(out, expected, atol=A.TOLERANCES[dtype][0], rtol=A.TOLERANCES[dtype][1])
        assert copied and max(copied) <= 4
        assert sum(copied) == (2 if copies_v else 1) * (25 + 12)       # every used block once, K (and V)
        assert (not bagged) if copies_v else (max(bagged) <= 4 * 8 and sum(bagged) == 200 + 90)


def test_online_walk_on_strided_fp32_cache():
    """A non-contiguous fp32 cache cannot be read row by row in place: V is copied, result unchanged."""
    k_cache, v_cache, tables, lens, logical = make_paged([40, 7], 8, 2, 16)
    wide = torch.zeros(*v_cache.shape[:-1], 32)
    wide[..., :16] = v_cache
    strided = wide[..., :16]
    assert not strided.is_contiguous()
    q = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(10))
    out = A.paged_decode_online(q, k_cache, strided, tables, lens, step_blocks=2)
    torch.testing.assert_close(out, dense_decode(q, logical), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
def test_paged_decode_reads_only_the_blocks_a_length_uses(decode):
    """Table entries past ceil(T/S) are padding: garbage there changes nothing and raises nothing."""
    k_cache, v_cache, tables, lens, logical = make_paged([5, 40], 8, 2, 16)
    q = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(4))
    garbage = tables.clone()
    garbage[garbage == -1] = 10**6
    torch.testing.assert_close(decode(q, k_cache, v_cache, garbage, lens), dense_decode(q, logical),
                               atol=1e-5, rtol=1e-5)


def test_shared_blocks_serve_every_request_that_maps_them():
    """Two requests whose tables share prefix blocks (what prefix caching and fork produce)."""
    k_cache, v_cache, tables, lens, logical = make_paged([32, 8], 8, 2, 16)
    shared = torch.tensor([[*tables[0, :4].tolist(), -1], [*tables[0, :2].tolist(), *tables[1, :1].tolist(), -1, -1]])
    k0, v0 = logical[0]
    k1, v1 = logical[1]
    expected_logical = [(k0, v0), (torch.cat([k0[:16], k1]), torch.cat([v0[:16], v1]))]
    q = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(5))
    for decode in DECODE:
        out = decode(q, k_cache, v_cache, shared, torch.tensor([32, 24]))
        torch.testing.assert_close(out, dense_decode(q, expected_logical), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("decode", DECODE, ids=lambda f: f.__name__)
def test_half_precision_stays_within_documented_tolerance(decode, dtype):
    """Low-precision results match fp32 on the same rounded inputs to TOLERANCES[dtype]."""
    k_cache, v_cache, tables, lens, logical = make_paged(BOUNDARY_LENS, S, 2, 32, dtype=dtype)
    q = torch.randn(len(BOUNDARY_LENS), 8, 32, generator=torch.Generator().manual_seed(6)).to(dtype)
    out = decode(q, k_cache, v_cache, tables, lens)
    assert out.dtype == dtype
    expected = dense_decode(q.float(), [(k.float(), v.float()) for k, v in logical])
    atol, rtol = A.TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


# ---------------------------------------------------------------- prefill with a cached prefix

@pytest.mark.parametrize("num_cached,num_new", [(0, 1), (0, 13), (16, 1), (16, 7), (24, 9), (5, 11)])
@pytest.mark.parametrize("group", [1, 4])
def test_prefill_after_cached_prefix_equals_full_causal_prefill(num_cached, num_new, group):
    """New tokens reading the cached prefix give the rows a from-scratch prefill would give them."""
    total = num_cached + num_new
    k_cache, v_cache, tables, _, logical = make_paged([total], 8, 2, 16)
    k, v = logical[0]
    q_all = torch.randn(total, 2 * group, 16, generator=torch.Generator().manual_seed(7))
    full = A.dense_attention(q_all, k, v, causal=True)
    out = A.paged_prefill(q_all[num_cached:], k_cache, v_cache, tables[0], num_cached)
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


@pytest.mark.parametrize("slots,match", [([0, 12, 1], r"outside \[0, 12\)"), ([0, -2, 1], "outside"),
                                         ([3, 3, -1], "twice"), ([0, 1], r"\(2,\)")])
def test_write_kv_rejects_bad_slots_and_leaves_the_cache_unchanged(slots, match):
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    k, v = torch.randn(2, 3, 2, 8)
    with pytest.raises(ValueError, match=match):
        A.write_kv(k_cache, v_cache, k, v, torch.tensor(slots))
    assert not k_cache.any() and not v_cache.any()


# ---------------------------------------------------------------- bad input names the shapes

def _decode_args():
    k_cache, v_cache, tables, lens, _ = make_paged([5, 17], 8, 2, 16)
    return torch.randn(2, 4, 16), k_cache, v_cache, tables, lens


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


def test_bad_prefill_and_dense_input_raise_value_error():
    k_cache, v_cache, tables, _, _ = make_paged([10], 8, 2, 16)
    with pytest.raises(ValueError, match=r"num_cached=10 \+ 20 new tokens.*= 30 tokens exceed the capacity of "
                                         r"block_table with shape \(3,\): 3 blocks x 8 tokens = 24"):
        A.paged_prefill(torch.randn(20, 4, 16), k_cache, v_cache, tables[0], 10)
    with pytest.raises(ValueError, match=r"\(4, 3, 16\).*multiple"):
        A.dense_attention(torch.randn(4, 3, 16), torch.randn(4, 2, 16), torch.randn(4, 2, 16))
    with pytest.raises(ValueError, match=r"\(5, 2, 16\).*\(4, 2, 16\)"):
        A.dense_attention(torch.randn(5, 2, 16), torch.randn(4, 2, 16), torch.randn(4, 2, 16))
    with pytest.raises(TypeError, match="float16"):
        A.dense_attention(torch.randn(1, 2, 16).half(), torch.randn(4, 2, 16), torch.randn(4, 2, 16))
    with pytest.raises(ValueError, match="step_blocks"):
        A.paged_decode_online(*_decode_args(), step_blocks=0)


def test_messages_name_the_arguments_the_caller_passed():
    k_cache, v_cache, tables, _, _ = make_paged([10], 8, 2, 16)
    with pytest.raises(ValueError, match=r"num_cached=9 \+ 1 new tokens.*= 10 tokens.*block_table with shape \(1,\)"):
        A.paged_prefill(torch.randn(1, 4, 16), k_cache, v_cache, tables[0, :1], 9)
    with pytest.raises(ValueError, match=r"num_tokens=25 exceed the capacity of block_table with shape \(3,\)"):
        A.gather_kv(k_cache, v_cache, tables[0], 25)
    with pytest.raises(ValueError, match=r"block_table \(2,\) names block ids \[99\]"):
        A.gather_kv(k_cache, v_cache, torch.tensor([0, 99]), 9)


def test_write_kv_accepts_an_empty_slot_list():
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    A.write_kv(k_cache, v_cache, torch.zeros(0, 2, 8), torch.zeros(0, 2, 8), [])
    assert not k_cache.any() and not v_cache.any()
    with pytest.raises(TypeError, match="slot_mapping must hold integers"):
        A.write_kv(k_cache, v_cache, torch.zeros(1, 2, 8), torch.zeros(1, 2, 8), [0.0])


BAD_SCALES = [(float("nan"), ValueError), (float("inf"), ValueError), (0.0, ValueError), (-1.0, ValueError),
              ("x", TypeError), (True, TypeError)]


def _every_attention(scale):
    """Each torch attention function once, on valid inputs (the same for every ``scale``), with ``scale``."""
    torch.manual_seed(0)
    q, k_cache, v_cache, tables, lens = _decode_args()
    yield lambda: A.paged_decode_gather(q, k_cache, v_cache, tables, lens, scale=scale)
    yield lambda: A.paged_decode_online(q, k_cache, v_cache, tables, lens, scale=scale)
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
