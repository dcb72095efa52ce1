"""The Code lesson's online-softmax table agrees with attention and with the online update rule."""
import inspect
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib.lesson.code_lesson import online_softmax_states


def _head(T, D, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(D, generator=gen), torch.randn(T, D, generator=gen),
            torch.randn(T, D, generator=gen))


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 40), S=st.integers(1, 9), seed=st.integers(0, 10**6))
def test_acc_over_l_after_each_block_is_attention_over_the_tokens_so_far(T, S, seed):
    q, k, v = _head(T, 8, seed)
    states = online_softmax_states(q, k, v, S, 0.35)
    assert [s["tokens"] for s in states] == [min(T, (j + 1) * S) for j in range(len(states))]
    assert states[-1]["tokens"] == T and len(states) == math.ceil(T / S)
    for s in states:
        n = s["tokens"]
        want = A.dense_attention(q[None, None], k[:n, None], v[:n, None], causal=False,
                                 scale=0.35)[0, 0]
        torch.testing.assert_close(s["acc"] / s["l"], want, atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(T=st.integers(2, 40), S=st.integers(1, 9), seed=st.integers(0, 10**6))
def test_states_follow_the_online_update_rule(T, S, seed):
    """m never falls; l and acc of block j are block j-1's, rescaled by exp(m_old - m), plus block j's."""
    q, k, v = _head(T, 8, seed)
    scores = 0.5 * (k @ q)
    states = online_softmax_states(q, k, v, S, 0.5)
    for old, new in zip(states, states[1:]):
        assert new["m"] >= old["m"]
        w = torch.exp(scores[old["tokens"]:new["tokens"]] - new["m"])
        rescale = math.exp(old["m"] - new["m"])
        assert new["l"] == pytest.approx(old["l"] * rescale + float(w.sum()), rel=1e-5)
        torch.testing.assert_close(new["acc"], old["acc"] * rescale + w @ v[old["tokens"]:new["tokens"]],
                                   atol=1e-5, rtol=1e-5)


def test_bad_shapes_and_block_size_are_refused_by_name():
    q, k, v = _head(5, 4, 0)
    with pytest.raises(ValueError, match=r"q \(4,\).*k \(5, 4\).*v \(5, 3\)"):
        online_softmax_states(q, k, v[:, :3], 2, 1.0)
    with pytest.raises(ValueError, match="block_size"):
        online_softmax_states(q, k, v, 0, 1.0)


def test_opening_lines_cut_a_kernel_loop_where_it_finds_its_rows_and_say_what_follows():
    from pagedkv_lib.kernels import contiguous_kernel as CK, numba_kernel as NK
    from pagedkv_lib.lesson.code_lesson import opening_lines
    paged = opening_lines(NK._scores.py_func, "kb = ", "and so on")
    twin = opening_lines(CK._scores_rows.py_func, "kb = ", "and so on")
    assert paged.startswith("def _scores(") and twin.startswith("def _scores_rows(")
    assert "block = table[j]" in paged and "_value(k_cache, block, slot + u + 1" in paged
    assert "keys[r + u + 1, h, d]" in twin and "table" not in twin
    for shown, whole in ((paged, NK._scores.py_func), (twin, CK._scores_rows.py_func)):
        *_, dots, remark = shown.splitlines()
        assert '"""' not in shown and dots.strip() == "..." and remark == dots.replace("...", "# and so on")
        body = shown.splitlines()[1:-2]
        assert len(body) < len(inspect.getsource(whole).splitlines()) / 2
        assert "\n".join(body) in inspect.getsource(whole)      # the source's own lines, in order, unchanged
    with pytest.raises(ValueError, match="through='no such line'"):
        opening_lines(NK._scores.py_func, "no such line", "")


def test_what_follows_the_opening_lines_wraps_within_the_code_area():
    from pagedkv_lib.kernels import numba_kernel as NK
    from pagedkv_lib.lesson.code_lesson import REMARK_COLUMNS, opening_lines
    names = ["pagedkv_lib.kernels.numba_kernel._add_values", "two-loop", "block-table"]
    rest = " ".join(names + [f"word{i}" for i in range(60)])
    shown = opening_lines(NK._scores.py_func, "kb = ", rest).splitlines()
    dots = next(i for i, line in enumerate(shown) if line.strip() == "...")
    remark = shown[dots + 1:]
    assert len(remark) > 1 and all(len(line) <= REMARK_COLUMNS for line in remark)
    indent = shown[dots][:shown[dots].index("...")]
    assert all(line.startswith(indent + "# ") for line in remark)
    assert " ".join(line.strip()[2:] for line in remark) == rest     # every word whole, in order
    assert opening_lines(NK._scores.py_func, "kb = ", "").splitlines()[-1].strip() == "..."
