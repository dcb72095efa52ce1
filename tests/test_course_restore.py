"""A deleted test cell is put back and graded even where nbgrader's own restore would crash.

nbgrader 0.9.6 puts a missing grade cell back after the cell just before it in the source notebook,
looked up among the submission's answer and grade cells only. When that cell is a locked markdown
cell (or an answer cell the learner deleted too) the look-up raises KeyError, and the whole notebook
scored 0 as a "grader error". ps2_math here gets a locked note between Q2's answer and its tests.
"""
import copy
import csv
import json
import shutil

import pytest

from classroom import answered, solutions_by_cell
from conftest import REPO
from pagedkv_lib import course

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nbgrader-restore")]

NAME = "ps2_math"
NOTE = {"cell_type": "markdown", "id": "q2-note", "source": "Run the checks below once your answer is in.",
        "metadata": {"nbgrader": {"grade": False, "grade_id": "q2_note", "locked": True, "schema_version": 3,
                                  "solution": False, "task": False}}}


def _gid(cell):
    return cell["metadata"].get("nbgrader", {}).get("grade_id")


def _points(nb, gid):
    return float(next(c for c in nb["cells"] if _gid(c) == gid)["metadata"]["nbgrader"]["points"])


def _without(nb, *gids):
    return dict(copy.deepcopy(nb), cells=[c for c in nb["cells"] if _gid(c) not in gids])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("restore") / "course"
    (root / course.SOURCE / NAME).mkdir(parents=True)
    shutil.copy(REPO / "nbgrader_config.py", root)
    solution = json.loads((REPO / course.SOURCE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    at = next(i for i, c in enumerate(solution["cells"]) if _gid(c) == "q2_tests")
    solution["cells"].insert(at, NOTE)
    (root / course.SOURCE / NAME / f"{NAME}.ipynb").write_text(json.dumps(solution, indent=1), encoding="utf-8")
    course.generate(root, [NAME])
    release = json.loads((root / course.RELEASE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    perfect = answered(release, solutions_by_cell(solution))
    subs = {"dora": _without(perfect, "q2_tests"),  # the cell before it is the locked note
            "eli": _without(perfect, "q6_answer", "q6_tests"),  # the cell before it was deleted too
            "fay": perfect}
    for student, nb in subs.items():
        dst = root / "submitted" / student / NAME / f"{NAME}.ipynb"
        dst.parent.mkdir(parents=True)
        dst.write_text(json.dumps(nb), encoding="utf-8")
    statuses = {s.student: s for s in course.autograde(root, workers=2, progress=False)}
    with (root / "grades.csv").open(encoding="utf-8") as f:
        scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f)}
    return root, release, statuses, scores


def test_the_restored_test_cell_runs_and_every_question_keeps_its_points(graded):
    root, release, statuses, scores = graded
    full = scores["fay"]
    assert full > 0 and statuses["fay"].label == "ok"
    assert scores["dora"] == full, statuses["dora"]
    assert scores["eli"] == full - _points(release, "q6_tests"), statuses["eli"]  # no answer: only Q6 scores 0
    autograded = json.loads((root / "autograded" / "dora" / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    gids = [_gid(c) for c in autograded["cells"]]
    assert gids.index("q2_tests") == gids.index("q2_note") + 1  # back where it was, after the note
    outputs = autograded["cells"][gids.index("q2_tests")]["outputs"]
    assert outputs and not [o for o in outputs if o["output_type"] == "error"]


def test_the_status_says_cells_missing_not_grader_error(graded):
    _, _, statuses, _ = graded
    for student, cell in (("dora", "q2_tests"), ("eli", "q6_tests")):
        st = statuses[student]
        assert set(st.problems) == {"cells missing"} and not st.failed, st
        assert cell in " ".join(st.details)
