"""Each graded notebook's records of results and verdicts, kept in its job folder for copy detection.

While grading, the judge keeps ``{test grade_id: {"record": ..., "passed": bool}}`` in the job's
``protocol.JUDGED_FILE`` (plain data, instructor-side, never in a sandbox or a feedback page); after the
class is graded, ``reporting/copy_detection.py`` reads them back with :func:`load_records`.
"""
from __future__ import annotations

import json
from pathlib import Path

from ...protocol import JOBS_DIR, JUDGED_FILE
from .grading_job import GradingJob


def save_records(job: GradingJob, tests: dict) -> None:
    """Keep one student's judged tests in their job folder."""
    job.folder.mkdir(parents=True, exist_ok=True)
    (job.folder / JUDGED_FILE).write_text(json.dumps(tests), encoding="utf-8")


def load_records(root: Path, assignment: str) -> dict[str, dict]:
    """``{student: tests}`` saved for ``assignment`` in this run (a damaged file: that student is left out)."""
    folder = Path(root) / JOBS_DIR / assignment
    out = {}
    for path in sorted(folder.glob(f"*/{JUDGED_FILE}")) if folder.is_dir() else []:
        try:
            tests = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(tests, dict) and all(isinstance(t, dict) for t in tests.values()):
            out[path.parent.name] = tests
    return out
