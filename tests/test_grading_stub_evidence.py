"""The stub list of each problem set is decided by evidence: no callable left in the sandbox's library copy
returns a graded answer on that question's hidden inputs.

Per set (every solution notebook, so a new set or question is picked up), the solution is run with its
hidden tests under four variant keys (``stub_evidence.py capture``, the full library), and every public
function, class and method of the library copy the sandbox gives a kernel of that set (built by
``kernel_sandbox.hidden_library`` from the set's ``metadata.pagedkv.graded_functions``) is called on each
question's inputs in a fresh interpreter with that copy alone on its path (``stub_evidence.py probe``).
A route found is allowed only when the set names every function it uses in
``metadata.pagedkv.kept_visible`` with the reason (``{"pagedkv_lib.module:name": "why"}``); those are
listed in the test's output. Compositions of library functions cannot be enumerated in general: the
known one (``gather_kv`` then ``dense_attention``) is tried (``stub_evidence.COMPOSITIONS``).
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pagedkv_lib.course.instructor.grading.kernel_sandbox import hidden_library

ROOT = Path(__file__).resolve().parents[1]
HELPER = Path(__file__).with_name("stub_evidence.py")
SETS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())
#: The practice numbers and three learners' keys: a route must give the answer in each variant.
KEYS = ["", "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "5a5a5a5a00000000ffffffff12345678"]


def _metadata(assignment: str) -> dict:
    nb = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return nb["metadata"].get("pagedkv", {})


def _run(mode: str, source: Path, out: Path, pythonpath: Path, *extra: str) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(pythonpath), "HOME": str(out.parent),
           "MPLBACKEND": "agg", "PYTHONDONTWRITEBYTECODE": "1", "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(HELPER), mode, str(source), str(out), *extra], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return pickle.loads(out.read_bytes())


def routes_for(assignment: str, work: Path) -> tuple[dict, dict]:
    """``({grade_id: [routes]}, captured)`` for ``assignment`` with its current metadata."""
    work.mkdir(parents=True, exist_ok=True)
    notebook = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    captured = _run("capture", notebook, work / "captured.pkl", ROOT, ",".join(KEYS))
    questions: dict[str, list] = {}
    for key in KEYS:
        for grade_id, question in captured[key].items():
            questions.setdefault(grade_id, []).append(question)
    (work / "questions.pkl").write_bytes(pickle.dumps(questions))
    library = hidden_library(work / "library", list(_metadata(assignment).get("graded_functions", [])))
    return _run("probe", work / "questions.pkl", work / "routes.pkl", library), questions


def _kept(ident: str, kept: dict) -> bool:
    """Whether every library function route ``ident`` uses (``a+b`` for a composition) is kept visible."""
    return all(part in kept or _owner(part) in kept for part in ident.split("+"))


def _owner(ident: str) -> str:
    module, _, name = ident.partition(":")
    return f"{module}:{name.split('.')[0]}"


@pytest.mark.long
@pytest.mark.parametrize("assignment", SETS)
def test_no_library_callable_returns_a_graded_answer(assignment, tmp_path):
    meta = _metadata(assignment)
    kept = meta.get("kept_visible", {})
    for ident, why in kept.items():
        assert isinstance(why, str) and why.strip(), f"{assignment}: kept_visible[{ident!r}] needs its reason"
    routes, questions = routes_for(assignment, tmp_path)
    print(f"{assignment}: callables that ran out of time before every way was tried: {routes.pop('__untried__')}")
    failed = {g: q[0]["failed"] for g, q in questions.items() if q[0]["failed"]}
    assert not failed, f"{assignment}: the solution's test cells failed while capturing: {failed}"
    assert questions, f"{assignment}: no graded test cell was captured"
    open_routes = {g: [r for r in found if not _kept(r, kept)] for g, found in routes.items()}
    exempt = {g: [r for r in found if _kept(r, kept)] for g, found in routes.items()}
    print(f"{assignment}: kept visible with a route: {json.dumps({g: r for g, r in exempt.items() if r})}")
    assert not {g: r for g, r in open_routes.items() if r}, (
        f"{assignment}: these library callables return a graded answer in the sandbox (add them to "
        f"metadata.pagedkv.graded_functions, or name them in kept_visible with the reason): "
        f"{ {g: r for g, r in open_routes.items() if r} }")


def test_probe_finds_the_known_routes(tmp_path):
    """The probe is not blind: with nothing stubbed, ps2's Q6 is reached through n * expected_slack_per_request
    (the issue's attack) and its Q1-Q2 through the library's own functions, and ps3's Q5 through gather_kv
    then dense_attention."""
    ps2 = ROOT / "solutions" / "ps2_math" / "ps2_math.ipynb"
    captured = _run("capture", ps2, tmp_path / "captured.pkl", ROOT, ",".join(KEYS[:3]))
    questions = {g: [captured[k][g] for k in KEYS[:3]] for g in ("q2_tests", "q6_tests")}
    (tmp_path / "questions.pkl").write_bytes(pickle.dumps(questions))
    routes = _run("probe", tmp_path / "questions.pkl", tmp_path / "routes.pkl", hidden_library(tmp_path / "lib", []))
    routes.pop("__untried__")
    assert "pagedkv_lib.accounting:expected_slack_per_request" in routes["q6_tests"], routes
    assert "pagedkv_lib.accounting:blocks_needed" in routes["q2_tests"], routes
