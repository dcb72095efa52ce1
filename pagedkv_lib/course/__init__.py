"""Grading for the pagedkv course, in two parts: ``learner`` (what runs in a learner's kernel: test
cells record results and give one-line feedback) and ``instructor`` (what grades: nbgrader's workflow,
the sandbox every submission runs in, and the judge that scores records outside the learner's kernel).

Course layout (see ``nbgrader_config.py``): instructor notebooks in ``solutions/<assignment>/``, student
copies generated into ``exercises/<assignment>/``, submissions in ``submitted/<student>/<assignment>/``.
Command line, from the repository root (``python -m pagedkv_lib.course --help`` for options)::

    python -m pagedkv_lib.course generate          # solutions/ -> exercises/
    python -m pagedkv_lib.course collect DOWNLOADS # a folder or zip of notebooks -> submitted/ (cleaned)
    python -m pagedkv_lib.course autograde         # submitted/ -> autograded/, results/, grades.csv, status.csv
    python -m pagedkv_lib.course feedback          # autograded/ -> feedback/ (HTML for learners)
    python -m pagedkv_lib.course export            # gradebook -> grades.csv (with each status)
    python -m pagedkv_lib.course report            # report/report.md with its figures
"""
from importlib import import_module

from .learner import check_known_mistakes, check_value

# The instructor's side loads on first use: a learner's notebook imports the learner side on Colab
# too, where nbgrader and its tools are not installed.
_LAZY = {"autograde": "autograde_class", "collect_notebooks": "intake.collect_notebooks",
         "ConciseErrors": "reporting.learner_feedback", "concise_errors": "reporting.learner_feedback",
         "feedback": "reporting.learner_feedback", "RELEASE": "course_layout", "SOURCE": "course_layout",
         "SUBMITTED": "course_layout", "assignments": "course_layout", "generate": "course_layout",
         "nbgrader": "course_layout", "normalise": "intake.notebook_cleaning",
         "graded_cell_ids": "intake.notebook_cleaning", "missing_graded_cells": "intake.notebook_cleaning",
         "export_grades": "reporting.grades_export", "report": "reporting.class_report"}
__all__ = ["check_value", "check_known_mistakes", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f".instructor.{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
