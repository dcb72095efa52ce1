"""Patching the grading code in the kernel at run time, through names no reading of the notebook sees.

Every attacker's answer cells are the released stubs (fair score 0), except where said; the right code
sits elsewhere in the notebook (a string the attack runs), and the attack makes the real test cells record
it: by rebinding the recorder (``testcell.Recorder.__init__``), by replacing the kernel's display
publisher's ``publish`` (it runs each test cell again on the other code and sends that record instead), or,
in ps3, by replacing ``checks.isolated`` so that the bonus hands in the learner's Q5 output (torch) as their
Triton kernel's. Each is found by ``learner/run_time_patches.py``: the test scores 0 and the student is
flagged ``forged record``, naming what was patched.

The control attacker (``*_disarmed``) also rebinds the check itself. In ps2 it gets the points: the attacks
are real, and this is the limit the README states (it records only code the learner wrote, in the notebook).
In ps3 its record passes the bonus too, but the grader also runs the kernel alone (``kernel_alone.py``),
which does not pass: no bonus, and ``forged record``.
"""
from __future__ import annotations

import ast
import csv
import json
import shutil

import pytest

from classroom import course_copy, solutions_by_cell
from pagedkv_lib import course
from pagedkv_lib.course.instructor.intake.notebook_cleaning import normalise

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.xdist_group("nbgrader-class"),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)")]

# The right code, run from a string into a namespace of its own; its answers stand in for the notebook's.
GOOD = """import importlib, sys
_good = dict(globals())
exec(GOOD_SOURCE, _good)
_mine = {k: _good[k] for k in ANSWER_NAMES if k in _good}
"""
RECORDER = GOOD + """_tc = importlib.import_module("pagedkv_lib.course.learner." + "test" + "cell")
_cls = getattr(_tc, "Rec" + "order")
_init = getattr(_cls, "__" + "init__")
setattr(_cls, "__" + "init__", lambda self, gid, space: _init(self, gid, {**space, **_mine}))
"""
PUBLISHER = GOOD + """_ip = get_ipython()
_pub = getattr(_ip, "display" + "_pub")
_orig = getattr(_pub, "pub" + "lish")
_mime = "application/vnd.pagedkv." + "result+json"
_busy = []
def _publish(data, metadata=None, **kw):
    if _mime in data and not _busy:  # run the cell again on the right code, keep that record
        _busy.append(1)
        caught = []
        setattr(_pub, "pub" + "lish", lambda data, metadata=None, **k: caught.append(data))
        try:
            exec(_ip.user_ns["_ih"][-1], {**_ip.user_ns, **_mine})
        except BaseException:
            pass
        finally:
            setattr(_pub, "pub" + "lish", _publish)
            _busy.clear()
        data = next((d for d in caught if _mime in d), data)
    return _orig(data, metadata, **kw)
setattr(_pub, "pub" + "lish", _publish)
"""
DISARM = """import importlib
_rp = importlib.import_module("pagedkv_lib.course.learner." + "run_time" + "_patches")
setattr(_rp, "fo" + "und", lambda: [])
setattr(_rp, "unchanged" + "_since", lambda: True)
"""
# ps3's bonus: a Triton kernel that does nothing, and the learner's own Q5 (torch) handed in as its output.
EMPTY_KERNEL = """import triton
import triton.language as tl

@triton.jit
def paged_decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, lens_ptr, scale, max_blocks,
                        H_KV: tl.constexpr, GROUP: tl.constexpr, S: tl.constexpr, D: tl.constexpr):
    pass
"""
ISOLATED = """import importlib
_ck = importlib.import_module("pagedkv_lib.course.learner." + "che" + "cks")
setattr(_ck, "iso" + "lated", lambda label, fn, batch, **kw: paged_decode(
    batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens).float())
"""


def _defined(source: str) -> list[str]:
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:  # a written answer (markdown)
        return False
    return True


def _attack(template: str, good: dict) -> str:
    source = "\n".join(src for gid, src in good.items() if gid != "bonus_answer" and _parses(src))
    names = [n for n in _defined(source) if not n.startswith("_")]
    return template.replace("GOOD_SOURCE", repr(source)).replace("ANSWER_NAMES", repr(names))


def _grade(tmp_path_factory, name: str, students: dict) -> tuple[dict, dict, dict]:
    """Grade ``{student: {answer grade_id: source}}`` (the rest the released stubs); (scores, statuses, points)."""
    root = course_copy(tmp_path_factory.mktemp(f"patching-{name}") / "course", name)
    release = json.loads((root / course.RELEASE / name / f"{name}.ipynb").read_text(encoding="utf-8"))
    for student, answers in students.items():
        folder = root / course.SUBMITTED / student / name
        folder.mkdir(parents=True)
        nb = json.loads(json.dumps(release))
        for cell in nb["cells"]:
            gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if gid in answers:
                cell["source"] = answers[gid]
        clean = normalise(json.dumps(nb), release, student).nb
        (folder / f"{name}.ipynb").write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    course.generate(root, [name], release_dir=str((root / "grading-cache" / "releases").resolve()))
    statuses = course.autograde(root, timeout_s=120, workers=2, progress=False)
    scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}
    points = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"] for c in release["cells"]
              if c["metadata"].get("nbgrader", {}).get("grade") and not c["metadata"]["nbgrader"].get("solution")}
    return scores, {s.student: s for s in statuses}, points


