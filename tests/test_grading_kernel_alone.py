"""ps3's bonus kernel is also run alone: only its @triton.jit functions, in a fresh sandbox, on new batches.

The attack this stops (tests/test_grading_patching.py, ``p3_disarmed``): a notebook that rebinds the checks'
launcher and the run-time patch check hands in its Q5 torch output as the kernel's. Here: what is kept of
an answer cell, what a kernel body may not hold, and the run itself, as the grader runs it."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pagedkv_lib.course.instructor.grading import kernel_alone as ka
from pagedkv_lib.course.instructor.grading.grading_limits import KernelLimits
from pagedkv_lib.course.instructor.grading.judge import Verdict

ROOT = Path(__file__).resolve().parents[1]
CELLS = json.loads((ROOT / "solutions" / "ps3_code" / "ps3_code.ipynb").read_text(encoding="utf-8"))["cells"]
ANSWER = next("".join(c["source"]) for c in CELLS if c["metadata"].get("nbgrader", {}).get("grade_id") == "bonus_answer")
KERNEL = "paged_decode_kernel"
#: The patch of tests/test_grading_patching.py, in front of a real kernel: none of it may run alone.
PATCH = ('import importlib\n_ck = importlib.import_module("pagedkv_lib.course.learner." + "che" + "cks")\n'
         'setattr(_ck, "iso" + "lated", lambda label, fn, batch, **kw: None)\nBLOCK = 16\n')


def _with(line: str) -> str:
    """The solution's answer cell with ``line`` added to its kernel's body."""
    anchor = "T = tl.load(lens_ptr + b)"
    assert anchor in ANSWER
    return ANSWER.replace(anchor, f"{anchor}\n        {line}")


def test_only_the_imports_the_constants_and_the_kernels_are_kept():
    kept = ka.kernel_source(PATCH + ANSWER, KERNEL)
    assert "import triton.language as tl" in kept and f"def {KERNEL}(" in kept and "BLOCK = 16" in kept
    assert "importlib" not in kept and "setattr" not in kept and "find_spec" not in kept and "print" not in kept
    # a name assigned in the kernel's body stays in the body
    assert kept.count("T = tl.load(lens_ptr + b)") == 1 and "\nT = " not in kept


@pytest.mark.parametrize("line, said", [
    ("z = q_ptr.handle", ".handle"), ("z = q_ptr.data", ".data"), ("z = q_ptr.__class__", ".__class__"),
    ("z = __import__('os')", "'__import__'"), ("z = open('/etc/hostname')", "'open'"),
    ("z = torch.zeros(1)", ".zeros"), ("z = torch", "'torch'"), ("import os", "Import"), ("global q", "Global"),
    ("z = [i for i in range(3)]", "ListComp"), ("z = (lambda: 0)()", "Lambda"),
])
def test_a_kernel_body_holds_only_tritons_language(line, said):
    with pytest.raises(ka.NotAlone, match=f"@triton.jit {KERNEL}.*{said}"):
        ka.kernel_source(_with(line), KERNEL)


def test_a_cell_without_the_kernel_or_with_a_computed_annotation_is_refused():
    with pytest.raises(ka.NotAlone, match=f"no @triton.jit function {KERNEL}"):
        ka.kernel_source("def paged_decode_kernel(q_ptr):\n    pass\n", KERNEL)
    with pytest.raises(ka.NotAlone, match="annotation"):
        ka.kernel_source(ANSWER.replace("H_KV: tl.constexpr", "H_KV: print('hi')"), KERNEL)
    with pytest.raises(ka.NotAlone, match="cannot be read"):
        ka.kernel_source("def (:", KERNEL)


needs_tools = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs bubblewrap and root (the grader's setting)")


@needs_tools
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or shutil.which("python3") is None or
                    __import__("importlib").util.find_spec("triton") is None, reason="needs triton's CPU interpreter")
def test_the_solutions_kernel_passes_alone_and_an_empty_one_fails_naming_the_batch():
    def verdicts():
        return {"bonus_tests": Verdict("bonus_tests", True)}

    right = verdicts()
    ka.judge_alone(right, CELLS, "ps3_code", None, KernelLimits(), 300, seed=7)
    assert right["bonus_tests"].passed, right
    empty = [dict(c, source=ANSWER.split("### BEGIN SOLUTION")[0] + "        pass\n")
             if c["metadata"].get("nbgrader", {}).get("grade_id") == "bonus_answer" else c for c in CELLS]
    wrong = verdicts()
    ka.judge_alone(wrong, empty, "ps3_code", None, KernelLimits(), 300, seed=7)
    verdict = wrong["bonus_tests"]
    assert not verdict.passed and "new batch 1 of 3 (seed 7)" in verdict.message and "NaN" in verdict.message, verdict
    assert verdict.forged and "run alone" in verdict.forged[0], verdict
    # a test that failed on its record is not run again, and a set without RUN_ALONE runs nothing
    failed = {"bonus_tests": Verdict("bonus_tests", False, "its own message")}
    ka.judge_alone(failed, empty, "ps3_code", None, KernelLimits(), 300, seed=7)
    assert failed["bonus_tests"].message == "its own message"
    assert ka.spec_for("ps2_math") is None
