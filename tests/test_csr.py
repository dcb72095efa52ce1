"""Block tables + lengths and FlashInfer's CSR page lists say the same thing, both ways."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.csr import PAD_BLOCK, from_csr, to_csr


@st.composite
def tables_and_lens(draw):
    """Padded block tables with arbitrary garbage past each request's blocks, and lengths >= 1."""
    S = draw(st.integers(1, 16))
    lens = draw(st.lists(st.integers(1, 100), min_size=1, max_size=6))
    width = max(-(-t // S) for t in lens) + draw(st.integers(0, 3))
    ids = draw(st.lists(st.integers(-1, 500), min_size=len(lens) * width, max_size=len(lens) * width))
    return torch.tensor(ids).view(len(lens), width), torch.tensor(lens), S


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
