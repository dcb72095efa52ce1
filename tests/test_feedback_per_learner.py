"""make feedback: one learner's notebook that nbgrader cannot turn into a page costs that learner only.

nbgrader's generate_feedback goes on past a notebook it cannot convert and then exits non-zero; here it is
replaced by a stand-in that writes alice's page and fails on bob's, as nbgrader does, so the test is of
what ``feedback`` does with that: alice's page still written and polished, bob named.
"""
from pathlib import Path

import pytest

from pagedkv_lib.course.instructor.reporting import learner_feedback as lf
from pagedkv_lib.errors import PagedKVError


def test_one_learners_bad_notebook_costs_only_their_page(tmp_path, monkeypatch):
    for student in ("alice", "bob"):
        nb = tmp_path / "autograded" / student / "ps2_math" / "ps2_math.ipynb"
        nb.parent.mkdir(parents=True)
        nb.write_text("{}")

    def generate_feedback(*args, course_dir):
        page = Path(course_dir) / "feedback" / "alice" / "ps2_math" / "ps2_math.html"
        page.parent.mkdir(parents=True)
        page.write_text("<html><body><h1>ps2_math</h1></body></html>")
        raise PagedKVError("nbgrader generate_feedback ps2_math failed (exit 1):\n[ERROR] bob: bad notebook")

    monkeypatch.setattr(lf, "nbgrader", generate_feedback)
    monkeypatch.setattr(lf, "cached_releases", lambda root, names: tmp_path / "no-releases")
    with pytest.raises(PagedKVError, match=r"feedback written for the others \(1 pages\); none for bob/ps2_math"):
        lf.feedback(tmp_path)
    page = (tmp_path / "feedback" / "alice" / "ps2_math" / "ps2_math.html").read_text()
    assert 'lang="en"' in page, "alice's page was polished although bob's failed"


def test_a_page_left_from_an_earlier_run_neither_hides_a_failed_page_nor_is_polished_again(tmp_path, monkeypatch):
    for student in ("alice", "bob"):
        nb = tmp_path / "autograded" / student / "ps2_math" / "ps2_math.ipynb"
        nb.parent.mkdir(parents=True)
        nb.write_text("{}")
    stale = tmp_path / "feedback" / "bob" / "ps2_math" / "ps2_math.html"   # bob's page from last week's run
    stale.parent.mkdir(parents=True)
    stale.write_text("<html><head></head><body><h1>ps2_math</h1></body></html>")
    stale_text = stale.read_text()

    def generate_feedback(*args, course_dir):
        page = Path(course_dir) / "feedback" / "alice" / "ps2_math" / "ps2_math.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<html><head></head><body><h1>ps2_math</h1></body></html>")
        raise PagedKVError("nbgrader generate_feedback ps2_math failed (exit 1):\n[ERROR] bob: bad notebook")

    monkeypatch.setattr(lf, "nbgrader", generate_feedback)
    monkeypatch.setattr(lf, "cached_releases", lambda root, names: tmp_path / "no-releases")
    with pytest.raises(PagedKVError, match=r"feedback written for the others \(1 pages\); none for bob/ps2_math"):
        lf.feedback(tmp_path)
    assert stale.read_text() == stale_text, "last run's page was polished again"


def test_the_score_heading_becomes_the_h1_and_no_other_heading_is_touched():
    page = ("<html><head></head><body><h4>Notes</h4>\n<p>see (Score: below)</p>\n"
            "<h4>ps2_math (Score: 3 / 27)</h4>\n<h1>Lesson</h1><h4>Q1 (Score: 1)</h4></body></html>")
    polished = lf.polish(page, {})
    assert "<h4>Notes</h4>" in polished and "<h4>Q1 (Score: 1)</h4>" in polished, polished
    assert '<h1 class="feedback-score">ps2_math (Score: 3 / 27)</h1>' in polished, polished
    assert polished.count("<h4>") == polished.count("</h4>") == 2, polished
