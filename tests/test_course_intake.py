"""collect's naming rules and notebook cleaning, on small hand-made notebooks (no nbgrader run)."""
import json
import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from pagedkv_lib.course.instructor.intake.collect_notebooks import collect_notebooks as collect, place
from pagedkv_lib.course.instructor.intake.variant_keys import student_id
from pagedkv_lib.course.instructor.intake.notebook_cleaning import Unreadable, answer_marker, clean, normalise, parse_notebook as parse

ASSIGNMENTS = ["ps1_intuition", "ps2_math"]


@pytest.mark.parametrize("path, want", [
    ("alice_ps2_math.ipynb", ("alice", "ps2_math")),
    ("ps2_math_bob.ipynb", ("bob", "ps2_math")),
    ("carol/ps2_math (1).ipynb", ("carol", "ps2_math")),
    ("dave/Copy of ps2_math.ipynb", ("dave", "ps2_math")),
    ("class/erin_ps1_intuition (2).ipynb", ("erin", "ps1_intuition")),
    ("Frank Lee - ps2_math.ipynb", ("frank_lee", "ps2_math")),
])
def test_notebooks_are_placed_by_name(path, want):
    assert place(Path(path), ASSIGNMENTS, None) == want


def test_a_bare_name_needs_the_assignment_and_a_name_needs_a_student():
    with pytest.raises(ValueError, match="assignment"):
        place(Path("alice.ipynb"), ASSIGNMENTS, None)
    assert place(Path("alice.ipynb"), ASSIGNMENTS, "ps2_math") == ("alice", "ps2_math")
    with pytest.raises(ValueError, match="no student name"):
        place(Path("ps2_math (1).ipynb"), ASSIGNMENTS, None)


@given(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,11}", fullmatch=True), st.sampled_from(ASSIGNMENTS),
       st.sampled_from(["{s}_{a}", "{a}_{s}", "{s}/{a}", "{s}/{a} (1)", "{s}/Copy of {a}"]))
def test_any_student_name_survives_every_accepted_pattern(name, assignment, pattern):
    rel = Path(pattern.format(s=name, a=assignment) + ".ipynb")
    assert place(rel, ASSIGNMENTS, None) == (student_id(name), assignment)


def _release():
    def cell(kind, gid, source, **meta):
        base = {"grade": False, "solution": False, "locked": False, "grade_id": gid}
        c = {"cell_type": kind, "metadata": {"nbgrader": {**base, **meta}}, "source": source}
        return {**c, "outputs": [], "execution_count": None} if kind == "code" else c
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("markdown", "intro", "# PS", locked=True),
        cell("code", "q1_answer", f"# {answer_marker('q1_answer')}\nx = None", solution=True),
        cell("code", "q1_tests", "check(x)", grade=True, locked=True, points=1),
    ]}


def _colab(nb, strip=True):
    nb = json.loads(json.dumps(nb))
    nb["nbformat_minor"] = 0
    nb["metadata"]["colab"] = {"authorship_tag": "ABX9Ty", "provenance": []}
    for c in nb["cells"]:
        if strip:
            c["metadata"].pop("nbgrader")
        c["metadata"]["executionInfo"] = {"user": {"displayName": "Ada", "userId": "42"}}
        c["source"] = c["source"].replace("\n", "\r\n")
    return nb


def test_clean_drops_personal_data_and_fixes_format():
    nb = clean(_colab(_release(), strip=False))
    text = json.dumps(nb)
    assert "Ada" not in text and "ABX9Ty" not in text and "executionInfo" not in text and "\\r\\n" not in text
    assert nb["nbformat_minor"] == 5 and len({c["id"] for c in nb["cells"]}) == 3


def test_stripped_metadata_is_put_back_by_locked_source_and_answer_marker():
    sub = _colab(_release())
    sub["cells"][1]["source"] = f"# {answer_marker('q1_answer')}\r\nx = 42"
    got = normalise(json.dumps(sub), _release(), "alice.ipynb")
    assert got.reattached == ["intro", "q1_answer", "q1_tests"] and got.missing == []
    assert got.nb["cells"][1]["metadata"]["nbgrader"]["grade_id"] == "q1_answer"


def test_a_cell_that_cannot_be_matched_is_reported():
    sub = _colab(_release())
    sub["cells"][1]["source"] = "x = 42"  # the marker line was deleted
    assert normalise(json.dumps(sub), _release(), "a.ipynb").missing == ["q1_answer"]


@pytest.mark.parametrize("text, reason", [('{"cells": [', "not valid JSON"), ("[1, 2]", "not an nbformat-4")])
def test_unreadable_files_are_named_with_the_reason(text, reason):
    with pytest.raises(Unreadable, match=rf"bob\.ipynb: .*{reason}"):
        parse(text, "bob.ipynb")


