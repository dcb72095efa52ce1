"""Every lesson notebook runs top to bottom in a fresh kernel, and is committed without outputs."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO

LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))


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
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
