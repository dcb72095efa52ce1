"""CPU tensors on the OS's huge pages (:mod:`pagedkv_lib.kernels.huge_pages`): same values, and huge pages
where Linux offers them.

Whether the OS gave huge pages is read from ``/proc/self/smaps`` (``AnonHugePages`` of the mapping), against
what ``/sys/kernel/mm/transparent_hugepage/enabled`` offers: ``always`` or ``madvise`` must give them to an
advised mapping, ``never`` gives none. A plain ``torch.empty`` of the same size is the control: with
``madvise`` it gets none, so the advice is what makes the difference. Another advised tensor right beside
one must not count towards it (the OS merges neighbouring mappings whose flags agree).
"""
from __future__ import annotations

import mmap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.kernels.huge_pages import (HUGE_PAGE_BYTES, LINE_BYTES, empty_on_huge_pages, huge_page_share,
                                            on_huge_pages)
from pagedkv_lib.kernels.timing import measure_decode_speed

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def offered() -> str:
    """The transparent huge page mode in force (``always``, ``madvise`` or ``never``); ``never`` without the file."""
    if not THP.exists():
        return "never"
    return THP.read_text().split("[")[1].split("]")[0]


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8)


@st.composite
def tensors(draw) -> torch.Tensor:
    """A small CPU tensor of any of :data:`DTYPES`, sometimes empty, sometimes strided (a transpose)."""
    shape = draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))
    t = (torch.arange(int(torch.tensor(shape).prod())) * draw(st.integers(1, 7))).reshape(shape)
    t = t.to(draw(st.sampled_from(DTYPES)))
    return t.transpose(0, -1) if draw(st.booleans()) else t


@settings(max_examples=60, deadline=None)
@given(st.lists(tensors(), min_size=1, max_size=5))
def test_copies_hold_the_same_values_each_on_its_own_cache_lines(originals):
    copies = on_huge_pages(originals)
    spans = []
    for original, copy in zip(originals, copies):
        assert copy.dtype == original.dtype and copy.shape == original.shape and copy.is_contiguous()
        assert torch.equal(copy, original)
        assert copy.data_ptr() % LINE_BYTES == 0
        spans.append((copy.data_ptr(), copy.data_ptr() + copy.numel() * copy.element_size()))
    spans.sort()
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))   # no two overlap
    before = [o.clone() for o in originals]
    for copy in copies:
        copy.fill_(1)                                        # each copy is its own memory, not the original's
    assert all(torch.equal(o, b) for o, b in zip(originals, before))
    assert all(bool((c == 1).all()) for c in copies)


def test_a_copy_starts_on_a_huge_page_and_the_os_backs_it_with_them_where_offered():
    size = 4 * HUGE_PAGE_BYTES
    advised = empty_on_huge_pages((size,), torch.uint8).fill_(1)
    plain = torch.empty(size, dtype=torch.uint8).fill_(1)
    mode = offered()
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert advised.data_ptr() % HUGE_PAGE_BYTES == 0
    if mode in ("always", "madvise"):
        assert huge_page_share(advised) >= 0.5, f"THP is {mode!r}, yet the advised tensor got few huge pages"
    else:
        assert huge_page_share(advised) == 0
    if mode != "always":
        assert huge_page_share(plain) == 0                   # without the advice: small pages


def test_a_tensor_is_not_credited_with_its_neighbours_huge_pages():
    """Advised mappings made one after another, so that the OS lays them side by side, each other one touched
    (huge pages) and the rest never touched (none): each reads its own."""
    untouched, touched = [], []
    for _ in range(8):
        untouched.append(empty_on_huge_pages((2 * HUGE_PAGE_BYTES,), torch.uint8))
        touched.append(empty_on_huge_pages((2 * HUGE_PAGE_BYTES,), torch.uint8).fill_(1))
    assert [huge_page_share(u) for u in untouched] == [0.0] * 8
    shares = [huge_page_share(t) for t in touched]
    assert all(0 <= s <= 1 for s in shares)
    if offered() in ("always", "madvise"):
        assert min(shares) > 0


def test_a_tensor_off_the_cpu_is_refused_by_name_and_nothing_is_copied():
    cpu, meta = torch.ones(3), torch.empty(3, device="meta")
    with pytest.raises(ValueError, match=r"tensors\[1\] is on meta"):
        on_huge_pages([cpu, meta])
    assert torch.equal(cpu, torch.ones(3))


def test_the_lesson_measurement_reports_how_much_of_the_paged_cache_got_huge_pages():
    speed = measure_decode_speed([40, 17, 64], num_kv_heads=2, group=2, head_dim=16, repeats=1)
    if offered() in ("always", "madvise"):
        assert speed.huge_page_share >= 0.5
    else:
        assert speed.huge_page_share == 0.0
    if offered() == "madvise":
        small = measure_decode_speed([40, 17, 64], num_kv_heads=2, group=2, head_dim=16, repeats=1, huge_pages=False)
        assert small.huge_page_share == 0.0