def _solutions_and_stubs(tmp_path_factory, name: str) -> tuple[dict, dict]:
    """The set's reference answers by cell, and its released answer cells (the stubs) by grade id."""
    good = solutions_by_cell(json.loads((course_copy(tmp_path_factory.mktemp("src") / "c", name) / course.SOURCE / name
                                         / f"{name}.ipynb").read_text(encoding="utf-8")))
    release = json.loads((course_copy(tmp_path_factory.mktemp("rel") / "c", name) / course.RELEASE / name
                          / f"{name}.ipynb").read_text(encoding="utf-8"))
    stub = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in release["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")}
    return good, stub


@pytest.fixture(scope="module")
def ps2(tmp_path_factory):
    name = "ps2_math"
    good, stub = _solutions_and_stubs(tmp_path_factory, name)
    students = {"p_recorder": {"q1_answer": _attack(RECORDER, good) + stub["q1_answer"]},
                "p_publisher": {"q1_answer": _attack(PUBLISHER, good) + stub["q1_answer"]},
                "p_disarmed": {"q1_answer": _attack(RECORDER, good) + DISARM + stub["q1_answer"]},
                "p_publisher_disarmed": {"q1_answer": _attack(PUBLISHER, good) + DISARM + stub["q1_answer"]},
                "honest": good}
    return _grade(tmp_path_factory, name, students)


@pytest.fixture(scope="module")
def ps3(tmp_path_factory):
    name = "ps3_code"
    good, stub = _solutions_and_stubs(tmp_path_factory, name)
    students = {"p3_recorder": {"q1_answer": _attack(RECORDER, good) + stub["q1_answer"]},
                "p3_isolated": {"q5_answer": good["q5_answer"], "bonus_answer": EMPTY_KERNEL + ISOLATED},
                "p3_disarmed": {"q5_answer": good["q5_answer"],
                                "bonus_answer": EMPTY_KERNEL + ISOLATED + DISARM},
                "p3_empty_kernel": {"q5_answer": good["q5_answer"], "bonus_answer": EMPTY_KERNEL}}
    return _grade(tmp_path_factory, name, students)


def _flagged(status) -> str:
    return f"{status.label} {' '.join(status.details)}"


@pytest.mark.parametrize("attacker, patched", [("p_recorder", "testcell.Recorder.__init__"),
                                               ("p_publisher", "display publisher's own publish")])
def test_ps2_an_attack_through_the_recorder_or_the_publisher_scores_0_and_is_flagged(ps2, attacker, patched):
    scores, statuses, _ = ps2
    assert scores[attacker] == 0.0, scores
    text = _flagged(statuses[attacker])
    assert "forged record" in statuses[attacker].problems and "patched at run time" in text and patched in text, text


def test_ps2_the_honest_student_keeps_full_marks_unflagged_and_the_disarmed_attack_is_real(ps2):
    scores, statuses, points = ps2
    full = float(sum(points.values()))
    assert scores["honest"] == full and statuses["honest"].label == "ok", statuses["honest"]
    # the same patches, with the check rebound too: every test records the other code (the limit)
    assert scores["p_disarmed"] == full and scores["p_publisher_disarmed"] == full, scores


def test_ps3_an_attack_through_the_recorder_scores_0_and_is_flagged(ps3):
    scores, statuses, _ = ps3
    assert scores["p3_recorder"] == 0.0, scores
    text = _flagged(statuses["p3_recorder"])
    assert "forged record" in statuses["p3_recorder"].problems and "testcell.Recorder.__init__" in text, text


def test_ps3_the_bonus_through_a_patched_isolated_scores_0_and_is_flagged_even_with_the_check_disarmed(ps3):
    scores, statuses, points = ps3
    assert scores["p3_empty_kernel"] == points["q5_tests"], scores  # fair: Q5 right, the kernel does nothing
    assert statuses["p3_empty_kernel"].label == "ok", statuses["p3_empty_kernel"]
    assert scores["p3_isolated"] == points["q5_tests"], scores  # Q5 is theirs; the bonus is not
    text = _flagged(statuses["p3_isolated"])
    assert "forged record" in statuses["p3_isolated"].problems and "checks.isolated" in text and "bonus_tests" in text, text
    # with the check rebound too, the notebook's record passes the Q5 output as the kernel's (the attack is
    # real: the flag says the record passed), but the kernel run alone (kernel_alone.py) gives NaN: no bonus
    assert scores["p3_disarmed"] == points["q5_tests"], scores
    text = _flagged(statuses["p3_disarmed"])
    assert "forged record" in statuses["p3_disarmed"].problems, text
    assert "bonus_tests: passed on the notebook's record, but not with its kernel run alone" in text, text
