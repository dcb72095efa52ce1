"""What one student's grading run saw, as events: one JSON line each in the file ``autograde`` names.

The course's nbgrader hooks (``nbhooks.py``: a timeout, a dead kernel, a tampered locked cell, a capped
output) and the sandbox (``sandbox.py``: what it denied the kernel) each :func:`record` what they saw;
``grade.py`` reads the lines back with :func:`read_events` and turns them into the student's status.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

EVENTS_ENV = "PAGEDKV_GRADING_EVENTS"  # names the file where record writes events


def record(kind: str, **details) -> None:
    """Append one event (``kind`` plus details) to this run's events file, if autograde asked for one."""
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, **details}) + "\n")


def read_events(path: Path) -> list[dict]:
    """The events recorded in ``path`` (none if the file does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
