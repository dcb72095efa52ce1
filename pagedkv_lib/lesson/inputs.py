"""What a learner types or a lesson passes, checked: question ids, registry look-ups, numbers."""
from __future__ import annotations

import math
import numbers


def check_id(qid) -> str:
    """``qid`` itself, if it is a non-empty string; else a ``TypeError`` naming it."""
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
