"""Tensors on huge pages hold what ordinary ones hold; Linux gives huge pages where it says it can."""
from __future__ import annotations

import gc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.kernels import hugepages as H


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(0, 300), min_size=1, max_size=3),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8]))
def test_a_copy_on_huge_pages_equals_the_tensor_and_outlives_everything_else(shape, dtype):
    t = (torch.rand(shape) * 100).to(dtype)
    copy = H.copy_to_huge_pages(t)
    gc.collect()                                   # nothing but the tensor holds its memory
    assert copy.shape == t.shape and copy.dtype == dtype and copy.is_contiguous() and torch.equal(copy, t)
    assert t.numel() == 0 or copy.data_ptr() != t.data_ptr()
    copy.fill_(3)                                  # writable
    assert torch.all(copy == 3)


def _thp_fault_fallbacks() -> int:
    """How often Linux could not give a huge page where one was asked for (``/proc/vmstat``)."""
    with open("/proc/vmstat") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("thp_fault_fallback ")), 0)


def test_a_large_tensor_is_on_huge_pages_where_linux_offers_them():
    if not H.huge_pages_available():
        pytest.skip("transparent huge pages are off on this machine ([never], or not Linux)")
    before, fallbacks = H.huge_page_bytes(), _thp_fault_fallbacks()
    t = H.empty((16, 2**20), torch.float32)        # 64 MiB, 32 huge pages
    t.fill_(1.0)                                   # the pages are given when first written
    assert t.untyped_storage().data_ptr() % H.HUGE_PAGE_BYTES == 0
    gained = H.huge_page_bytes() - before
    if gained < 8 * H.HUGE_PAGE_BYTES and _thp_fault_fallbacks() > fallbacks:
        pytest.skip(f"Linux had no free 2 MiB runs to give ({gained} bytes on huge pages; thp_fault_fallback rose)")
    assert gained >= 8 * H.HUGE_PAGE_BYTES


def test_the_fused_kernel_reads_a_cache_on_huge_pages_like_any_other():
    pytest.importorskip("numba", reason="numba is not installed: pip install 'pagedkv_lib[fast]'")
    from pagedkv_lib.kernels.fused_decode import paged_decode_numba
    from pagedkv_lib.attention.batch import random_paged_batch
    batch = random_paged_batch([700, 33, 1], block_size=16, num_kv_heads=8, head_dim=128, seed=0)
    q, k, v, tables, lens = batch.args()
    expected = paged_decode_numba(q, k, v, tables, lens)
    assert torch.equal(paged_decode_numba(q, H.copy_to_huge_pages(k), H.copy_to_huge_pages(v), tables, lens),
                       expected)


@pytest.mark.parametrize("shape, dtype, error, match", [
    ((2, -1), torch.float32, ValueError, r"shape must be a sequence of ints >= 0, got \(2, -1\)"),
    (5, torch.float32, ValueError, r"shape must be a sequence of ints >= 0, got 5"),
    ((2, 2.0), torch.float32, ValueError, r"got \(2, 2\.0\)"),
    ((2, True), torch.float32, ValueError, r"got \(2, True\)"),
    (None, torch.float32, ValueError, r"got None"),
    ((2, 2), "float32", TypeError, r"dtype must be a torch.dtype such as torch.float32, got 'float32'"),
])
def test_bad_shapes_and_dtypes_are_refused_by_name(shape, dtype, error, match):
    with pytest.raises(error, match=match):
        H.empty(shape, dtype)


def test_only_cpu_tensors_are_copied():
    with pytest.raises(TypeError, match="tensor must be a CPU torch.Tensor, got list"):
        H.copy_to_huge_pages([1, 2])
    with pytest.raises(TypeError, match="on meta"):
        H.copy_to_huge_pages(torch.empty(3, device="meta"))
