"""One hostile file never stops a class: every submission is bounded before it is parsed, and whatever
goes wrong with one becomes that submission's status.

The three files that stopped a whole class before (issue 28): a 10 KB notebook whose cell metadata
nests 5,000 lists deep (``json.loads`` raised RecursionError in collect and in autograde's preparation),
and an answer ``1+1+...+1`` of 5,000 terms (the answer scan's ``ast.parse`` raised RecursionError).
"""
import copy
import csv
import json
import random
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from classroom import REPO, WRONG, answered, course_copy, solutions_by_cell
from pagedkv_lib import course
from pagedkv_lib.course.instructor.intake.collect_notebooks import collect_notebooks, release_notebooks
from pagedkv_lib.course.instructor.intake.prepare_submission import prepare
from pagedkv_lib.course.instructor.intake.submission_bounds import (Malformed, SubmissionLimits, json_depth,
                                                                    parse_answer, parse_bounded, syntax_depth)
from pagedkv_lib.course.instructor.notebook_result import NotebookResult as Status

NAME = "ps2_math"
DEEP = 5_000
LONG_SUM = "fp8_tokens = " + "+".join(["1"] * DEEP) + "\n"


def _release() -> dict:
    return json.loads((REPO / course.RELEASE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))


def _honest() -> dict:
    solution = json.loads((REPO / course.SOURCE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    return answered(_release(), solutions_by_cell(solution))


def deep_metadata_text(nb: dict) -> str:
    """``nb`` as JSON with one answer cell's metadata nested :data:`DEEP` lists deep (about 10 KB more)."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    cell["metadata"]["deep"] = "@DEEP@"
    return json.dumps(nb, indent=1).replace('"@DEEP@"', "[" * DEEP + "]" * DEEP)


def test_the_bounds_are_checked_without_recursion():
    text = "[" * 100_000 + "]" * 100_000
    assert json_depth(text, 100) == 101  # stops counting past the limit
    assert json_depth('{"a": "[[[[", "b": "\\"[", "c": [[1]]}', 100) == 3, "brackets inside strings do not count"
    with pytest.raises(RecursionError):
        json.loads(text)  # what the bound protects
    with pytest.raises(Malformed, match="nests more than 100 levels"):
        parse_bounded(deep_metadata_text(_honest()), SubmissionLimits(), "deep.ipynb")
    with pytest.raises(Malformed, match="syntax tree|Python's parser"):
        parse_answer(LONG_SUM, SubmissionLimits())
    import ast
    tree = ast.parse("x = " + "+".join(["1"] * 300))
    assert syntax_depth(tree, 100) == 101 and syntax_depth(ast.parse("x = 1"), 100) == 4  # Module, Assign, Name, Store
    assert parse_answer("def f(:\n", SubmissionLimits()) is None, "a learner's syntax error is theirs, not malformed"


def test_limits_are_settings_read_from_the_course_config(tmp_path):
    from pagedkv_lib.course.instructor.course_layout import course_config
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.SubmissionLimits.cells = 7\n")
    limits = SubmissionLimits(config=course_config(tmp_path))
    assert limits.cells == 7 and limits.json_depth == SubmissionLimits().json_depth
    assert "cells" in SubmissionLimits.class_traits()["cells"].help.lower()


def _place(root: Path, student: str, text: str) -> Path:
    folder = root / course.SUBMITTED / student / NAME
    folder.mkdir(parents=True)
    (folder / f"{NAME}.ipynb").write_text(text, encoding="utf-8")
    return folder


def test_prepare_gives_each_hostile_file_its_status_and_leaves_the_honest_one_as_it_was(tmp_path):
    root = course_copy(tmp_path / "course", NAME)
    release = release_notebooks(root / course.RELEASE)[NAME]
    files = {"honest": json.dumps(_honest()), "deep": deep_metadata_text(_honest()),
             "longsum": json.dumps(answered(_honest(), {"q7_answer": LONG_SUM})),
             "notjson": "{", "wrongtypes": json.dumps({"nbformat": 4, "cells": [7, "x"], "metadata": {}})}
    statuses = {}
    for student, text in files.items():
        statuses[student] = Status(student, NAME)
        ready = prepare(_place(root, student, text), NAME, release, statuses[student])
        assert ready == (student in ("honest", "longsum")), student
    assert statuses["honest"].label == "ok"
    assert statuses["deep"].label == "malformed" and "100 levels" in statuses["deep"].details[0]
    assert statuses["longsum"].label == "malformed" and "q7_answer" in statuses["longsum"].details[0]
    assert statuses["notjson"].label == "unreadable" and statuses["wrongtypes"].label == "malformed"
    assert (root / course.SUBMITTED / "deep" / NAME / f"{NAME}.ipynb.malformed").exists(), "set aside for nbgrader"


@pytest.mark.slow
@pytest.mark.xdist_group("nbgrader-class")
@pytest.mark.long
def test_a_class_with_the_three_hostile_files_is_graded_and_everyone_gets_a_row(tmp_path):
    root = course_copy(tmp_path / "course", NAME)
    honest, release = _honest(), _release()
    q7 = float(next(c for c in release["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "q7_tests")
               ["metadata"]["nbgrader"]["points"])
    full = float(sum(c["metadata"]["nbgrader"]["points"] for c in release["cells"]
                     if c["metadata"].get("nbgrader", {}).get("grade") and not c["metadata"]["nbgrader"].get("solution")))
    longsum = json.dumps(answered(honest, {"q7_answer": LONG_SUM}), indent=1)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    for student, text in {"honest": json.dumps(honest), "allwrong": json.dumps(answered(release, WRONG)),
                          "deepmeta": deep_metadata_text(honest), "longsum": longsum}.items():
        (downloads / f"{student}.ipynb").write_text(text, encoding="utf-8")
    found = course.collect_notebooks(downloads, root, release_notebooks(root / course.RELEASE))
    assert set(found.placed) == {f"{s}/{NAME}" for s in ("honest", "allwrong", "longsum")}
    assert "100 levels" in found.malformed[f"deepmeta/{NAME}"]
    _place(root, "deepmeta_direct", deep_metadata_text(honest))  # as nbgrader collect leaves them on a hub
    _place(root, "longsum_direct", longsum)

    statuses = {s.student: s for s in course.autograde(root, timeout_s=20, workers=2, progress=False)}

    want = {"honest": (full, "ok"), "allwrong": (0.0, "ok"), "deepmeta": (0.0, "malformed"),
            "deepmeta_direct": (0.0, "malformed"), "longsum": (full - q7, "malformed"),
            "longsum_direct": (full - q7, "malformed")}
    # the first problem is the intake's; the kernel may also time out compiling the long sum (that answer only)
    assert {s: (st.problems or ["ok"])[0] for s, st in statuses.items()} == {s: w for s, (_, w) in want.items()}
    assert all(set(statuses[s].problems) <= {"malformed", "timed out"} for s in ("longsum", "longsum_direct"))
    grades = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}
    assert {s: float(grades[s]["raw_score"]) for s in want} == {s: score for s, (score, _) in want.items()}
    rows = {r["student_id"] for r in csv.DictReader((root / "status.csv").open(encoding="utf-8"))}
    assert rows == set(want)


# -- the intake, fuzzed: any notebook gets a verdict, and the honest student's is unchanged --------------

SMALL = dict(file_bytes=200_000, json_depth=100, cells=60, output_bytes=20_000, line_chars=2_000, syntax_depth=100)
JUNK = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def hostile_notebooks(draw) -> str:
    """The honest notebook's text after a few hostile edits: deep, wide, huge or of the wrong type."""
    nb = _honest()
    inserts = {}
    for n in range(draw(st.integers(1, 3))):
        cells = nb["cells"] if isinstance(nb.get("cells"), list) else []
        cell = cells[draw(st.integers(0, len(cells) - 1))] if cells and isinstance(cells[0], dict) else None
        kind = draw(st.sampled_from(["deep", "wide", "huge line", "huge output", "wrong type", "long sum",
                                     "drop key", "junk text"]))
        if kind == "deep" and cell is not None:
            depth = draw(st.integers(50, 3_000))
            opener = draw(st.sampled_from(["[", '{"k":']))
            closer = "]" if opener == "[" else "}"
            inserts[f"@{n}@"] = opener * depth + "1" + closer * depth
            where = draw(st.sampled_from(["metadata", "outputs", "source"]))
            if where == "outputs" and cell.get("cell_type") == "code":
                cell["outputs"] = [{"output_type": "display_data", "data": {"application/json": f"@{n}@"}, "metadata": {}}]
            elif isinstance(cell.get("metadata"), dict):
                cell["metadata"]["x"] = f"@{n}@"
            else:
                cell["source"] = f"@{n}@"
        elif kind == "wide":
            nb["cells"] = cells * draw(st.integers(1, 40))
        elif kind == "huge line" and cell is not None:
            cell["source"] = "x = '" + "y" * draw(st.integers(1_000, 30_000)) + "'\n"
        elif kind == "huge output" and cell is not None and cell.get("cell_type") == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "z" * draw(st.integers(1_000, 60_000))}]
        elif kind == "wrong type":
            target = draw(st.sampled_from(["cells", "metadata", "source", "outputs", "nbgrader", "grade_id", "cell",
                                           "cell_type"]))
            value = draw(JUNK)
            if target in ("cells", "metadata"):
                nb[target] = value
            elif cell is not None and target in ("source", "outputs", "cell_type"):
                cell[target] = value
            elif cell is not None and target == "nbgrader" and isinstance(cell.get("metadata"), dict):
                cell["metadata"]["nbgrader"] = value
            elif cell is not None and target == "grade_id" and isinstance(cell.get("metadata", {}).get("nbgrader"), dict):
                cell["metadata"]["nbgrader"]["grade_id"] = value
            elif cells and target == "cell":
                cells[0] = value
        elif kind == "long sum" and cell is not None:
            cell["source"] = "x = " + "+".join(["1"] * draw(st.integers(100, 1_500))) + "\n"
        elif kind == "drop key":
            nb.pop(draw(st.sampled_from(["cells", "metadata", "nbformat"])), None)
        elif kind == "junk text":
            return draw(st.text(max_size=200))
    text = json.dumps(nb)
    for key, value in inserts.items():
        text = text.replace(f'"{key}"', value)
    return text


