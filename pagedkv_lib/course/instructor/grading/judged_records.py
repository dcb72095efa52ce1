"""Each graded notebook's records of results and verdicts, kept in its job folder for copy detection.

While grading, the judge keeps ``{test grade_id: {"record": ..., "passed": bool}}`` in the job's
``protocol.JUDGED_FILE`` (plain data, instructor-side, never in a sandbox or a feedback page); after the
class is graded, ``reporting/copy_detection.py`` reads them back, one student at a time (``SavedRecords``).
"""
from __future__ import annotations

import json

from ...protocol import JUDGED_FILE
from .grading_job import GradingJob


def save_records(job: GradingJob, tests: dict) -> None:
    """Keep one student's judged tests in their job folder."""
    job.folder.mkdir(parents=True, exist_ok=True)
    (job.folder / JUDGED_FILE).write_text(json.dumps(tests), encoding="utf-8")
