"""The library's layering, as pyproject.toml's import-linter contract writes it down, holds.

The second test shows the check can fail: a copy of the library in which the Math lesson's
accounting imports a lesson module breaks the contract.
"""
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
LINT = pathlib.Path(sys.executable).with_name("lint-imports")


def lint(root: pathlib.Path) -> subprocess.CompletedProcess:
    """lint-imports run in ``root``, on the pagedkv_lib found there first."""
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def test_the_library_keeps_its_import_contract():
    run = lint(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_a_lower_layer_importing_lesson_breaks_the_contract(tmp_path):
    shutil.copytree(REPO / "pagedkv_lib", tmp_path / "pagedkv_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    accounting = tmp_path / "pagedkv_lib" / "accounting.py"
    accounting.write_text(accounting.read_text() + "\nfrom .lesson import gates  # a layering violation\n")
    run = lint(tmp_path)
    assert run.returncode != 0
    assert "pagedkv_lib.accounting -> pagedkv_lib.lesson.gates" in run.stdout
