"""collect reads only regular files, and a hand-in holding the instructor's solution is flagged, not zeroed.

Real links and FIFOs on disk; the course's own ps2_math solution and release notebooks.
"""
import json
import os
import shutil
from pathlib import Path

from pagedkv_lib.course.instructor.intake.collect_notebooks import collect_notebooks, release_notebooks
from pagedkv_lib.course.instructor.intake.prepare_submission import prepare
from pagedkv_lib.course.instructor.intake.solution_leak import hidden_lines
from pagedkv_lib.course.instructor.notebook_result import NotebookResult

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "solutions" / "ps2_math" / "ps2_math.ipynb"
RELEASE = REPO / "exercises" / "ps2_math" / "ps2_math.ipynb"


def test_collect_never_follows_a_link_nor_opens_a_fifo(tmp_path):
    secret = tmp_path / "instructor" / "ps2_math.ipynb"
    secret.parent.mkdir()
    shutil.copy(SOLUTION, secret)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    shutil.copy(RELEASE, downloads / "alice_ps2_math.ipynb")
    (downloads / "mallory_ps2_math.ipynb").symlink_to(secret)      # a link named as a hand-in
    (downloads / "trudy").symlink_to(secret.parent, target_is_directory=True)   # a folder link
    os.mkfifo(downloads / "oscar_ps2_math.ipynb")                    # would block a reader forever
    course = tmp_path / "course"
    course.mkdir()
    found = collect_notebooks(downloads, course, release_notebooks(REPO / "exercises"), default="ps2_math")
    assert set(found.placed) == {"alice/ps2_math"}
    assert "symbolic link" in found.unreadable["mallory/ps2_math"]
    assert "not a regular file" in found.unreadable["oscar/ps2_math"]
    assert found.unplaced["trudy"] == "a symbolic link: never followed"
    placed = [p.read_text() for p in (course / "submitted").rglob("*.ipynb")]
    assert len(placed) == 1 and "### BEGIN SOLUTION" not in placed[0]


def _prepared(tmp_path, nb: dict) -> NotebookResult:
    shutil.copytree(REPO / "solutions" / "ps2_math", tmp_path / "solutions" / "ps2_math")
    folder = tmp_path / "submitted" / "alice" / "ps2_math"
    folder.mkdir(parents=True)
    (folder / "ps2_math.ipynb").write_text(json.dumps(nb))
    status = NotebookResult("alice", "ps2_math")
    prepare(folder, "ps2_math", json.loads(RELEASE.read_text()), status)
    return status


def test_the_solution_handed_in_is_flagged_leaked_and_still_graded(tmp_path):
    status = _prepared(tmp_path, json.loads(SOLUTION.read_text()))
    assert "leaked solution" in status.problems, status.details
    assert any("### BEGIN SOLUTION" in d and "graded as it is" in d for d in status.details)
    assert (tmp_path / "submitted" / "alice" / "ps2_math" / "ps2_math.ipynb").exists()   # not set aside


def test_hidden_test_lines_pasted_without_markers_are_flagged(tmp_path):
    release, solution = json.loads(RELEASE.read_text()), json.loads(SOLUTION.read_text())
    lines = sorted(hidden_lines(solution, release))
    assert lines, "ps2_math's hidden tests have lines the release does not show"
    answer = next(c for c in release["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
                  and c["cell_type"] == "code")
    answer["source"] = "".join(answer["source"]) + "\n" + lines[0] + "\n"
    status = _prepared(tmp_path, release)
    assert "leaked solution" in status.problems and "line(s) of the hidden tests" in " ".join(status.details)


def test_the_release_itself_is_not_flagged(tmp_path):
    assert "leaked solution" not in _prepared(tmp_path, json.loads(RELEASE.read_text())).problems
