"""Per-learner numbers through the real sandboxed autograde: each student is judged on their own.

A ps2 class with a course secret, each notebook handed in as a Colab learner hands it in (their key
pasted into the first cell). The grader gives each kernel and the judge the key of the student the file
is filed under, whatever the notebook holds; a key that is another learner's is flagged, and so is an
answer that is right for someone else's numbers (to the instructor only: not in the feedback).
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import threading
import time

import pytest

from classroom import answered, course_copy, solutions_by_cell
from psets_kernel import load, reference_values
from pagedkv_lib import course
from pagedkv_lib.course.instructor.intake import variant_keys as keys
from pagedkv_lib.course.instructor.intake.notebook_cleaning import normalise

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.xdist_group("nbgrader-class"),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)")]

NAME = "ps2_math"
CLASS = ["ada", "bob", "cat", "dan", "eve"]


def _with_key(nb: dict, key: str) -> dict:
    for cell in nb["cells"]:
        if cell.get("id") == "variant-key":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cell["source"] = source.replace('VARIANT_KEY = ""', f'VARIANT_KEY = "{key}"')
            return nb
    raise AssertionError("the released notebook has no key cell")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = course_copy(tmp_path_factory.mktemp("variants") / "course", NAME)
    (root / keys.SECRET_FILE).write_text("7e" * 32 + "\n")  # fixed, so that no two sets of numbers coincide
    keys.write_keys(root, CLASS)
    key = {s: keys.key_for(root, s) for s in CLASS}
    release = json.loads((root / course.RELEASE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    solution = root / course.SOURCE / NAME / f"{NAME}.ipynb"
    good = solutions_by_cell(json.loads(solution.read_text(encoding="utf-8")))
    bob, practice = reference_values(load(solution), key["bob"]), reference_values(load(solution), "")
    cat, dan = reference_values(load(solution), key["cat"]), reference_values(load(solution), key["dan"])
    for name in ("gpu_blocks", "expected_slack_slots", "fp8_tokens"):  # a random secret once made two equal
        assert bob[name] != cat[name] and practice[name] != dan[name], name
    literal = lambda values, *names: {f"q{n[0]}_answer": f"{n[1]} = {values[n[1]]!r}\n" for n in names}
    q5, q6, q7 = ("5", "gpu_blocks"), ("6", "expected_slack_slots"), ("7", "fp8_tokens")
    handed_in = {
        "ada": (key["ada"], good),
        "bob": (key["bob"], good),
        # bob's key pasted, and bob's numbers typed in for Q5 and Q7; Q6 is code, so it computes cat's own
        "cat": (key["bob"], {**good, **literal(bob, q5, q7)}),
        "dan": ("", {**good, **literal(practice, q5, q6, q7)}),  # never pasted a key: the practice numbers
        "eve": (key["eve"], {**good, "q5_answer": "gpu_blocks = 1\n"}),  # plainly wrong: no flag
    }
    for student, (pasted, answers) in handed_in.items():
        folder = root / course.SUBMITTED / student / NAME
        folder.mkdir(parents=True)
        nb = normalise(json.dumps(_with_key(answered(release, answers), pasted)), release, student).nb
        (folder / f"{NAME}.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    seen, done = [], threading.Event()

    def watch():  # what any user of this machine can read while grading runs: every command line
        while not done.is_set():
            listed = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
            seen.extend(line for line in listed.splitlines() if any(k in line for k in key.values()))
            time.sleep(0.05)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        statuses = course.autograde(root, timeout_s=20, workers=2, progress=False)
    finally:
        done.set()
        watcher.join()
    course.feedback(root)
    scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader((root / "grades.csv").open())}
    return root, {s.student: s for s in statuses}, scores, seen


def test_each_student_is_judged_on_their_own_numbers(graded):
    _, statuses, scores, _ = graded
    assert scores == {"ada": 24.0, "bob": 24.0, "cat": 24.0 - 3 - 3, "dan": 24.0 - 3 - 2 - 3, "eve": 21.0}, statuses
    assert statuses["ada"].label == statuses["bob"].label == "ok"


def test_a_notebook_holding_another_learners_key_is_flagged_with_whose(graded):
    _, statuses, _, _ = graded
    assert "key mismatch" in statuses["cat"].problems
    assert "variant key mismatch: the notebook holds bob's key, not cat's" in statuses["cat"].details
    assert "key mismatch" not in statuses["dan"].problems, "no key pasted: graded on dan's own, not a mismatch"


def test_answers_right_for_someone_elses_numbers_are_flagged_for_the_instructor_only(graded):
    root, statuses, _, _ = graded
    cat = [d for d in statuses["cat"].details if "the answer matches" in d]
    assert cat == ["q5_tests: the answer matches the numbers of bob, not this student's own",
                   "q7_tests: the answer matches the numbers of bob, not this student's own"]
    dan = [d for d in statuses["dan"].details if "the answer matches" in d]
    assert dan == [f"q{q}_tests: the answer matches the practice numbers, not this student's own" for q in (5, 6, 7)]
    assert "numbers of another" not in statuses["eve"].problems and "numbers of another" not in statuses["ada"].problems
    rows = {r["student_id"]: r for r in csv.DictReader((root / "status.csv").open())}
    assert "numbers of another" in rows["cat"]["status"]
    for page in (root / "feedback").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "matches the numbers" not in text and "key mismatch" not in text, page


def test_no_key_is_on_a_command_line_another_user_could_read_while_grading(graded):
    """The sandbox hands each kernel its key in a file of its own, not as an argument of bwrap's."""
    assert graded[3] == []