def test_collect_from_a_zip_places_cleans_and_lists_what_it_could_not(tmp_path):
    zipped = tmp_path / "class.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("alice_ps2_math.ipynb", json.dumps(_colab(_release())))
        z.writestr("bob_ps2_math.ipynb", '{"cells": [')
        z.writestr("readme.txt", "hi")
        z.writestr("__MACOSX/._alice_ps2_math.ipynb", "junk")
    found = collect(zipped, tmp_path, {"ps2_math": _release()})
    assert list(found.placed) == ["alice/ps2_math"]
    assert "not valid JSON" in found.unreadable["bob/ps2_math"]
    assert found.unplaced == {"readme.txt": "not a notebook (.ipynb)"}
    stored = (tmp_path / "submitted" / "alice" / "ps2_math" / "ps2_math.ipynb").read_text()
    assert "Ada" not in stored and '"grade_id": "q1_tests"' in stored
    assert json.loads((tmp_path / "collect.json").read_text())["unreadable"]


def _spy_reads(monkeypatch) -> list[str]:
    """The names of the files read through ``Path.read_text``, ``Path.read_bytes`` or ``os.open`` from now on."""
    read, text, data, opened = [], Path.read_text, Path.read_bytes, os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: read.append(Path(path).name) or opened(path, *a, **k))
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self.name) or text(self, *a, **k))
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or data(self))
    return read


def _handed_in(root: Path, student: str, nb: dict) -> Path:
    path = root / student / "ps" / "ps.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_similar_answers_and_predictions_never_read_a_notebook_past_the_size_bound(tmp_path, monkeypatch):
    from pagedkv_lib.course.instructor.intake.submission_bounds import SubmissionLimits
    from pagedkv_lib.course.instructor.reporting import similar_answers as similar
    from pagedkv_lib.course.instructor.reporting.prediction_records import read_predictions
    small, big = _handed_in(tmp_path, "ann", _release()), _handed_in(tmp_path, "bea", _release())
    big.write_text(json.dumps(_release()) + " " * 5000, encoding="utf-8")
    limits = SubmissionLimits(file_bytes=small.stat().st_size + 100)
    monkeypatch.setattr(similar, "LIMITS", limits)
    read = _spy_reads(monkeypatch)
    assert similar.similar_answers(tmp_path, {}, {}) == []
    assert read.count("ps.ipynb") == 1, read  # ann's; bea's is over the bound, so it is not read at all
    read.clear()
    preds, bad = read_predictions(tmp_path, limits)
    assert read.count("ps.ipynb") == 1 and bad["unreadable notebook"] == 1 and preds == []


def test_each_answer_cell_is_parsed_once_while_preparing(monkeypatch):
    import ast
    from pagedkv_lib.course.instructor.intake import prepare_submission
    from pagedkv_lib.course.instructor.intake.submission_bounds import SubmissionLimits
    from pagedkv_lib.course.instructor.notebook_result import NotebookResult as Status
    nb = _release()
    nb["cells"][1]["source"] = "import sys\nframe = sys._getframe()\ncheck_value = None\n"
    nb["cells"].append(dict(nb["cells"][1], metadata={"nbgrader": {"solution": True, "grade_id": "q2_answer"}},
                            source="def f(:\n"))  # does not parse: its text is still scanned
    parsed, real = [], ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(source) or real(source, *a, **k))
    status = Status("ann", "ps")
    prepare_submission._scan_answers(nb, status, ["pagedkv_lib.blocks:f"], SubmissionLimits())
    assert sorted(parsed) == sorted(c["source"] for c in nb["cells"] if c["metadata"]["nbgrader"].get("solution"))
    assert status.problems == ["tampered", "reaches outside"], status.details


def test_collects_verdicts_are_named_once_for_collect_and_autograde():
    import dataclasses
    from pagedkv_lib.course.instructor.intake.collect_notebooks import VERDICTS, Collected
    lists = {f.name for f in dataclasses.fields(Collected)} - {"placed", "unplaced", "problems"}
    assert set(VERDICTS) == lists  # a new list of refused notebooks cannot be left out of autograde's statuses
    found = Collected(**{kind: {f"s/{kind}": "why"} for kind in VERDICTS})
    assert found.refused() == {f"s/{kind}": "why" for kind in VERDICTS} and found.taken() == set(found.refused())


def test_keys_for_a_class_read_the_secret_once_and_equal_each_key(tmp_path, monkeypatch):
    from pagedkv_lib.course.instructor.intake import variant_keys as keys
    keys.secret(tmp_path, create=True)
    one_by_one = {s: keys.key_for(tmp_path, s) for s in ("ada", "bob", "cy")}
    calls, real = [], keys.secret
    monkeypatch.setattr(keys, "secret", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert keys.keys_for(tmp_path, ["ada", "bob", "cy"]) == one_by_one and len(calls) == 1
    assert len(set(one_by_one.values())) == 3
