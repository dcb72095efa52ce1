"""Feedback for every graded submission, and checks on which graded cells a notebook holds."""
from __future__ import annotations

import json
from pathlib import Path

from .intake import release_notebooks
from .feedback_html import polish_all
from .grade import cached_releases, nbgrader


def graded_cell_ids(notebook) -> list[str]:
    """The ``grade_id`` of every graded or solution cell in a notebook, in order."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    ids = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") or meta.get("solution"):
            ids.append(meta.get("grade_id"))
    return ids


def missing_graded_cells(submission, release) -> list[str]:
    """Grade ids present in the released notebook but absent from a submission."""
    have = set(graded_cell_ids(submission))
    return [g for g in graded_cell_ids(release) if g not in have]


def feedback(course_dir=".") -> list[Path]:
    """Write HTML feedback for every autograded submission into ``feedback/``; return the pages."""
    root = Path(course_dir)
    names = sorted({p.parent.name for p in (root / "autograded").glob("*/*/*.ipynb")})
    for name in names:
        nbgrader("generate_feedback", name, "--force", course_dir=root)
    return polish_all(root / "feedback", release_notebooks(cached_releases(root, names)))
