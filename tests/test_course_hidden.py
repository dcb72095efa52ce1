"""Autograded notebooks and feedback lose the hidden tests; a learner's cell that names the delimiters stays."""
from nbformat.v4 import new_code_cell

from pagedkv_lib.course.instructor.grading.nbgrader_hooks import ClearHiddenTestSource

TEST = "_check(q1)\n### BEGIN HIDDEN TESTS\nassert q1 == 42\n### END HIDDEN TESTS\n_end()"


def _cell(source, **nbgrader):
    return new_code_cell(source, metadata={"nbgrader": {"grade_id": "x", **nbgrader}})


def test_a_test_cell_keeps_its_visible_lines_and_loses_the_hidden_ones():
    cell, _ = ClearHiddenTestSource().preprocess_cell(_cell(TEST, grade=True, solution=False, points=1), {}, 0)
    assert cell.source == "_check(q1)\n_end()"


def test_an_answer_that_mentions_the_delimiters_is_left_alone_and_does_not_stop_the_run():
    answer = "q1 = 41\n# BEGIN HIDDEN TESTS\n# BEGIN HIDDEN TESTS"
    cell, _ = ClearHiddenTestSource().preprocess_cell(_cell(answer, grade=False, solution=True), {}, 0)
    assert cell.source == answer