@pytest.fixture(scope="module")
def intake_course(tmp_path_factory):
    root = course_copy(tmp_path_factory.mktemp("fuzz") / "course", NAME)
    return root, release_notebooks(root / course.RELEASE)


def _intake(root: Path, releases: dict, hostile: str) -> tuple[object, dict, dict]:
    """collect then prepare, as autograde runs them, for an honest and a hostile student."""
    for folder in (root / course.SUBMITTED, root.parent / "downloads"):
        shutil.rmtree(folder, ignore_errors=True)
    downloads = root.parent / "downloads"
    downloads.mkdir()
    (downloads / "honest.ipynb").write_text(json.dumps(_honest()), encoding="utf-8")
    (downloads / "hostile.ipynb").write_text(hostile, encoding="utf-8", errors="surrogatepass")
    limits = SubmissionLimits(**SMALL)
    found = collect_notebooks(downloads, root, releases, None, limits=limits)
    statuses, texts = {}, {}
    for student in ("honest", "hostile"):
        folder = root / course.SUBMITTED / student / NAME
        if folder.is_dir():
            statuses[student] = Status(student, NAME)
            prepare(folder, NAME, releases[NAME], statuses[student], limits=limits)
            texts[student] = sorted((p.name, p.read_text(encoding="utf-8")) for p in folder.iterdir())
    return found, statuses, texts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile=hostile_notebooks())
