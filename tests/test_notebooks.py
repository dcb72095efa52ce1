"""Every lesson notebook runs top to bottom in a fresh kernel, and is committed without outputs."""
from pathlib import Path

import nbformat
import pytest

from conftest import LESSONS, execute_lesson


def test_there_are_lessons():
    assert LESSONS, "notebooks/ holds no lesson notebooks"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_is_committed_clean(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_top_to_bottom(path: Path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    errors = execute_lesson(nb, path)
    assert not errors
