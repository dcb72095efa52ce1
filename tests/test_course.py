"""Feedback helpers for graded test cells: they pass right answers, explain wrong ones, never reveal the answer."""
import json

import pytest

from pagedkv_lib.course import check_value, concise_errors, missing_graded_cells


def test_right_answers_pass_within_tolerance():
    check_value("x", 819_200, 819_200)
    check_value("x", 7.5 + 1e-12, 7.5)
    check_value("pair", (52, 6), (52, 6))
    check_value("d", {"a": 1, "b": [1, 2]}, {"a": 1.0, "b": (1, 2)})


@pytest.mark.parametrize("got", [3, 3.5, (1, 2), "4", True, [4, 4]])
def test_wrong_answers_fail_without_revealing_the_expected_value(got):
    with pytest.raises(AssertionError) as info:
        check_value("blocks_needed(15, 4)", got, 987654, hint="Think about the last block.")
    msg = str(info.value)
    assert "blocks_needed(15, 4)" in msg and repr(got) in msg
    assert "Think about the last block." in msg or "whole number" in msg
    assert "987654" not in msg


def test_known_misconception_is_named():
    with pytest.raises(AssertionError, match="keys AND values"):
        check_value("C_tok", 409_600, 819_200, misconceptions=[(409_600, "Count keys AND values.")], hint="h")


def test_unanswered_question_says_so():
    with pytest.raises(AssertionError, match="still None"):
        check_value("answer", None, 3)


def test_bool_is_not_a_number_here():
    with pytest.raises(AssertionError):
        check_value("flag", True, 1)


def _nb(ids):
    cells = [{"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "solution": False, "grade_id": g}},
              "source": "", "outputs": []} for g in ids]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_missing_graded_cells_are_reported(tmp_path):
    release, sub = tmp_path / "r.ipynb", tmp_path / "s.ipynb"
    release.write_text(json.dumps(_nb(["q1", "q2", "q3"])))
    sub.write_text(json.dumps(_nb(["q1", "q3"])))
    assert missing_graded_cells(sub, release) == ["q2"]
    assert missing_graded_cells(release, release) == []


def test_concise_errors_keeps_only_the_message():
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="q = 3 is not right.",
                                                  traceback=["line 1: check_value('q', q, 42)", "..."])]
    concise_errors(nb)
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: q = 3 is not right."]


def test_integers_compare_exactly_and_floats_are_refused_for_ints():
    with pytest.raises(AssertionError):
        check_value("n", 10**18 + 2, 10**18 + 1)
    with pytest.raises(AssertionError, match="whole number"):
        check_value("bytes", 819200.0, 819_200)
    check_value("x", 7.5, 7.5)


def test_known_mistakes_are_named_and_anything_else_passes():
    from pagedkv_lib.course import check_known_mistakes
    with pytest.raises(AssertionError, match="forgot the weights"):
        check_known_mistakes("blocks", 9216, [(9216, "You forgot the weights.")])
    check_known_mistakes("blocks", 7609, [(9216, "You forgot the weights.")])
    check_known_mistakes("blocks", None, [(9216, "You forgot the weights.")])


def test_numpy_and_torch_answers_are_judged_by_their_values():
    import numpy as np
    import torch
    check_value("flag", np.bool_(True), True)
    check_value("n", np.int64(7609), 7609)
    check_value("pair", np.array([52, 6]), (52, 6))
    check_value("t", torch.tensor([1, 2]), [1, 2])
    with pytest.raises(AssertionError, match="whole numbers"):
        check_value("n", np.float32(5), 5)
    with pytest.raises(AssertionError, match="is not right. half"):
        check_value("arr", np.array([1, 3]), [1, 2], misconceptions=[([1, 3], "half")])


def test_floats_inside_containers_are_refused_where_ints_are_expected():
    with pytest.raises(AssertionError, match="whole numbers"):
        check_value("pair", (52.0, 6.0), (52, 6))
    with pytest.raises(AssertionError, match="whole numbers"):
        check_value("d", {"reserved": 28.0}, {"reserved": 28})


class _SaysEqual:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class _RiggedInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("got", [_SaysEqual(), _RiggedInt(3), [_RiggedInt(1), _RiggedInt(1)], {"a": _SaysEqual()}])
def test_a_value_that_claims_to_equal_everything_is_judged_by_what_it_holds(got):
    expected = {"a": 5} if isinstance(got, dict) else ([2, 2] if isinstance(got, list) else 4)
    with pytest.raises(AssertionError):
        check_value("x", got, expected)


def test_int_subclass_holding_the_right_value_passes():
    check_value("x", _RiggedInt(4), 4)


def test_a_huge_wrong_answer_is_cut_in_the_message():
    with pytest.raises(AssertionError) as info:
        check_value("s", "x" * 10_000, "y")
    assert len(str(info.value)) < 400
