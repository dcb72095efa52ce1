"""End to end over a realistic class folder: collect, autograde, feedback, export and report.

Every student gets a row with the fair score (a broken question scores 0, the rest full marks), the
status names each problem, no output file keeps Colab's personal data or grows past a few hundred kB,
and the run finishes: the per-cell timeout here is CELL_TIMEOUT_S seconds.
"""
import csv
import json
import shutil
from pathlib import Path

import pytest

from classroom import build
from conftest import REPO
from pagedkv_lib import course
from pagedkv_lib.course.instructor.intake.collect_notebooks import release_notebooks

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.xdist_group("nbgrader-class")]  # beside the pipeline test

CELL_TIMEOUT_S = 10  # per-cell limit for this test; a healthy cell of ps2_math takes well under 1 s
NAME = "ps2_math"
PERSONAL = ("Ada Lovelace", "0123456789", "ABX9TyTOPSECRET", "executionInfo", "authorship_tag")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class") / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for folder in (course.SOURCE, course.RELEASE):  # this class hands in ps2_math only
        shutil.copytree(REPO / folder / NAME, root / folder / NAME)
    release = json.loads((REPO / course.RELEASE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / course.SOURCE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    files = build(release, solution)
    downloads = root.parent / "downloads"
    for path, text, _, _ in files:
        (downloads / path).parent.mkdir(parents=True, exist_ok=True)
        (downloads / path).write_text(text, encoding="utf-8")
    found = course.collect_notebooks(downloads, root, release_notebooks(root / course.RELEASE))
    statuses = course.autograde(root, timeout_s=CELL_TIMEOUT_S, workers=2, progress=False)
    course.feedback(root)
    report = course.report(root, releases=release_notebooks(root / course.RELEASE))
    return root, files, found, {s.student: s for s in statuses}, report


def _student(path: str) -> str:
    return {"zoe/ps2_math (1).ipynb": "zoe", "colab_ps2_math.ipynb": "colab",
            "ps2_math_colabbare.ipynb": "colabbare"}.get(path, Path(path).stem)


def test_collect_places_every_notebook_and_reports_the_rest(graded):
    root, files, found, _, _ = graded
    assert found.unplaced == {"notes.txt": "not a notebook (.ipynb)"}
    assert "truncated/ps2_math" in found.unreadable and "not valid JSON" in found.unreadable["truncated/ps2_math"]
    assert set(found.placed) == {f"{_student(p)}/{NAME}" for p, _, s, _ in files if s is not None} - {"truncated/ps2_math"}
    assert "colabbare/ps2_math" in found.problems  # metadata put back, and said so


def test_every_student_gets_the_fair_score(graded):
    root, files, _, _, _ = graded
    rows = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}
    want = {_student(p): s for p, _, s, _ in files if s is not None}
    got = {sid: float(rows[sid]["raw_score"]) for sid in want}
    assert got == want


def test_status_names_each_problem(graded):
    _, files, _, statuses, _ = graded
    for path, _, score, word in files:
        if score is None:
            continue
        st = statuses[_student(path)]
        if word == "ok":
            assert st.label == "ok", (path, st)
        else:
            assert word in st.problems, (path, st)
    rows = list(csv.DictReader((graded[0] / "status.csv").open(encoding="utf-8")))
    assert {r["student_id"] for r in rows} == set(statuses)
    assert "check_value" in statuses["cheat_override"].details[0]


def test_each_notebook_has_one_result_and_the_tables_are_its_views(graded):
    from pagedkv_lib.course.instructor.notebook_result import read_results
    root, _, _, statuses, _ = graded
    results = {r.student: r for r in read_results(root) if r.assignment == NAME}
    assert results == statuses  # what autograde returned is what it wrote, once per notebook
    grades = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}
    status = {r["student_id"]: r for r in csv.DictReader((root / "status.csv").open(encoding="utf-8"))}
    for student, result in results.items():
        assert status[student]["status"] == result.label == grades[student]["status"]
        assert sum(p["score"] for p in result.points.values()) == float(grades[student]["raw_score"])


def test_outputs_hold_no_personal_data_no_hidden_tests_and_stay_small(graded):
    root = graded[0]
    solution = (REPO / course.SOURCE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8")
    hidden = [ln.strip() for c in json.loads(solution)["cells"] for ln in "".join(c["source"]).split(
        "### BEGIN HIDDEN TESTS")[-1].split("### END HIDDEN TESTS")[0].splitlines()
        if "HIDDEN TESTS" in "".join(c["source"]) and len(ln.strip()) > 12]
    assert hidden
    for path in [*root.glob("autograded/*/*/*.ipynb"), *root.glob("feedback/*/*/*.html"), *root.glob("submitted/*/*/*")]:
        text = path.read_text(encoding="utf-8")
        assert path.stat().st_size < 300_000, path
        assert not [p for p in PERSONAL if p in text], path
        if path.suffix in (".html", ".ipynb") and "submitted" not in path.parts:
            assert not [ln for ln in hidden if ln in text], f"hidden test source in {path}"
        if path.suffix == ".html":
            assert "cdn" not in text.lower() and "mathjax.js" not in text.lower()


def test_feedback_names_tests_by_question_and_wraps_long_lines(graded):
    page = (graded[0] / "feedback" / "stub" / NAME / f"{NAME}.html").read_text(encoding="utf-8")
    assert ">Test cell<" not in page and "Q1 (3 points): bytes of KV cache per token" in page
    assert "pre-wrap" in page and "NotImplementedError" in page


def test_report_shows_scores_pass_rates_misconceptions_and_status(graded):
    root, _, _, _, report = graded
    text = report.read_text(encoding="utf-8")
    assert (root / "report" / "scores.png").stat().st_size > 1000
    assert (root / "report" / "pass_rates.png").stat().st_size > 1000
    assert "Q2 (3 points)" in text and "Rounding down drops the last" in text  # the cheaters' blocks_needed
    assert "| osexit | ps2_math | kernel died" in text
