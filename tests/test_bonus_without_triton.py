"""Without triton, ps3's Triton bonus is skipped and the learner's Validate passes and says so.

A learner on macOS or Windows (or a Linux machine without the extra) answers every question of the released
ps3 and runs ``nbgrader validate``, as a learner outside the hub does. Triton is hidden from the kernel by a
``sitecustomize`` on ``PYTHONPATH`` that leaves ``sys.modules["triton"] = None`` (what ``find_spec``
reports for a package that is not installed). The grader's side, which judges the same record and scores
the skipped bonus 0 as before, is tested in tests/test_psets.py (the bonus's "skipped in one line" test).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from psets_kernel import load, solutions

HIDE_TRITON = "import sys\nsys.modules['triton'] = None  # find_spec('triton') is None: as if not installed\n"


def answered(released: Path, dest: Path) -> Path:
    """The released set at ``released`` with the reference answers typed into its answer cells, as a
    learner's copy at ``dest`` (the written answers get a sentence: nbgrader validate wants them written)."""
    name = released.parent.name
    answers = solutions(load(REPO / "solutions" / name / f"{name}.ipynb"))
    nb = json.loads(released.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
        elif meta.get("solution"):
            cell["source"] = "Reserved slots grow by whole blocks, so the last block of each request holds the slack."
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return dest


def answered_release(dest: Path) -> Path:
    """The released ps3, answered, alone in ``dest``."""
    return answered(REPO / "exercises" / "ps3_code" / "ps3_code.ipynb", dest / "ps3_code.ipynb")


def validate(notebook: Path, hide: Path | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")
    if hide is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(hide), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "nbgrader", "validate", notebook.name], cwd=notebook.parent,
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_validate_passes_without_triton_and_the_notebook_says_the_bonus_was_skipped(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_TRITON)
    probe = subprocess.run([sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('triton'))"],
                           env=dict(os.environ, PYTHONPATH=str(hide)), capture_output=True, text=True)
    assert probe.stdout.strip() == "None", probe   # the hiding works in a fresh interpreter
    proc = validate(answered_release(tmp_path / "learner"), hide)
    assert "Success! Your notebook passes all the tests." in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "VALIDATION FAILED" not in proc.stdout


@pytest.mark.slow
def test_in_the_learners_kernel_the_skipped_bonus_prints_its_line_and_raises_nothing(tmp_path):
    """What Validate ran, cell by cell: the bonus's test cell prints why it skipped and shows no error."""
    import nbformat
    from notebook_runs import notebook_client

    path = answered_release(tmp_path / "learner")
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(HIDE_TRITON))
    notebook_client(nb, path).execute()
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "bonus_tests"]
    assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert "Bonus skipped: triton is not installed here, so the bonus scores 0" in printed, cell.outputs
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
