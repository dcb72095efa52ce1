"""The run-time patch check (``learner/run_time_patches.py``) and the judge's reading of what it found.

Each case runs in a fresh interpreter with an IPython shell (the check remembers what it found for the
process's life): the grading modules imported as a test cell imports them, then one patch made through
a computed name, as a notebook could make it. The honest case finds nothing; each patch is named. The
sandboxed end-to-end attacks are in test_grading_patching.py.
"""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import REPO
from pagedkv_lib.course.instructor.grading.judge import judge_notebook, trusted_cells
from pagedkv_lib.course.protocol import PATCHED_KEY, RECORD_MIME

SETUP = """import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
from pagedkv_lib.course.learner import testcell, run_time_patches
from pagedkv_lib.course.learner.pset_checks import ps2_math
L = "pagedkv_lib.course.learner."
"""

PATCHES = {  # what the patch does: (code, a name the check must report)
    "nothing": ("", None),
    "a module's function": ("setattr(sys.modules[L + 'che' + 'cks'], 'yours' + '_in', lambda ns, n: None)",
                            "pagedkv_lib.course.learner.checks.yours_in"),
    "a class's method": ("setattr(getattr(sys.modules[L + 'testcell'], 'Rec' + 'order'), 'val' + 'ue', lambda s, n: 1)",
                         "pagedkv_lib.course.learner.testcell.Recorder.value"),
    "a set's check": ("setattr(sys.modules[L + 'pset_checks.ps2_math'], 'q2' + '_tests', lambda t, V: None)",
                      "pset_checks.ps2_math.q2_tests"),
    "a function's code": ("f = getattr(sys.modules[L + 'checks'], 'check' + '_value'); f.__code__ = (lambda *a, **k: None).__code__",
                          "pagedkv_lib.course.learner.checks.check_value"),
    "an imported name": ("setattr(sys.modules[L + 'testcell'], '_checks' + '_module', type(sys)('fake'))",
                         "testcell._checks_module"),
    "the module itself": ("import types\nclass M(types.ModuleType):\n    pass\nsys.modules[L + 'checks'].__class__ = M",
                          "checks (not a plain module)"),
    "a wrapper that claims the original": (
        "import functools\nck = sys.modules[L + 'checks']\nsetattr(ck, 'isolated', functools.wraps(ck.isolated)(lambda *a, **k: 1))",
        "pagedkv_lib.course.learner.checks.isolated"),
    "a builtin": ("import builtins\nsetattr(builtins, 'call' + 'able', lambda x: True)", "builtins.callable"),
    "the publisher's publish": ("setattr(shell.display_pub, 'pub' + 'lish', lambda *a, **k: None)",
                                "the display publisher's own publish"),
    "the publisher's class": ("setattr(type(shell.display_pub), 'pub' + 'lish', lambda *a, **k: None)",
                              "display publisher's class publish"),
    "display": ("import IPython.display as d\nsetattr(d, 'dis' + 'play', lambda *a, **k: None)", "IPython.display.display"),
}


def _found(patch: str, after: str = "") -> list[str]:
    code = SETUP + "run_time_patches.found()\n" + patch + "\n" + after + "\nprint(json.dumps(run_time_patches.found()))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(PATCHES))
def test_each_patch_through_a_computed_name_is_named_and_nothing_else_is(case):
    patch, name = PATCHES[case]
    found = _found(patch)
    if name is None:
        assert found == []
    else:
        assert any(name in f for f in found), found


def test_a_patch_put_back_before_the_next_check_is_still_reported():
    patch = ("ck = sys.modules[L + 'checks']\nkept = ck.yours_in\nsetattr(ck, 'yours_in', lambda ns, n: None)\n"
             "run_time_patches.found()\nsetattr(ck, 'yours_in', kept)")
    assert _found(patch) == ["pagedkv_lib.course.learner.checks.yours_in"]


def test_the_cheap_identity_check_sees_a_rebinding_the_whole_check_saw_clean():
    code = (SETUP + "run_time_patches.found()\nprint(run_time_patches.unchanged_since())\n"
            "setattr(sys.modules[L + 'checks'], 'describe', len)\nprint(run_time_patches.unchanged_since())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]


def test_a_recorder_in_a_patched_kernel_shows_no_results_and_names_the_patch():
    code = SETUP + """shown = []
setattr(shell.display_pub, "publish", lambda data, metadata=None, **k: shown.append(data))
V = None
def kv_bytes_per_token(a, b, c, d):
    return 2 * a * b * c * d
with testcell.begin("q1_tests") as t:
    ps2_math.q1_tests(t, V)
print(json.dumps([d for d in shown if "application/vnd.pagedkv.result+json" in d][0]["application/vnd.pagedkv.result+json"]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["entries"] == [] and record[PATCHED_KEY] == ["the display publisher's own publish"], record


def _judged(record: dict):
    answer = nbformat.v4.new_code_cell("def f(n):\n    return 2 * n")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "q1_answer"}
    test = nbformat.v4.new_code_cell(
        "from pagedkv_lib.course.learner import testcell as _testcell\nwith _testcell.begin('q1_tests') as _t:\n"
        "    _f = _t.yours('f')\n    _t.checks.check_value('f(1)', _f(1), 2)\n")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": "q1_tests", "points": 1}
    test.outputs = [nbformat.from_dict({"output_type": "display_data", "metadata": {}, "data": {RECORD_MIME: record}})]
    return judge_notebook([answer, test], trusted_cells([answer, test]))[0]["q1_tests"]


def test_the_judge_scores_a_patched_record_0_and_flags_it_forged():
    from pagedkv_lib.course.plain_values import digest, encode
    entries = [["yours", "f", digest(None), {"ok": None}], ["call", "f", digest([(1,), {}]), {"ok": encode(2)}]]
    assert _judged({"grade_id": "q1_tests", "entries": entries, PATCHED_KEY: []}).passed
    verdict = _judged({"grade_id": "q1_tests", "entries": entries, PATCHED_KEY: ["pagedkv_lib.course.learner.checks.isolated"]})
    assert not verdict.passed and "changed while it ran" in verdict.message
    assert verdict.forged == ["q1_tests: grading code patched at run time (pagedkv_lib.course.learner.checks.isolated)"]
    verdict = _judged({"grade_id": "q1_tests", "entries": entries, PATCHED_KEY: "yes"})
    assert not verdict.passed and verdict.forged == ["q1_tests: malformed record"]
