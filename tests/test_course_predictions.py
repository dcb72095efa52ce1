"""The report's prediction sections, on synthetic handed-in notebooks (no nbgrader run).

Records are shaped as the lesson gates save them (an output of mime type
``application/vnd.pagedkv.prediction+json``); some are re-commits, some malformed, some hostile.
"""
import csv
import json
import re

import pytest

from pagedkv_lib.course.instructor.reporting.class_report import report
from pagedkv_lib.course.instructor.reporting.prediction_report import prediction_section
from pagedkv_lib.course.instructor.reporting.prediction_records import MAX_GATES, MAX_RECORDS, MAX_TEXT, MIME, parse_record, read_predictions

STUDENTS = ["learner_ada", "learner_bo", "learner_cy", "learner_di", "learner_ed", "learner_fu"]
FORGER = "learner_aa"  # sorts first; commits a number at a choice gate
SLACK_MISTAKE = "counted a whole block of slack per request instead of half a block on average"


def rec(gate, value, *, kind="number", right=None, mis=None, time="2026-11-30T10:00:00Z", **extra):
    return {"v": 1, "gate": gate, "notebook": "ps2_math", "kind": kind, "value": value, "right": right,
            "misconception": mis, "time": time, **extra}


def output(data):
    return {"output_type": "display_data", "metadata": {}, "data": {MIME: data, "text/plain": "<Gate>"}}


def nb(*cells_outputs, graded=()):
    cells = [{"cell_type": "code", "metadata": {}, "source": "W.predict(...)", "outputs": list(outs),
              "execution_count": 1} for outs in cells_outputs]
    for gid, points, failed in graded:
        cells.append({"cell_type": "code", "source": "check()", "execution_count": 2,
                      "metadata": {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": gid,
                                                "points": points}},
                      "outputs": [{"output_type": "error", "ename": "CheckFailed", "evalue": "no", "traceback": []}]
                      if failed else []})
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}


def write(root, folder, student, assignment, notebook):
    path = root / folder / student / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook), encoding="utf-8")


HOSTILE = [
    "not json at all {",                                            # a string that is not JSON
    ["a", "list"],                                                  # not an object
    rec("ps2-slack", 5.5, v=2),                                     # unknown version
    rec("../../etc/passwd", 5.5),                                   # bad gate id
    rec("ps2-slack", 5.5, kind="eval"),                             # bad kind
    rec("ps2-slack", {"__import__": "os"}),                         # value does not fit its kind
    rec("ps2-slack", True),                                         # a bool is not a number
    rec("ps2-slack", 10 ** 400),                                    # an int no float holds
    rec("ps2-slack", float("nan")),                                 # NaN (json writes it, json reads it)
    rec("ps2-slack", 5.5, right="yes"),                             # bad right
    rec("ps2-slack", 5.5, mis=123),                                 # bad misconception
    rec("ps2-slack", 5.5, time="yesterday"),                        # bad time
    rec("ps2-slack", 5.5, question="q6; rm -rf /"),                 # bad question
]


