"""State shared by the prediction gate and the practice loop: the record, and input parsing."""
from __future__ import annotations

import html
import math
import numbers
from datetime import datetime, timezone

RECORD: list[dict] = []
"""Every commit and practice check, oldest first (read it through ``widgets.record()``)."""


def now() -> str:
    """The time now, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_id(qid) -> str:
    if not isinstance(qid, str) or not qid.strip():
        raise TypeError(f"question id must be a non-empty string, got {qid!r}")
    return qid


def lookup(registry: dict, kind: str, qid):
    """``registry[qid]``, after checking ``qid``; a ``KeyError`` naming ``kind`` and the known ids if absent."""
    check_id(qid)
    if qid not in registry:
        raise KeyError(f"no {kind} with id {qid!r}; known ids: {sorted(registry)}")
    return registry[qid]


def parse_number(name: str, value) -> int | float:
    """A learner's number (an int, a float, or text such as ``"63"`` or ``"8e5"``) as int or float."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        for kind in (int, float):
            try:
                out = kind(text)
            except ValueError:
                continue
            if isinstance(out, float) and not math.isfinite(out):
                break
            return out
    raise ValueError(f"{name} must be a number (for example 63 or 8.5e5), got {value!r}")


def escape(text: str) -> str:
    """Text made safe to put inside an HTML widget."""
    return html.escape(text)


def widget_bundle(text: str, view) -> dict:
    """A display bundle: the widget view where a front end can render it, ``text`` everywhere."""
    data = {"text/plain": text}
    try:
        model_id = view().box.model_id
    except Exception:  # no kernel to talk to: the text form is all there is
        return data
    data["application/vnd.jupyter.widget-view+json"] = {
        "version_major": 2, "version_minor": 0, "model_id": model_id}
    return data
