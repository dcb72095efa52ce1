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
from dataclasses import dataclass, field

#: Metadata keys holding a learner's identity or Colab bookkeeping; removed at any depth of metadata.
PERSONAL_KEYS = frozenset({"executionInfo", "authorship_tag", "user", "userId", "displayName", "photoUrl",
                           "user_tz", "colab", "outputId", "provenance"})


class Unreadable(ValueError):
    """The file is not a notebook nbgrader could read; the message says why, for the instructor."""


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


def parse(text: str, where: str) -> dict:
    """The notebook JSON in ``text``; raise :class:`Unreadable` naming ``where`` and the reason."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise Unreadable(f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                         "the file may be truncated") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise Unreadable(f"{where}: JSON but not an nbformat-4 notebook (no 'cells' list or nbformat != 4)")
    return nb


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


def normalise(text: str, release: dict, where: str) -> Normalised:
    """Parse, clean and re-attach metadata; raise :class:`Unreadable` for a file that is not a notebook."""
    return reattach(clean(parse(text, where)), clean(release))