@pytest.fixture
def course(tmp_path):
    """Six learners' ps2_math and one lesson notebook, with autograded ps2_math results."""
    root = tmp_path / "course"
    t = "2026-11-30T10:{:02d}:00Z".format
    slack = {  # learner: (committed value, right, misconception, later q6 passed)
        "learner_ada": (5.5, True, None, True), "learner_bo": (5.5, True, None, True),
        "learner_cy": (11.0, False, SLACK_MISTAKE, False), "learner_di": (11.0, False, SLACK_MISTAKE, True),
        "learner_ed": (0.0, False, "forgot the partly filled last block", False),
        "learner_fu": (6.0, False, None, False)}
    for i, (s, (value, right, mis, passed)) in enumerate(slack.items()):
        outs = [output(rec("ps2-slack", value, right=right, mis=mis, time=t(20), question="q6_answer"))]
        if s == "learner_ada":  # re-committed: the earlier (wrong) commit comes later in the notebook
            outs.append(output(rec("ps2-slack", 11.0, right=False, mis=SLACK_MISTAKE, time=t(5), question="q6_answer")))
        choice = output(rec("ps2-blocks", "52" if i % 3 else "51", kind="choice", right=bool(i % 3),
                            mis=None if i % 3 else "rounded down instead of up", time=t(21), question="q2_tests"))
        hostile = [output(h) for h in HOSTILE] if s == "learner_fu" else []
        write(root, "submitted", s, "ps2_math", nb(outs, [choice], hostile))
        write(root, "autograded", s, "ps2_math", nb(graded=[("q6_tests", 2, not passed), ("q2_tests", 3, False)]))
    evil = "<script>alert(1)</script> ![x](http://evil.example/p.png) | cell | " + "A" * 5000
    for s, value in zip(STUDENTS, ["4", "4", "2", evil, evil, r"$\frac{$ blocks"]):  # "$": mathtext in a label
        write(root, "submitted", s, "01_intuition",
              nb([output(rec("q-waste", value, kind="text" if value == evil else "choice", right=value == "4",
                             mis="thinks memory is reserved per token" if value == "2" else None))]))
    (root / "submitted" / "learner_bo" / "01_intuition" / "copy.ipynb").write_text("{ truncated", encoding="utf-8")
    write(root, "submitted", FORGER, "ps2_math", nb([output(rec("ps2-blocks", 52.0, right=True, question="q2_tests"))]))
    with (root / "grades.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "student_id", "raw_score", "score", "max_score"])
        w.writerows([["ps2_math", s, 10, 10, 26] for s in STUDENTS])
    release = {"cells": [{"cell_type": "code", "metadata": {},
                          "source": 'W.predict("ps2-none", "How many blocks?", choices=["1", "2"])'}]}
    return root, {"ps2_math": release}


def _section(text, gate):
    start = text.index(f"### {gate} ")
    end = text.find("\n### ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_each_gate_gets_counts_share_right_wrong_answers_and_the_later_score(course):
    root, releases = course
    text = report(root, releases=releases).read_text(encoding="utf-8")
    slack = _section(text, "ps2-slack")
    assert "6 learners committed; 33% right (2 of 6 with a verdict)." in slack  # ada's re-commit counts once, right
    rows = [ln for ln in slack.splitlines() if ln.startswith("| ") and "learners" not in ln]
    assert rows[0] == f"| 11 | 2 | {SLACK_MISTAKE} |"
    assert rows[1:3] == ["| 0 | 1 | forgot the partly filled last block |", "| 6 | 1 | none known |"]
    assert "| prediction | learners | mean later score on q6_tests (of 2) |" in slack  # q6_answer -> q6_tests
    assert "| right | 2 | 2.00 |" in slack and "| wrong | 4 | 0.50 |" in slack
    blocks = _section(text, "ps2-blocks")
    assert "6 learners committed; 67% right (4 of 6" in blocks and "| 51 | 2 | rounded down instead of up |" in blocks
    assert "| right | 4 | 3.00 |" in blocks and "| wrong | 2 | 3.00 |" in blocks  # q2 passed by all
    assert "Nobody committed" in _section(text, "ps2-none")
    lesson = _section(text, "q-waste")
    assert "6 learners committed; 33% right (2 of 6" in lesson  # learner_bo's unreadable copy.ipynb changes nothing
    assert "thinks memory is reserved per token" in lesson and "mean later score" not in lesson
    for gate in ("ps2_math--ps2-slack", "ps2_math--ps2-blocks", "01_intuition--q-waste"):
        assert (root / "report" / "predictions" / f"{gate}.png").stat().st_size > 5000
    assert not (root / "report" / "predictions" / "ps2_math--ps2-none.png").exists()


def test_malformed_and_hostile_records_are_counted_and_shown_inertly(course):
    root, releases = course
    text = report(root, releases=releases).read_text(encoding="utf-8")
    ignored = re.search(r"Ignored: (.*)\.", text)[1]
    for reason in ("1 not valid JSON", "1 not a JSON object", "1 unknown version", "1 bad gate id", "1 bad kind",
                   "4 value does not fit its kind", "1 bad right", "1 bad misconception", "1 bad time",
                   "1 bad question", "1 unreadable notebook", "1 kind differs from the gate's other records"):
        assert reason in ignored
    assert "<script>" not in text and "](http" not in text and "passwd" not in text
    lesson = _section(text, "q-waste")
    wrong_row = next(ln for ln in lesson.splitlines() if "alert" in ln and ln.startswith("| "))
    assert len(re.findall(r"(?<!\\)\|", wrong_row)) == 4  # the learner's "|" cannot add table cells
    assert len(wrong_row) < 2 * 8 * MAX_TEXT and "A" * MAX_TEXT not in wrong_row
    page = (root / "report" / "report.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "evil.example" in page and '<img src="http://evil' not in page
    assert '<img src="predictions/ps2_math--ps2-slack.png"' in page and "<table>" in page


def test_no_learner_is_named_unless_the_instructor_asks(course):
    root, releases = course
    text = report(root, releases=releases).read_text(encoding="utf-8")
    assert not any(s in text or s.replace("_", "\\_") in text for s in STUDENTS + [FORGER])
    named = report(root, releases=releases, names=True).read_text(encoding="utf-8")
    assert all(f"| {s} |" in named for s in STUDENTS)


def test_a_notebook_cannot_flood_the_report():
    assert parse_record(rec("g", "x" * 10_000, kind="text"), "s", "a").value.endswith("…")
    with pytest.raises(ValueError, match="over 20 kB"):
        parse_record(json.dumps(rec("g", "x" * 30_000, kind="text")), "s", "a")


def test_records_and_gates_past_the_caps_are_counted_not_read(tmp_path):
    recommits = [output(rec("g", float(i), time=f"2026-11-30T10:00:{i % 60:02d}+00:00"))
                 for i in range(MAX_RECORDS + 5)]
    write(tmp_path, "submitted", "s", "a", nb(recommits))
    gates = [output(rec(f"g{i}", 1.0)) for i in range(MAX_GATES + 7)]
    write(tmp_path, "submitted", "t", "a", nb(gates))
    preds, bad = read_predictions(tmp_path / "submitted")
    assert bad[f"more than {MAX_RECORDS} records in one notebook"] == 5
    assert bad[f"more than {MAX_GATES} gates in one notebook"] == 7
    assert len([p for p in preds if p.student == "t"]) == MAX_GATES
    assert [p.gate for p in preds if p.student == "s"] == ["g"]


def test_no_records_at_all_says_so(tmp_path):
    (tmp_path / "submitted").mkdir()
    lines = prediction_section(tmp_path, tmp_path / "report")
    assert "No prediction was committed in the handed-in notebooks." in lines
