"""One graded notebook's result: everything autograde found about one student's notebook for one
assignment, in one object every stage adds to and the run writes once.

Intake, grading and copy detection each add their problems to the student's :class:`NotebookResult` in
memory; when the class is graded, the gradebook's points are added (:func:`add_points`) and every result
is written once, to ``results/<assignment>/<student>.json`` (:func:`write_results`; a file that already
exists is an error, never overwritten). ``status.csv``, the status column of ``grades.csv`` and the class
report are read from these files (:func:`read_results`).
"""
from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...errors import PagedKVError
from .course_layout import RESULTS_DIR, db_url


@dataclass
class NotebookResult:
    """How one student's notebook for one assignment went; ``problems`` empty means ok."""

    student: str
    assignment: str
    problems: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    failed: bool = False  # the worker did not finish: its grades were set to 0
    seconds: float = 0.0  # wall-clock time of this student's grading worker
    #: ``{grade_id: {"score", "max_score", "needs_manual_grade"}}`` for each graded cell, from the
    #: gradebook once the class is graded (points; empty for a notebook with no grade rows)
    points: dict[str, dict] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "ok" if not self.problems else ", ".join(dict.fromkeys(self.problems))

    @property
    def path_in(self) -> Path:
        """This result's file, relative to the course root."""
        return Path(RESULTS_DIR) / self.assignment / f"{self.student}.json"


def add_points(root: Path, results: list[NotebookResult]) -> None:
    """Fill each result's ``points`` from the gradebook (a result with no submission there keeps none; one
    whose rows cannot be read says so in its details)."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning
    with warnings.catch_warnings(), Gradebook(db_url(root)) as gb:
        warnings.simplefilter("ignore", SAWarning)
        for result in results:
            try:
                submission = gb.find_submission(result.assignment, result.student)
                result.points = {g.name: {"score": g.score, "max_score": g.max_score,
                                          "needs_manual_grade": g.needs_manual_grade}
                                 for nb in submission.notebooks for g in nb.grades}
            except MissingEntry:
                continue
            except Exception as err:  # noqa: BLE001 (this notebook's, said in its result; the class goes on)
                result.details.append(f"its points could not be read from the gradebook: {type(err).__name__}")


def write_results(root: Path, results: list[NotebookResult]) -> None:
    """Replace the last run's ``results/`` with one file per result, each written once; two results for
    one notebook are refused before anything is written."""
    seen: set[Path] = set()
    for result in results:
        if result.path_in in seen:
            raise PagedKVError(f"results: two results for {result.student}'s {result.assignment}; "
                               "each graded notebook has exactly one")
        seen.add(result.path_in)
    folder = Path(root) / RESULTS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    for result in results:
        path = Path(root) / result.path_in
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # never over an earlier one
            json.dump(asdict(result), f, indent=1)


def read_results(root: Path) -> list[NotebookResult]:
    """The results the last run wrote, by assignment then student (none before the first autograde)."""
    files = sorted((Path(root) / RESULTS_DIR).glob("*/*.json"))
    return [NotebookResult(**json.loads(p.read_text(encoding="utf-8"))) for p in files]
