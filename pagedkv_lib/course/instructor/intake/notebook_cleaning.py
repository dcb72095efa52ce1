"""Make a downloaded notebook gradable: readable, free of Colab's personal data, nbgrader metadata attached.

Colab saves nbformat 4.0 without cell ids, adds ``executionInfo`` (the learner's name and id) and
``authorship_tag``, and some download paths drop nbgrader's cell metadata. nbgrader finds answers and tests
by ``metadata.nbgrader.grade_id`` only, so a cell that lost it would silently score 0. Here it is put back
from the released notebook: by ``grade_id``, else by a locked cell's source, else by the visible
``ANSWER <grade_id>`` marker line each answer cell carries.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from dataclasses import dataclass, field

from .submission_bounds import Malformed, SubmissionLimits, Unreadable, parse_bounded  # noqa: F401 (Unreadable, Malformed: raised here)

#: Metadata keys holding a learner's identity or Colab bookkeeping; removed at any depth of metadata.
PERSONAL_KEYS = frozenset({"executionInfo", "authorship_tag", "user", "userId", "displayName", "photoUrl",
                           "user_tz", "colab", "outputId", "provenance"})


@dataclass
class Normalised:
    """A cleaned notebook (a JSON dict) and what was found while cleaning it."""

    nb: dict
    reattached: list[str] = field(default_factory=list)  # grade ids whose metadata was put back
    missing: list[str] = field(default_factory=list)     # graded cells of the release not found at all


def answer_marker(grade_id: str) -> str:
    """The visible text an answer cell keeps so it can be found again if its metadata is lost."""
    return f"ANSWER {grade_id}"


def missing_note(grade_ids: list[str]) -> str:
    """What to tell the instructor about graded cells a submission lacks."""
    return (f"graded cells missing: {', '.join(grade_ids)} (test cells are put back and run; "
            "a missing answer scores 0)")


def parse_notebook(text: str, where: str, limits: SubmissionLimits | None = None) -> dict:
    """The notebook JSON in ``text``, within ``limits`` (``submission_bounds.py``); raise :class:`Unreadable`
    or :class:`Malformed` naming ``where`` and the reason."""
    return parse_bounded(text, limits or SubmissionLimits(), where)


def _strip(meta):
    if isinstance(meta, dict):
        return {k: _strip(v) for k, v in meta.items() if k not in PERSONAL_KEYS}
    if isinstance(meta, list):
        return [_strip(v) for v in meta]
    return meta


def cell_text(source) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    return "".join(source) if isinstance(source, list) else str(source)


def tidy_source(source) -> str:
    """A cell's source as compared for sameness: newlines unified, lines right-stripped, ends trimmed."""
    return "\n".join(line.rstrip() for line in cell_text(source).replace("\r\n", "\n").strip().splitlines())


def cell_grade_id(cell) -> str | None:
    """The cell's nbgrader ``grade_id``, or None."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def is_test(cell) -> bool:
    """True for an autograded test cell: a graded code cell that is not an answer."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def clean(nb: dict) -> dict:
    """A copy of ``nb`` without personal metadata, with LF line ends, cell ids and nbformat 4.5."""
    nb = copy.deepcopy(nb)
    nb["metadata"] = _strip(nb.get("metadata", {}))
    seen = set()
    for i, cell in enumerate(nb["cells"]):
        cell["metadata"] = {k: v for k, v in _strip(cell.get("metadata", {})).items() if k != "id"}
        cell["source"] = cell_text(cell.get("source", "")).replace("\r\n", "\n")
        for out in cell.get("outputs", []):
            if "metadata" in out:
                out["metadata"] = _strip(out["metadata"])
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen:
            cid = f"cell-{i:02d}"
        cell["id"] = cid
        seen.add(cid)
    nb["nbformat_minor"] = max(5, int(nb.get("nbformat_minor", 0) or 0))
    return nb


def _find(release_cell, candidates) -> dict | None:
    meta = release_cell["metadata"]["nbgrader"]
    same_type = [c for c in candidates if c.get("cell_type") == release_cell["cell_type"]]
    if meta.get("locked"):
        want = tidy_source(release_cell["source"])
        return next((c for c in same_type if tidy_source(c["source"]) == want), None)
    if meta.get("solution"):
        marker = answer_marker(meta["grade_id"])
        return next((c for c in same_type if marker in cell_text(c["source"])), None)
    return None


def reattach(nb: dict, release: dict) -> Normalised:
    """Put back nbgrader metadata that ``nb`` lost, from ``release`` (both cleaned notebooks)."""
    have = {cell_grade_id(c) for c in nb["cells"]} - {None}
    free = [c for c in nb["cells"] if "nbgrader" not in c["metadata"]]
    result = Normalised(nb)
    for rc in release["cells"]:
        gid = cell_grade_id(rc)
        if gid is None or gid in have:
            continue
        match = _find(rc, free)
        meta = rc["metadata"]["nbgrader"]
        if match is not None:
            match["metadata"]["nbgrader"] = copy.deepcopy(meta)
            free.remove(match)
            result.reattached.append(gid)
        elif meta.get("grade") or meta.get("solution"):
            result.missing.append(gid)
    return result


def normalise(text: str, release: dict, where: str, limits: SubmissionLimits | None = None) -> Normalised:
    """Parse within ``limits``, clean and re-attach metadata; raise :class:`Unreadable` for a file that is not
    a notebook, :class:`Malformed` for one outside the bounds."""
    return reattach(clean(parse_notebook(text, where, limits)), clean(release))


def graded_cell_ids(notebook) -> list[str]:
    """The ``grade_id`` of every graded or solution cell in the notebook file ``notebook``, in order."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    ids = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") or meta.get("solution"):
            ids.append(meta.get("grade_id"))
    return ids


def missing_graded_cells(submission, release) -> list[str]:
    """Grade ids present in the released notebook but absent from a submission (both notebook files)."""
    have = set(graded_cell_ids(submission))
    return [g for g in graded_cell_ids(release) if g not in have]