def test_any_notebook_gets_a_verdict_and_the_others_are_unchanged(intake_course, hostile):
    root, releases = intake_course
    limit, depth, frame = sys.getrecursionlimit(), 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(depth + 400)  # room for json_depth's 100 levels, none for recursion over a deeper file
    try:
        found, statuses, texts = _intake(root, releases, hostile)
    finally:
        sys.setrecursionlimit(limit)
    baseline = _intake(root, releases, json.dumps(_honest()))
    assert texts["honest"] == baseline[2]["honest"] and statuses["honest"] == baseline[1]["honest"]
    verdicts = {k: v for k, v in [*found.unreadable.items(), *found.malformed.items()] if k.startswith("hostile/")}
    assert not found.failed, found.failed  # the grader's own error: a bug to fix, though it would still be a status
    event(statuses["hostile"].label if "hostile" in statuses else
          "not placed, " + ("unreadable" if any(k.startswith("hostile/") for k in found.unreadable) else "malformed"))
    if "hostile" in statuses:
        assert not verdicts
        label = statuses["hostile"].label
        assert label == "ok" or set(label.split(", ")) <= {"malformed", "unreadable", "cells missing", "tampered",
                                                            "reaches outside", "key mismatch"}, statuses["hostile"]
    else:
        assert len(verdicts) == 1 and all(v for v in verdicts.values()), (found, hostile[:200])


def test_random_bytes_never_stop_collect(tmp_path):
    root = course_copy(tmp_path / "course", NAME)
    releases = release_notebooks(root / course.RELEASE)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    rng = random.Random(28)
    for i in range(20):
        (downloads / f"s{i}.ipynb").write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000))))
    (downloads / "honest.ipynb").write_text(json.dumps(_honest()), encoding="utf-8")
    found = collect_notebooks(downloads, root, releases)
    assert set(found.placed) == {f"honest/{NAME}"} and len(found.unreadable) + len(found.malformed) == 20
