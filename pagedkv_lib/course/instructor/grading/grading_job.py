"""One graded notebook's job: its parameters, handed from the class's autograde to nbgrader's hooks in a
file, and the events those hooks and the sandbox record while it runs.

The class's autograde writes :class:`GradingJob` into the job's folder (``protocol.job_folder``) before
the worker runs nbgrader on it; each hook finds that folder from nbgrader's ``resources`` (the student
and the assignment) and the course root (nbgrader's working folder). Nothing travels in the
environment. Without a job file (plain ``nbgrader autograde``) a job is sandboxed, its key comes from the
course secret, and its events still land in its folder.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ...protocol import EVENTS_FILE, JOB_FILE, job_folder
from ..intake.variant_keys import key_for


@dataclass
class GradingJob:
    """What grading ``student``'s ``assignment`` needs beyond nbgrader's own settings."""

    root: str  #: the course root (absolute)
    assignment: str
    student: str
    sandbox: bool = True  #: run the kernel in the sandbox (False only for trusted submissions)
    library: str = ""  #: the hidden library copy for this assignment; "" makes one per kernel
    variant_key: str = ""  #: the student's variant key ("" without a course secret)

    @property
    def folder(self) -> Path:
        return job_folder(Path(self.root), self.assignment, self.student)

    def write(self) -> Path:
        """Write this job's file (and clear its events from any earlier run); return its folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / EVENTS_FILE).unlink(missing_ok=True)
        (self.folder / JOB_FILE).write_text(json.dumps(asdict(self)), encoding="utf-8")
        return self.folder

    @classmethod
    def read(cls, root: Path, assignment: str, student: str) -> "GradingJob":
        """The job written for ``student``'s ``assignment``, or the defaults (see the module docstring)."""
        root = Path(root).resolve()
        path = job_folder(root, assignment, student) / JOB_FILE
        if path.exists():
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        return cls(str(root), assignment, student, variant_key=key_for(root, student))

    @classmethod
    def for_resources(cls, resources: dict) -> "GradingJob":
        """The job nbgrader is running, from its ``resources`` (the course root is the working folder)."""
        info = resources["nbgrader"]
        return cls.read(Path.cwd(), info["assignment"], info["student"])

    def record(self, kind: str, **details) -> None:
        """Append one event (``protocol.EventKind`` plus details) to this job's events."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / EVENTS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, **details}) + "\n")

    def events(self) -> list[dict]:
        """The events recorded so far (none if nothing was recorded)."""
        path = self.folder / EVENTS_FILE
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
