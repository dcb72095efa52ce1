"""Canvas files in and out, built exactly as Canvas writes them (no nbgrader run).

Formats, from Canvas's own code (instructure/canvas-lms): the gradebook export from
``lib/gradebook_exporter.rb`` (``GradebookExporter#csv_data``: header, optional Manual Posting row,
``"    Points Possible"`` row, students, the test student last), the import rules from
``lib/gradebook_importer.rb`` (``header?``/``update_column_count``: ``Student, ID`` first, ``Section`` last
of the student columns; ``check_for_non_student_row``; ``process_student``: by ID, SIS User ID, SIS Login ID),
and the "Download Submissions" member names from ``lib/content_zipper.rb`` (``get_filename``,
``sanitize_user_name``, ``add_upload_submission``). The Instructure Community guides "How do I export
grades in the Gradebook?" and "How do I import grades in the Gradebook?" describe the same files.
"""
import csv
import io
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from conftest import REPO
from pagedkv_lib.course import __main__ as cli
from pagedkv_lib.course.instructor.intake import lms_canvas as canvas
from pagedkv_lib.course.instructor.reporting.canvas_grades import assignment_columns, export_canvas_grades
from pagedkv_lib.course.instructor.intake.notebook_cleaning import answer_marker
from test_course_intake import _release  # the same one-question release

HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attendance",
          "ps1_intuition (2001)", "PS2 math (2002)", "Midterm (2005)",
          "Current Score", "Unposted Current Score", "Final Score", "Unposted Final Score"]
STUDENTS = [  # sortable name, Canvas user id, SIS User ID, SIS Login ID, section
    ("Doe, Jane", "12345", "S001", "jdoe", "Section A"),
    ("Roe, Smith", "12346", "S002", "rsmith", "Section A"),
    ("Lee, Kim", "12347", "S003", "klee", "Section B"),
    ("O'Neil, Pat", "12348", "S004", "poneil", "Section B"),  # in the class, never graded here
    ("Student, Test", "12399", "", "", "Section A"),           # Canvas's student view user, always last
]


