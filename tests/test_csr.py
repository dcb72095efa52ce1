"""Block tables + lengths and FlashInfer's CSR page lists say the same thing, both ways."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention.csr import PAD_BLOCK, from_csr, to_csr


@st.composite
def tables_and_lens(draw):
    """Padded block tables with arbitrary garbage past each request's blocks, and lengths >= 1."""
    S = draw(st.integers(1, 16))
    lens = draw(st.lists(st.integers(1, 100), min_size=1, max_size=6))
    width = max(-(-t // S) for t in lens) + draw(st.integers(0, 3))
    ids = draw(st.lists(st.integers(-1, 500), min_size=len(lens) * width, max_size=len(lens) * width))
    tables = torch.tensor(ids).view(len(lens), width)
    used = torch.arange(width) < ((torch.tensor(lens) + S - 1) // S)[:, None]
    tables[used] = tables[used].clamp(min=0)  # used entries are real block ids; padding is anything
    return tables, torch.tensor(lens), S


def test_flashinfer_example_by_hand():
    # Request 0: 5 tokens in pages [7, 2] (last page holds 1); request 1: 4 tokens in page [9] (full).
    indptr, indices, last = to_csr(torch.tensor([[7, 2, -1], [9, -1, -1]]), torch.tensor([5, 4]), 4)
    assert indptr.tolist() == [0, 2, 3]
    assert indices.tolist() == [7, 2, 9]
    assert last.tolist() == [1, 4]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32


@settings(max_examples=100, deadline=None)
@given(tables_and_lens())
def test_csr_identities(case):
    tables, lens, S = case
    indptr, indices, last = to_csr(tables, lens, S)
    pages = (indptr[1:] - indptr[:-1]).long()
    assert torch.equal(pages, (lens + S - 1) // S)                   # N_i = ceil(T_i / S)
    assert int(indptr[-1]) == indices.numel()
    assert bool(((last >= 1) & (last <= S)).all())
    assert torch.equal(S * (pages - 1) + last, lens)                 # T_i = S (N_i - 1) + last_i


@settings(max_examples=100, deadline=None)
@given(tables_and_lens())
def test_round_trip_keeps_every_used_block_and_length(case):
    tables, lens, S = case
    back, back_lens = from_csr(*to_csr(tables, lens, S), S, max_blocks=tables.shape[1])
    assert torch.equal(back_lens, lens)
    used = torch.arange(tables.shape[1]) < ((lens + S - 1) // S)[:, None]
    assert torch.equal(back[used], tables[used])
    assert bool((back[~used] == PAD_BLOCK).all())
    assert torch.equal(torch.cat(to_csr(back, back_lens, S)), torch.cat(to_csr(tables, lens, S)))


@pytest.mark.parametrize("args,match", [
    ((torch.tensor([[0, 1]]), torch.tensor([3, 4]), 2), r"\(1, 2\).*\(2,\)"),
    ((torch.tensor([[0, 1]]), torch.tensor([5]), 2), r"capacity.*\(1, 2\)"),
    ((torch.tensor([[0, 1]]), torch.tensor([0]), 2), ">= 1"),
])
def test_to_csr_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        to_csr(*args)


@pytest.mark.parametrize("args,match", [
    (([0, 2], [4, 5], [1, 2]), r"\(2,\).*\(2,\)"),
    (([0, 2, 2], [4, 5], [1, 1]), "rise by >= 1"),
    (([0, 1, 3], [4, 5], [1, 1]), "end at"),
    (([0, 1, 2], [4, 5], [0, 3]), r"\[1, block_size=2\]"),
])
def test_from_csr_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        from_csr(*[torch.tensor(a) for a in args], 2)
    with pytest.raises(ValueError, match="max_blocks"):
        from_csr(torch.tensor([0, 2]), torch.tensor([4, 5]), torch.tensor([1]), 2, max_blocks=1)


def test_empty_lists_are_an_empty_batch_not_floats():
    indptr, indices, last = to_csr(torch.zeros(0, 3, dtype=torch.long), [], 4)
    assert indptr.tolist() == [0] and indices.numel() == 0 and last.numel() == 0
    tables, lens = from_csr([0], [], [], 4)
    assert tables.shape == (0, 0) and lens.numel() == 0
    assert tables.dtype == lens.dtype == torch.int64
    tables, lens = from_csr(torch.tensor([0]), [], torch.tensor([], dtype=torch.int32), 4, max_blocks=2)
    assert tables.shape == (0, 2)
    with pytest.raises(TypeError, match="block_tables must hold integers, got dtype torch.float32"):
        to_csr(torch.zeros(0, 3), [], 4)  # an explicit float tensor is still refused


@pytest.mark.parametrize("tables, lens, match", [
    ([[2**31 + 5]], [1], r"block ids \[2147483653\].*\[0, 2147483647\]"),
    ([[-1, 2]], [3], r"block ids \[-1\] within seq_lens \[3\]"),
    ([[0, -7]], [5], r"block ids \[-7\]"),
    ([[0, 1], [2]], [3, 3], "block_tables must be a rectangular tensor of integers"),
])
def test_to_csr_refuses_used_entries_that_are_not_int32_block_ids(tables, lens, match):
    with pytest.raises(ValueError, match=match):
        to_csr(tables, lens, 4)


def test_to_csr_reads_nothing_past_the_used_entries():
    indptr, indices, last = to_csr([[5, -1, 2**40]], [3], 4)
    assert (indptr.tolist(), indices.tolist(), last.tolist()) == ([0, 1], [5], [3])
    assert int(to_csr([[2**31 - 1]], [1], 4)[1][0]) == 2**31 - 1  # the largest int32 id is fine


def test_from_csr_refuses_negative_page_ids():
    with pytest.raises(ValueError, match=r"kv_indices must be block ids >= 0.*\[-1\]"):
        from_csr([0, 2], [3, -1], [1], 4)
