"""The learner's side of grading: what test cells and lessons import in the learner's own kernel.

``checks`` (one-line feedback: check_value, require, yours), ``testcell`` (a test cell's record of the
learner's results, shown as plain data for the grader), ``variants`` (each learner's numbers). The
record's format is the contract in ``course/protocol.py``, its values' encoding ``course/plain_values.py``;
the learner's side imports nothing else of the course. Nothing here decides a score: the grader judges
the record in its own process (``course/instructor``).
"""
from .checks import check_known_mistakes, check_value

__all__ = ["check_value", "check_known_mistakes"]