def canvas_gradebook_export(delimiter=",", bom=False) -> str:
    """The CSV Canvas's GradebookExporter writes for this course (SIS ids included, one manual-posting
    assignment, totals shown)."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=delimiter)
    w.writerow(HEADER)
    w.writerow([None] * 6 + ["", "Manual Posting", ""] + [None] * 4)
    w.writerow(["    Points Possible", None, None, None, None, None, "10.00", "12.00", "50.00"] + ["(read only)"] * 4)
    for name, uid, sis, login, section in STUDENTS:
        w.writerow([name, uid, sis, login, section, "", "N/A", "", "41.00", "80.00", "80.00", "70.00", "70.00"])
    return ("\ufeff" if bom else "") + buf.getvalue()


def canvas_member(sortable_name: str, user_id: str, file_id: str, display_name: str, late=False) -> str:
    """A member name as ContentZipper writes it: get_filename (name lower-cased, ``_<digits>_`` runs
    joined, non-word characters removed; ``LATE`` when late) + ``_<attachment id>_<display name>``."""
    name = re.sub(r"^(\d+)$", r"\1", re.sub(r"_(\d+)_", r"\1", sortable_name)).lower()
    stem = re.sub(r"[^\w]", "", "_".join([name] + (["LATE"] if late else []) + [user_id]))
    return f"{stem}_{file_id}_{re.sub(r'[/:*?<>|]+', '_', display_name)}"


def _roster(tmp_path, **kw) -> Path:
    path = tmp_path / "gradebook.csv"
    path.write_text(canvas_gradebook_export(**kw), encoding="utf-8", newline="")
    return path




def _answered(x) -> str:
    nb = _release()
    nb["cells"][1]["source"] = f"# {answer_marker('q1_answer')}\nx = {x!r}"
    return json.dumps(nb)


# --- the roster -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"delimiter": ";"}, {"bom": True}])
def test_roster_reads_students_and_points_and_skips_canvas_bookkeeping_rows(tmp_path, kw):
    roster = canvas.read_roster(_roster(tmp_path, **kw))
    assert [r["ID"] for r in roster.students] == [s[1] for s in STUDENTS]  # no Manual Posting / Points row
    assert roster.points["PS2 math (2002)"] == "12.00"
    assert roster.identity == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas.student_of(roster.students[0]) == "jdoe" and canvas.student_of(roster.students[-1]) == ""


def test_a_file_that_is_not_a_canvas_export_is_refused_naming_roster(tmp_path):
    bad = tmp_path / "grades.csv"
    bad.write_text("assignment,student_id,score\nps1,alice,3\n", encoding="utf-8")
    with pytest.raises(canvas.PagedKVError, match="ROSTER .* is not a Canvas gradebook export"):
        canvas.read_roster(bad)
    with pytest.raises(canvas.PagedKVError, match="ROSTER is needed"):
        canvas.read_roster(None)


def test_assignments_map_onto_the_roster_column_that_names_them(tmp_path):
    roster = canvas.read_roster(_roster(tmp_path))
    found, missing = assignment_columns(roster, ["ps1_intuition", "ps2_math", "ps4_demo"])
    assert found == {"ps1_intuition": "ps1_intuition (2001)", "ps2_math": "PS2 math (2002)"}
    assert missing == ["ps4_demo"]
    roster.header.append("ps2_math retake (2010)")
    with pytest.raises(canvas.PagedKVError, match="matches 2 columns"):
        assignment_columns(roster, ["ps2_math"])


# --- grades out -----------------------------------------------------------------------------------

NBGRADER_EXPORT = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                   "raw_score", "late_submission_penalty", "score", "max_score", "status"]


def _grades(tmp_path, rows) -> None:
    with (tmp_path / "grades.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(NBGRADER_EXPORT)
        for assignment, student, score, max_score, status in rows:
            w.writerow([assignment, "", "2026-11-30 10:00:00", student, "", "", "", score, 0.0, score, max_score,
                        status])


def test_canvas_import_keeps_identity_columns_matches_by_login_or_sis_id_and_lists_the_unmatched(tmp_path):
    _grades(tmp_path, [("ps1_intuition", "jdoe", 9.5, 10.0, "ok"), ("ps2_math", "jdoe", 12.0, 12.0, "ok"),
                       ("ps1_intuition", "s002", 7.0, 10.0, "timed out"),   # an id made from the SIS User ID
                       ("ps2_math", "klee", 0.0, 12.0, "not submitted"),
                       ("ps2_math", "zed", 11.0, 12.0, "ok")])               # graded, not in Canvas
    result = export_canvas_grades(tmp_path, canvas.read_roster(_roster(tmp_path)))
    rows = list(csv.reader((tmp_path / "grades-canvas.csv").open(encoding="utf-8")))
    # what GradebookImporter#header? requires: Student, ID first; Section ends the student columns
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                       "ps1_intuition (2001)", "PS2 math (2002)"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "10.00", "12.00"]  # the roster's own points
    by_id = {r[1]: r for r in rows[2:]}
    assert len(rows) - 2 == len(STUDENTS)  # every roster student keeps a row
    assert by_id["12345"] == ["Doe, Jane", "12345", "S001", "jdoe", "Section A", "9.50", "12.00"]
    assert by_id["12346"][5:] == ["7.00", ""] and by_id["12347"][5:] == ["", ""]  # not submitted: blank
    assert result.not_in_roster == ["zed"] and result.not_submitted == 1
    assert any("Lee, Kim" in s for s in result.no_grades) and any("O'Neil, Pat" in s for s in result.no_grades)
    text = "\n".join(result.warnings())
    assert "'zed' is not in the roster" in text and "NOT in the Canvas file" in text
    assert "zed" not in (tmp_path / "grades-canvas.csv").read_text(encoding="utf-8")


def test_a_maximum_that_differs_from_canvas_points_is_reported_and_scores_stay_points(tmp_path):
    _grades(tmp_path, [("ps2_math", "jdoe", 10.0, 20.0, "ok")])
    result = export_canvas_grades(tmp_path, canvas.read_roster(_roster(tmp_path)))
    assert result.points_differ and "20" in result.points_differ[0] and "12.00" in result.points_differ[0]
    assert list(csv.reader((tmp_path / "grades-canvas.csv").open(encoding="utf-8")))[2][-1] == "10.00"


def test_cli_export_defaults_to_csv_and_canvas_without_roster_fails_before_writing(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "export_grades", lambda course_dir: calls.append(course_dir) or Path(course_dir) / "grades.csv")
    assert cli._parser().parse_args(["export"]).format == "csv"
    assert cli.main(["export", "--course-dir", str(tmp_path)]) == 0
    assert calls == [str(tmp_path)] and not (tmp_path / "grades-canvas.csv").exists()
    assert cli.main(["export", "--format=canvas", "--course-dir", str(tmp_path)]) == 1
    assert "ROSTER is needed" in capsys.readouterr().err and calls == [str(tmp_path)]  # nbgrader not run again
    _grades(tmp_path, [("ps1_intuition", "jdoe", 9.0, 10.0, "ok")])
    roster = str(_roster(tmp_path))
    assert cli.main(["export", "--format=canvas", "--roster", roster, "--course-dir", str(tmp_path)]) == 0
    assert (tmp_path / "grades-canvas.csv").exists() and "WARNING" in capsys.readouterr().err


def test_make_passes_format_and_roster_and_keeps_csv_the_default():
    def dry(*args):
        return subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True).stdout
    assert 'export --format="csv"' in dry("export") and "--roster" not in dry("export")
    assert 'export --format="canvas" --roster="g.csv"' in dry("export", "FORMAT=canvas", "ROSTER=g.csv")
    assert 'collect "s.zip" --roster="g.csv"' in dry("collect", "FROM=s.zip", "ROSTER=g.csv")


# --- submissions in -------------------------------------------------------------------------------

@given(st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")) | st.sampled_from("_0123456789"),
               min_size=1, max_size=30),
       st.integers(1, 10**9), st.integers(1, 10**9), st.booleans(),
       st.sampled_from(["ps2_math.ipynb", "ps2_math-1.ipynb", "Copy of ps2_math (2).ipynb", "my_ps2_math_12_3.ipynb"]))
@example("Smith, J_2", 12345, 678, False, "my_ps2_math_12_3.ipynb")  # a name ending "_<digits>"
def test_every_name_canvas_can_write_parses_back_to_its_user_and_file(name, user, file, late, display):
    member = canvas_member(name, str(user), str(file), display, late)
    got = canvas.parse_download_name(member, {str(user)})
    left = re.sub(r"\W", "", re.sub(r"_(\d+)_", r"\1", name).lower())
    if not left or left.endswith("_late"):  # "_<user id>_..." or "x_late_<user id>": ambiguous in Canvas too
        return
    assert got and (got["user"], got["file"], got["original"]) == (str(user), str(file), display)
    assert bool(got["late"]) == late


def _canvas_zip(tmp_path) -> Path:
    members = {
        canvas_member("Doe, Jane", "12345", "67999", "ps2_math-1.ipynb"): _answered(2),    # resubmitted
        canvas_member("Roe, Smith", "12346", "67891", "ps2_math.ipynb", late=True): _answered(3),
        "lee_late_12347_67892_ps2_math.ipynb": _answered(4),                             # lower-case, as observed
        "lee_late_12347_67950_ps2_math-1.ipynb": _answered(5),                           # same submission, newer
        canvas_member("Gone, Al", "55555", "67893", "ps2_math.ipynb"): _answered(6),       # dropped the course
        "anon_k3x9q_67894_ps2_math.ipynb": _answered(7),                                 # anonymous grading
        canvas_member("Doe, Jane", "12345", "67998", "notes.pdf"): "%PDF-1.4",
    }
    path = tmp_path / "submissions.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return path


def test_canvas_zip_is_placed_by_roster_login_keeping_each_students_newest_file(tmp_path):
    root = tmp_path / "course"
    found = canvas.collect_canvas_zip(_canvas_zip(tmp_path), root, {"ps2_math": _release()}, None, _roster(tmp_path))
    assert sorted(found.placed) == ["jdoe/ps2_math", "klee/ps2_math", "rsmith/ps2_math"]

    def answer(student):
        nb = json.loads((root / "submitted" / student / "ps2_math" / "ps2_math.ipynb").read_text(encoding="utf-8"))
        return nb["cells"][1]["source"].splitlines()[-1]
    assert (answer("jdoe"), answer("rsmith"), answer("klee")) == ("x = 2", "x = 3", "x = 5")
    why = found.unplaced
    assert "kept lee_late_12347_67950_ps2_math-1.ipynb" in why["lee_late_12347_67892_ps2_math.ipynb"]
    assert "Canvas user 55555 (goneal) is not in ROSTER" in why["goneal_55555_67893_ps2_math.ipynb"]
    assert "anonymous grading" in why["anon_k3x9q_67894_ps2_math.ipynb"]
    assert why["doejane_12345_67998_notes.pdf"] == "not a notebook (.ipynb)"
    assert len(found.placed) + len(why) == 7  # nothing dropped silently
    late = json.loads((root / "collect.json").read_text(encoding="utf-8"))["problems"]
    flagged = sorted(k for k, notes in late.items() if any("late" in n for n in notes))
    assert flagged == ["klee/ps2_math", "rsmith/ps2_math"]


def test_canvas_zip_without_roster_is_refused_naming_roster(tmp_path):
    with pytest.raises(canvas.PagedKVError, match="ROSTER=<Canvas gradebook export>.csv"):
        canvas.collect_canvas_zip(_canvas_zip(tmp_path), tmp_path / "course", {"ps2_math": _release()})
    assert not (tmp_path / "course" / "submitted").exists()


def test_ordinary_downloads_are_not_taken_for_canvas_ones():
    assert not canvas.is_download(["alice_ps2_math.ipynb", "bob/ps2_math (1).ipynb", "ps2_math_carol.ipynb"])
    assert canvas.is_download(["doejane_12345_67890_ps2_math.ipynb", "readme.txt"])


# --- the whole round trip, with the real nbgrader ---------------------------------------------------

@pytest.mark.slow
@pytest.mark.xdist_group("nbgrader-class")
def test_canvas_zip_to_canvas_import_through_real_autograding(tmp_path):
    """Canvas's zip in, nbgrader's autograde, grades-canvas.csv out: the solution's points land under
    the roster's column for the right Canvas user, the empty notebook's 0 under the other."""
    from classroom import answered, course_copy, solutions_by_cell
    from pagedkv_lib import course
    from pagedkv_lib.course.instructor.intake.collect_notebooks import release_notebooks
    root = course_copy(tmp_path / "course", "ps2_math")
    release = json.loads((REPO / course.RELEASE / "ps2_math" / "ps2_math.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / course.SOURCE / "ps2_math" / "ps2_math.ipynb").read_text(encoding="utf-8"))
    downloads = tmp_path / "submissions.zip"
    with zipfile.ZipFile(downloads, "w") as z:
        z.writestr(canvas_member("Doe, Jane", "12345", "67890", "ps2_math.ipynb"),
                   json.dumps(answered(release, solutions_by_cell(solution))))
        z.writestr(canvas_member("Roe, Smith", "12346", "67891", "ps2_math-1.ipynb", late=True), json.dumps(release))
    roster = _roster(tmp_path)
    found = canvas.collect_canvas_zip(downloads, root, release_notebooks(root / course.RELEASE), None, roster)
    assert sorted(found.placed) == ["jdoe/ps2_math", "rsmith/ps2_math"]
    statuses = {s.student: s for s in course.autograde(root, workers=1, progress=False)}
    assert any("late" in d for d in statuses["rsmith"].details)
    grades = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}
    result = export_canvas_grades(root, canvas.read_roster(roster))
    rows = {r[1]: r for r in csv.reader((root / "grades-canvas.csv").open(encoding="utf-8"))}
    assert rows["12345"][-1] == f"{float(grades['jdoe']['score']):.2f}" and float(grades["jdoe"]["score"]) > 0
    assert rows["12346"][-1] == "0.00" and rows["12347"][-1] == ""
    assert result.points_differ  # ps2_math's nbgrader maximum is not this roster's 12 points
