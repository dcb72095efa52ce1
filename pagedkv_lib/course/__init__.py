"""The instructor's workflow around nbgrader, and the checks graded test cells call.

Course layout (see ``nbgrader_config.py``): instructor notebooks in ``solutions/<assignment>/``, student
copies generated into ``exercises/<assignment>/``, submissions in ``submitted/<student>/<assignment>/``.
Command line, from the repository root (``python -m pagedkv_lib.course --help`` for options)::

    python -m pagedkv_lib.course generate          # solutions/ -> exercises/
    python -m pagedkv_lib.course collect DOWNLOADS # a folder or zip of notebooks -> submitted/ (cleaned)
    python -m pagedkv_lib.course autograde         # submitted/ -> autograded/, grades.csv, status.csv
    python -m pagedkv_lib.course feedback          # autograded/ -> feedback/ (HTML for learners)
    python -m pagedkv_lib.course export            # gradebook -> grades.csv (with each status)
    python -m pagedkv_lib.course report            # report/report.md with its figures

Modules: ``checks`` (check_value), ``testcell`` (what test cells run first and last), ``nbclean`` and
``intake`` (downloads in), ``grade`` and ``classrun`` (parallel autograding), ``nbhooks`` (nbgrader
preprocessors), ``scan`` (answer cells that touch the grader), ``feedback``, ``report``.
"""
from importlib import import_module

from .checks import check_known_mistakes, check_value

# Everything else loads on first use: a learner's notebook imports this package (for the checks and
# ``testcell``) on Colab too, where nbgrader and its tools are not installed.
_LAZY = {"autograde": "classrun", "collect": "intake", "ConciseErrors": "feedback_html",
         "concise_errors": "feedback_html", "RELEASE": "grade", "SOURCE": "grade", "SUBMITTED": "grade",
         "assignments": "grade", "generate": "grade", "nbgrader": "grade", "normalise": "nbclean",
         "export": "class_report", "report": "class_report", "feedback": "workflow",
         "graded_cell_ids": "workflow", "missing_graded_cells": "workflow"}
__all__ = ["check_value", "check_known_mistakes", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
