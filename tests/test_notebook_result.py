"""Each graded notebook's result: one object every stage adds to, written once, read back whole; the
points come from nbgrader's gradebook, and the instructor's tables are views of the results."""
import json

import pytest

from pagedkv_lib.course.instructor.course_layout import RESULTS_DIR, db_url
from pagedkv_lib.course.instructor.notebook_result import NotebookResult, add_points, read_results, write_results
from pagedkv_lib.course.instructor.reporting.grades_export import read_statuses, write_status
from pagedkv_lib.errors import PagedKVError


def _results():
    return [NotebookResult("ann", "ps1", ["timed out"], ["q2 ran past 30 s"], seconds=4.5),
            NotebookResult("bob", "ps1"), NotebookResult("ann", "ps2", failed=True)]


def test_results_are_written_once_and_read_back_whole(tmp_path):
    write_results(tmp_path, _results())
    assert read_results(tmp_path) == sorted(_results(), key=lambda r: (r.assignment, r.student))
    saved = json.loads((tmp_path / RESULTS_DIR / "ps1" / "ann.json").read_text(encoding="utf-8"))
    assert saved["problems"] == ["timed out"] and saved["seconds"] == 4.5


def test_a_new_run_replaces_the_last_ones_results_as_a_whole(tmp_path):
    write_results(tmp_path, _results())
    write_results(tmp_path, [NotebookResult("bob", "ps1", ["kernel died"])])
    assert read_results(tmp_path) == [NotebookResult("bob", "ps1", ["kernel died"])]


def test_two_results_for_one_notebook_are_refused_before_anything_is_written(tmp_path):
    write_results(tmp_path, _results())
    before = {p: p.read_bytes() for p in (tmp_path / RESULTS_DIR).rglob("*.json")}
    with pytest.raises(PagedKVError, match="two results for bob's ps1"):
        write_results(tmp_path, [NotebookResult("bob", "ps1"), NotebookResult("bob", "ps1", ["tampered"])])
    assert {p: p.read_bytes() for p in (tmp_path / RESULTS_DIR).rglob("*.json")} == before


def test_status_csv_and_the_statuses_are_views_of_the_results(tmp_path):
    write_results(tmp_path, _results())
    write_status(tmp_path)
    rows = (tmp_path / "status.csv").read_text(encoding="utf-8").splitlines()
    assert rows == ["student_id,assignment,status,details", "ann,ps1,timed out,q2 ran past 30 s", "bob,ps1,ok,",
                    "ann,ps2,ok,"]
    assert read_statuses(tmp_path)[("ann", "ps1")].label == "timed out"


def test_points_come_from_the_gradebook(tmp_path):
    from nbgrader.api import Gradebook
    with Gradebook(db_url(tmp_path)) as gb:
        gb.add_assignment("ps1")
        gb.add_notebook("ps1", "ps1")
        for cell in ("q1_tests", "q2_tests"):
            gb.add_grade_cell(cell, "ps1", "ps1", max_score=3, cell_type="code")
        gb.add_student("ann")
        for grade in gb.add_submission("ps1", "ann").notebooks[0].grades:
            grade.auto_score = 3 if grade.name == "q1_tests" else 0
        gb.db.commit()
    results = [NotebookResult("ann", "ps1"), NotebookResult("bob", "ps1")]  # bob handed nothing in
    add_points(tmp_path, results)
    assert {k: (p["score"], p["max_score"]) for k, p in results[0].points.items()} == {"q1_tests": (3, 3),
                                                                                       "q2_tests": (0, 3)}
    assert results[1].points == {}
