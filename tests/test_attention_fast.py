"""The CPU speed-ups equal the spec they replace, on any batch (differential tests)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention import fast as F
from pagedkv_lib.attention.batch import random_paged_batch

PAIRS = [(F.paged_decode_gather_fast, A.paged_decode_gather), (F.paged_decode_online_fast, A.paged_decode_online)]


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(1, 90), min_size=1, max_size=6), block_size=st.sampled_from([1, 2, 5, 8, 16]),
       h_kv=st.sampled_from([1, 2, 3]), group=st.sampled_from([1, 2, 4, 8]), step_blocks=st.integers(1, 9),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       shuffle=st.booleans(), scale=st.none() | st.floats(0.01, 2.0), seed=st.integers(0, 2**16))
def test_fast_decodes_equal_the_spec(lens, block_size, h_kv, group, step_blocks, dtype, shuffle, scale, seed):
    """Same output as the readable version, to the dtype's tolerance, garbage (NaN) in unowned slots."""
    batch = random_paged_batch(lens, block_size=block_size, num_kv_heads=h_kv, group=group, head_dim=8,
                               dtype=dtype, shuffle=shuffle, seed=seed)
    atol, rtol = A.TOLERANCES[dtype]
    for fast, spec in PAIRS:
        kwargs = {"scale": scale} | ({"step_blocks": step_blocks} if "online" in spec.__name__ else {})
        out, expected = fast(*batch.args(), **kwargs), spec(*batch.args(), **kwargs)
        assert out.dtype == dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("fast, spec", PAIRS, ids=lambda f: f.__name__)
def test_fast_decodes_follow_strided_caches(fast, spec):
    """A cache that is a view (K and V interleaved in one tensor) reads like a contiguous one."""
    batch = random_paged_batch([40, 7, 16], block_size=8, seed=10)
    kv = torch.stack([batch.k_cache, batch.v_cache], dim=3)             # [num_blocks, S, H_kv, 2, D]
    k_view, v_view = kv[:, :, :, 0], kv[:, :, :, 1]
    assert not (k_view.is_contiguous() or v_view.is_contiguous())
    args = (batch.q, k_view, v_view, batch.block_tables, batch.seq_lens)
    torch.testing.assert_close(fast(*args), spec(*batch.args()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, copies_v", [(torch.float32, False), (torch.float16, True)])
def test_online_fast_never_copies_more_than_step_blocks(monkeypatch, dtype, copies_v):
    """The memory-lean promise: K is copied a step (at most step_blocks blocks) at a time, each used
    block once. On an fp32 cache V is not copied at all (embedding_bag reads at most a step's rows
    per query head); on a half cache V is copied like K."""
    batch = random_paged_batch([200, 90], block_size=8, dtype=dtype, seed=9)     # 25 and 12 blocks
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
    out = F.paged_decode_online_fast(*batch.args(), step_blocks=4)
    monkeypatch.undo()
    atol, rtol = A.TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), A.paged_decode_online(*batch.args()).float(), atol=atol, rtol=rtol)
    assert copied and max(copied) <= 4
    assert sum(copied) == (2 if copies_v else 1) * (25 + 12)
    assert (not bagged) if copies_v else (max(bagged) <= 4 * 8 and sum(bagged) == 200 + 90)


def test_fast_decodes_of_an_empty_batch_are_empty():
    batch = random_paged_batch([3], block_size=4)
    q, k_cache, v_cache, tables, lens = batch.args()
    for fast, spec in PAIRS:
        assert fast(q[:0], k_cache, v_cache, tables[:0], lens[:0]).shape == (0, *q.shape[1:])
        assert spec(q[:0], k_cache, v_cache, tables[:0], lens[:0]).shape == (0, *q.shape[1:])
