"""The grader's own defences, without a kernel: test-cell guard, answer scan, output cap, pass marker."""
import builtins

import nbformat
import pytest

from pagedkv_lib.course import checks, testcell
from pagedkv_lib.course.scan import grader_names_used


def test_begin_restores_patched_builtins_and_fails_the_test():
    real, message = builtins.isinstance, ""
    builtins.isinstance = lambda *a: True
    try:
        testcell.begin("q1_tests")
    except AssertionError as err:  # begin has already put isinstance back by now
        message = str(err)
    finally:
        patched_left, builtins.isinstance = builtins.isinstance is not real, real
    assert not patched_left and "builtins.isinstance" in message
    testcell.begin("q1_tests")  # nothing changed any more: no complaint


def test_fresh_checkers_ignore_a_patched_module(monkeypatch):
    monkeypatch.setattr(checks, "check_value", lambda *a, **k: None)
    fresh_value, fresh_mistakes = testcell.begin("q2_tests")
    assert fresh_value is not checks.check_value
    with pytest.raises(AssertionError, match="is not right"):
        fresh_value("x", 3, 4)
    with pytest.raises(AssertionError, match="mistake"):
        fresh_mistakes("x", 3, [(3, "mistake")])


def test_a_global_that_hides_a_builtin_is_removed_and_reported():
    namespace = {"begin": testcell.begin, "tuple": lambda r: (52, 6), "sum": 0}
    with pytest.raises(AssertionError, match="a global named tuple"):
        exec("begin('q3_tests')", namespace)
    assert "tuple" not in namespace and "sum" not in namespace
    namespace["sum"] = 0
    exec("begin('q3_tests')", namespace)  # an innocent value under a builtin's name is only removed
    assert "sum" not in namespace


@pytest.mark.parametrize("source, names", [
    ("check_value = check_known_mistakes = lambda *a, **k: None", ["check_known_mistakes", "check_value"]),
    ("import pagedkv_lib.course as c\nc.check_value = print", ["check_value", "pagedkv_lib.course"]),
    ("import builtins\nbuiltins.AssertionError = KeyError", ["AssertionError", "builtins"]),
    ("get_ipython().set_custom_exc((Exception,), lambda *a: None)", ["set_custom_exc"]),
    ("ip = get_ipython(); ip.input_transformers_post.append(f)", ["input_transformers_post"]),
    ("get_ipython().events.register('post_run_cell', f)", ["events.register"]),
    ("tuple = lambda r: (52, 6)\ndef isinstance(*a):\n    return True", ["def isinstance", "def tuple"]),
    ("%time x = 1\ncheck_value(1)", ["check_value"]),  # not Python: words in the text
])
def test_scan_names_what_an_answer_touches(source, names):
    assert grader_names_used(source) == names


def test_scan_leaves_honest_answers_alone():
    honest = ("def blocks_needed(num_tokens, block_size):\n    if num_tokens < 0:\n"
              "        raise AssertionError('negative')\n    return -(-num_tokens // block_size)\n")
    assert grader_names_used(honest) == []


def _cell_with(outputs, grade_id="q1_tests"):
    cell = nbformat.v4.new_code_cell("x")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 1}
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def test_cap_output_keeps_a_bounded_number_of_bytes(monkeypatch, tmp_path):
    from pagedkv_lib.course.nbhooks import EVENTS_ENV, CapOutput
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events"))
    cell = _cell_with([{"output_type": "stream", "name": "stdout", "text": "z" * 1_000_000}])
    CapOutput(max_bytes=5_000).preprocess_cell(cell, {}, 0)
    assert sum(len(str(o)) for o in cell.outputs) < 6_000
    assert "output cut" in cell.outputs[-1]["text"]
    assert "huge_output" in (tmp_path / "events").read_text()


def test_a_test_cell_without_its_pass_marker_fails(monkeypatch, tmp_path):
    from pagedkv_lib.course.nbhooks import EVENTS_ENV, RequirePassMarker
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events"))
    marker = {"output_type": "display_data", "metadata": {},
              "data": {testcell.PASS_MIME: {"grade_id": "q1_tests"}, "text/plain": "ok"}}
    passed, silent, forged = _cell_with([marker]), _cell_with([]), _cell_with([marker], grade_id="q2_tests")
    for cell in (passed, silent, forged):
        RequirePassMarker().preprocess_cell(cell, {}, 0)
    assert [o["output_type"] for o in passed.outputs] == ["display_data"]
    assert silent.outputs[-1]["ename"] == "GradingError" and forged.outputs[-1]["ename"] == "GradingError"
