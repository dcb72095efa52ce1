"""How one student's notebook for one assignment went: the one status every stage adds to."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Status:
    """How one student's notebook for one assignment went; ``problems`` empty means ok."""

    student: str
    assignment: str
    problems: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    failed: bool = False  # the worker did not finish: its grades were set to 0
    seconds: float = 0.0  # wall-clock time of this student's grading worker

    @property
    def label(self) -> str:
        return "ok" if not self.problems else ", ".join(dict.fromkeys(self.problems))
