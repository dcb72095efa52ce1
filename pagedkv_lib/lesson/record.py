"""The record of a learner's commits: in the kernel, and saved with the notebook as outputs of their own type.

Every commit (a gate's prediction, a practice's first try, an answer canvas) becomes one display
output of mime type :data:`MIME` holding one JSON object (:func:`entry`), with a one-line
``text/plain`` beside it. Outputs are part of the ``.ipynb``, so the record survives a JupyterLab
save, a Colab download and a hub submission; the instructor's report reads them back.

Where the output goes: a commit from code lands in the cell that runs it. A commit from a
widget click runs in no cell, so each view reserves a :class:`Slot` while its own cell runs (an
empty output with a display id) and the click fills it (``update_display_data``, which JupyterLab,
the classic notebook and nbclient apply to the cell that holds the id).
"""
from __future__ import annotations

import os
import uuid
import weakref
from datetime import datetime, timezone

from ..course.protocol import PREDICTION_KINDS as KINDS, PREDICTION_MIME as MIME  # noqa: F401 (saved.MIME)
from .views import in_kernel

RECORD: list[dict] = []
"""Every commit and practice check of this kernel, oldest first (read it through ``gates.record()``)."""

_NOTEBOOK: list[str] = []
_LISTENERS: list[weakref.WeakMethod] = []


def on_commit(method) -> None:
    """Call the bound ``method`` (no arguments) after every commit of a prediction, while its object lives.

    What shows the learner's commits elsewhere (the research room's hand-off) listens, so it never
    shows an older record than the kernel holds.
    """
    _LISTENERS.append(weakref.WeakMethod(method))


def committed() -> None:
    """Tell every live listener that a prediction was committed; forget the dead ones."""
    alive = [ref for ref in _LISTENERS if ref() is not None]
    _LISTENERS[:] = alive
    for ref in alive:
        method = ref()
        if method is not None:
            method()


def now() -> str:
    """The time now, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def set_notebook(name: str) -> str:
    """Name the notebook the commits of this kernel belong to (``"01_intuition"``, ``"ps2_math"``)."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"notebook name must be a non-empty string, got {name!r}")
    _NOTEBOOK[:] = [name.strip()]
    return _NOTEBOOK[0]


def notebook_name() -> str | None:
    """The name set by :func:`set_notebook`, else the file JupyterLab runs this kernel for, else None."""
    if _NOTEBOOK:
        return _NOTEBOOK[0]
    session = os.environ.get("JPY_SESSION_NAME", "")
    stem = os.path.splitext(os.path.basename(session))[0]
    return stem or None


def entry(gate: str, kind: str, value, right: bool | None, misconception: str | None = None, *,
          question: str | None = None, checks: dict | None = None) -> dict:
    """One saved commit: ``{"v": 1, "gate", "notebook", "kind", "value", "right", "misconception", "time"}``.

    ``question`` (a problem set's nbgrader grade id the prediction is about) and ``checks`` (an
    answer canvas's ``{"claim", "mechanism", "bridge"}`` booleans) are added only when given.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if right not in (True, False, None):
        raise ValueError(f"right must be True, False or None, got {right!r}")
    out = {"v": 1, "gate": gate, "notebook": notebook_name(), "kind": kind, "value": value,
           "right": right, "misconception": misconception, "time": now()}
    if question is not None:
        out["question"] = question
    if checks is not None:
        out["checks"] = {k: bool(checks[k]) for k in ("claim", "mechanism", "bridge")}
    return out


def line(e: dict) -> str:
    """The one-line text form of a saved commit."""
    outcome = {True: "right", False: "wrong", None: "not judged here"}[e["right"]]
    value = e["value"] if e["kind"] != "text" else f"{len(str(e['value']).split())} words"
    return f"Saved in this notebook for your instructor: {e['gate']} = {value} ({outcome})"


def bundle(e: dict) -> dict:
    """The display bundle of a saved commit: the JSON under :data:`MIME`, and its line as text."""
    return {MIME: e, "text/plain": line(e)}


def emit(e: dict) -> None:
    """Save a commit as an output of the cell running now (nothing outside a kernel)."""
    if in_kernel():
        from IPython.display import display
        display(bundle(e), raw=True)


class Slot:
    """An output reserved in the cell that shows a view, for a commit made later by a click.

    :meth:`show` (while that cell runs) puts an empty output with a display id there; :meth:`fill`
    replaces it with a saved commit, from any later moment of the kernel. ``data`` is what the
    slot holds now (``{}`` while empty).
    """

    def __init__(self):
        self.display_id = f"pagedkv-{uuid.uuid4().hex}"
        self.shown = False
        self.data: dict = {}

    def show(self) -> None:
        """Reserve the output in the running cell (again, with what it holds, if shown before)."""
        if in_kernel():
            from IPython.display import display
            display(self.data, raw=True, display_id=self.display_id)
            self.shown = True

    def fill(self, e: dict) -> None:
        """Hold the saved commit ``e``; where the slot is on screen, its output is replaced."""
        self.data = bundle(e)
        if self.shown and in_kernel():
            from IPython.display import update_display
            update_display(self.data, raw=True, display_id=self.display_id)

    @property
    def empty(self) -> bool:
        return not self.data
