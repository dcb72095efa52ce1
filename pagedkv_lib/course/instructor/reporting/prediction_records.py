"""The prediction records saved in handed-in notebooks, read as the untrusted input they are.

A gate's commit is saved in the notebook as a display output of mime type :data:`MIME` whose data is
``{"v": 1, "gate": id, "notebook": name, "kind": "choice"|"number"|"text", "value": ..., "right": bool or
null, "misconception": str or null, "time": ISO 8601 UTC}`` and, for a problem-set gate, an optional
``"question"``: the grade id of the question it predicts. They are read from the handed-in notebooks,
``submitted/<student>/<assignment>/*.ipynb``; the latest commit by time counts (a learner may re-commit).

Records are written by learners' kernels, so each is checked like any untrusted input: types, sizes and
formats; strings are capped at :data:`MAX_TEXT` characters (``prediction_report.safe`` escapes them
before they reach Markdown or HTML); malformed records are ignored and counted by reason. A record's
``right`` and ``misconception`` are the learner kernel's own verdict (predictions are ungraded, so a
forged one changes only that learner's row).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...protocol import PREDICTION_KINDS as KINDS, PREDICTION_MIME as MIME
from ..intake.notebook_cleaning import parse_notebook
from ..intake.submission_bounds import SubmissionLimits, read_bounded

MAX_TEXT = 200            # characters kept of any learner-written string
MAX_RECORDS = 1000        # prediction outputs read per notebook; more are counted as malformed
MAX_GATES = 60            # distinct gates per notebook (a lesson has a handful): more cannot flood the report
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}")  # a gate, notebook or question id as a record may name it
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_DECLARED = re.compile(r"""\b(?:predict|Gate|gate)\(\s*\\?["']([A-Za-z0-9][A-Za-z0-9_.:-]{0,79})\\?["']""")


@dataclass(frozen=True)
class Prediction:
    """One learner's latest commit at one gate (``value``: str for choices and texts, float for numbers)."""

    student: str
    assignment: str
    gate: str
    kind: str
    value: str | float
    right: bool | None
    misconception: str | None
    time: datetime
    question: str | None


def _text(value) -> str:
    """A learner-written string, single-line and capped at :data:`MAX_TEXT` characters."""
    text = _CONTROL.sub(" ", value).strip()
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def shown(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _finite(x) -> bool:
    """A JSON number (not a bool) of sensible size: ``abs`` first, so a 400-digit int cannot overflow."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) <= 1e300


def parse_record(data, student: str, assignment: str) -> Prediction:
    """The :class:`Prediction` in one output's data; ``ValueError`` names what is wrong with it."""
    if isinstance(data, str):  # some front ends store JSON mime data as its text
        if len(data) > 20_000:
            raise ValueError("record over 20 kB")
        data = json.loads(data)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("v") != 1 or isinstance(data.get("v"), bool):
        raise ValueError("unknown version")
    gate, kind, value = data.get("gate"), data.get("kind"), data.get("value")
    if not isinstance(gate, str) or not ID.fullmatch(gate):
        raise ValueError("bad gate id")
    if kind not in KINDS:
        raise ValueError("bad kind")
    if kind == "number":
        if not _finite(value):
            raise ValueError("value does not fit its kind")
        value = float(value)
    elif kind == "choice" and _finite(value):
        value = shown(float(value) if isinstance(value, float) else value)  # a choice may be a number
    elif not isinstance(value, str) or not _text(value):
        raise ValueError("value does not fit its kind")
    else:
        value = _text(value)
    right, mis, question = data.get("right"), data.get("misconception"), data.get("question")
    if right is not None and not isinstance(right, bool):
        raise ValueError("bad right")
    if mis is not None and not isinstance(mis, str):
        raise ValueError("bad misconception")
    if question is not None and (not isinstance(question, str) or not ID.fullmatch(question)):
        raise ValueError("bad question")
    stamp = data.get("time")
    if not isinstance(stamp, str) or len(stamp) > 40:
        raise ValueError("bad time")
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        raise ValueError("bad time") from None
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    return Prediction(student, assignment, gate, kind, value, right, _text(mis) if mis else None, when, question)


def _outputs(nb) -> list:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [o for c in cells if isinstance(c, dict) and isinstance(c.get("outputs"), list)
            for o in c["outputs"] if isinstance(o, dict)] if isinstance(cells, list) else []


def read_predictions(submitted_dir, limits: SubmissionLimits | None = None) -> tuple[list[Prediction], Counter]:
    """Every learner's latest commit per (assignment, gate) under ``submitted_dir``, and the malformed
    records (and unreadable notebooks) counted by reason. A notebook outside ``limits`` (the course's
    ``SubmissionLimits``; the defaults without) is counted unreadable before it is read."""
    limits = limits or SubmissionLimits()
    latest: dict[tuple, Prediction] = {}
    bad = Counter()
    for path in sorted(Path(submitted_dir).glob("*/*/*.ipynb")):
        student, assignment = path.parent.parent.name, path.parent.name
        try:
            nb = parse_notebook(read_bounded(path, limits, path.name), path.name, limits)
        except (ValueError, RecursionError):  # Unreadable and Malformed (submission_bounds.py) are ValueErrors
            bad["unreadable notebook"] += 1
            continue
        seen, gates = 0, set()
        for out in _outputs(nb):
            data = out.get("data")
            if not isinstance(data, dict) or MIME not in data:
                continue
            seen += 1
            if seen > MAX_RECORDS:
                bad[f"more than {MAX_RECORDS} records in one notebook"] += 1
                continue
            try:
                p = parse_record(data[MIME], student, assignment)
            except (ValueError, RecursionError) as err:  # json.JSONDecodeError is a ValueError
                bad[str(err) if str(err) in _REASONS else "not valid JSON"] += 1
                continue
            gates.add(p.gate)
            if len(gates) > MAX_GATES:
                gates.discard(p.gate)
                bad[f"more than {MAX_GATES} gates in one notebook"] += 1
                continue
            key = (student, assignment, p.gate)
            if key not in latest or p.time >= latest[key].time:
                latest[key] = p
    return sorted(latest.values(), key=lambda p: (p.assignment, p.gate, p.student)), bad


_REASONS = {"record over 20 kB", "not a JSON object", "unknown version", "bad gate id", "bad kind",
            "value does not fit its kind", "bad right", "bad misconception", "bad question", "bad time"}


def declared_gates(release: dict) -> list[str]:
    """Gate ids a released notebook's code declares (``predict("id", ...)``, ``Gate("id", ...)``), so that a
    gate nobody committed still gets its section."""
    found = []
    for cell in release.get("cells", []):
        source = cell.get("source", "")
        for gid in _DECLARED.findall(source if isinstance(source, str) else "".join(source)):
            if gid not in found:
                found.append(gid)
    return found
