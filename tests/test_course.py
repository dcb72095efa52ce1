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
    assert "blocks_needed(15, 4)" in msg and repr(got) in msg and "Think about the last block." in msg
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
