"""Does a hand-in hold the instructor's own solution? Its markers, or a line of its hidden tests.

nbgrader's release strips everything between ``### BEGIN SOLUTION`` / ``### END SOLUTION`` and between
``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``, so a learner's notebook holds neither marker, nor
the hidden tests' lines, unless the source notebook (``solutions/``) reached them. Such a hand-in is
flagged ``leaked solution`` for the instructor to look at; its score is left as graded.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

MARKERS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")
MIN_LINE = 30
"""Shortest hidden-test line looked for, in characters (shorter ones, like ``assert x == 1``, a learner may
well write themselves)."""


def _cell_lines(nb: dict):
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        yield from ("".join(src) if isinstance(src, list) else str(src)).splitlines()


def hidden_lines(source_nb: dict, release_nb: dict) -> frozenset[str]:
    """The stripped lines, at least :data:`MIN_LINE` long, inside the source's hidden-test blocks and not
    anywhere in the released notebook."""
    released = {line.strip() for line in _cell_lines(release_nb)}
    found, inside = set(), False
    for line in _cell_lines(source_nb):
        text = line.strip()
        if text == "### BEGIN HIDDEN TESTS":
            inside = True
        elif text == "### END HIDDEN TESTS":
            inside = False
        elif inside and len(text) >= MIN_LINE and text not in released:
            found.add(text)
    return frozenset(found)


@lru_cache(maxsize=16)
def _hidden_of(source: Path, mtime_ns: int, release_json: str) -> frozenset[str]:
    nb = json.loads(source.read_text(encoding="utf-8"))
    return hidden_lines(nb, json.loads(release_json))


def leak(submission: dict, source: Path, release: dict) -> str:
    """Why the hand-in ``submission`` (a notebook's JSON) holds the solution ``source`` (a notebook file;
    absent: only the markers are looked for), or "" when it does not."""
    lines = {line.strip() for line in _cell_lines(submission)}
    if marker := next((m for m in MARKERS if m in lines), None):
        return f"it holds the solution marker {marker!r} (the instructor's source notebook, not the release)"
    if not Path(source).is_file():
        return ""
    hidden = _hidden_of(Path(source), Path(source).stat().st_mtime_ns, json.dumps(release, sort_keys=True))
    if shown := sorted(lines & hidden):
        return f"it holds {len(shown)} line(s) of the hidden tests, e.g. {shown[0][:60]!r}"
    return ""
