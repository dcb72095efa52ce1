"""``python -m pagedkv_lib.course <command>``: the instructor's commands (see the package docstring)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import PagedKVError
from . import __doc__ as _doc
from .instructor.autograde_class import autograde
from .instructor.course_layout import DEFAULT_TIMEOUT_S, assignments, cached_releases, course_config, generate
from .instructor.intake import lms_canvas, variant_keys
from .instructor.intake.collect_notebooks import release_notebooks
from .instructor.intake.submission_bounds import SubmissionLimits
from .instructor.reporting.canvas_grades import export_canvas_grades
from .instructor.reporting.class_report import report
from .instructor.reporting.grades_export import export_grades, print_summary
from .instructor.reporting.learner_feedback import feedback


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pagedkv_lib.course", description=_doc.split("\n")[0])
    p.add_argument("command", choices=["generate", "keys", "collect", "autograde", "feedback", "export", "report"])
    p.add_argument("source", nargs="?", help="collect: the folder or zip of downloaded notebooks")
    p.add_argument("--course-dir", default=".", help="repository root (default: current folder)")
    p.add_argument("--assignment", help="collect: the assignment of notebooks whose name does not say")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"autograde: seconds a cell may run (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--workers", type=int, default=None, help="autograde: students graded at once (default: CPU cores)")
    p.add_argument("--format", choices=["csv", "canvas"], default="csv",
                   help="export: csv (nbgrader's grades.csv) or canvas (also grades-canvas.csv for Canvas's import)")
    p.add_argument("--names", action="store_true", help="report: name learners in the predictions section")
    p.add_argument("--roster", help="keys: the class (Canvas's gradebook export, a hub roster or one id per line); "
                                    "export --format=canvas, collect of a Canvas zip: Canvas's gradebook export CSV")
    p.add_argument("--trust-submissions", action="store_true",
                   help="autograde: run kernels without the sandbox (only for submissions you trust; said in every status)")
    return p


def _releases(course_dir, submitted_only: bool = False) -> dict:
    """``{assignment: released notebook}`` for every assignment (or only those somebody handed in),
    generated only where stale."""
    names = assignments(course_dir)
    if submitted_only:
        handed_in = {p.name for p in Path(course_dir, "submitted").glob("*/*") if p.is_dir()}
        names = [n for n in names if n in handed_in]
    releases = release_notebooks(cached_releases(Path(course_dir), names))
    return {n: nb for n, nb in releases.items() if n in names}


def _collect(args) -> None:
    if not args.source:
        raise PagedKVError("collect needs the folder or zip of notebooks: python -m pagedkv_lib.course collect DOWNLOADS")
    releases = _releases(args.course_dir)
    limits = SubmissionLimits(config=course_config(Path(args.course_dir)))
    found = lms_canvas.collect_canvas_zip(args.source, args.course_dir, releases, args.assignment, args.roster, limits)
    print(f"placed {len(found.placed)} notebooks in submitted/")
    for name, why in {**found.unplaced, **found.refused()}.items():
        print(f"NOT PLACED {name}: {why}", file=sys.stderr)
    for key, notes in found.problems.items():
        print(f"WARNING {key}: {'; '.join(notes)}", file=sys.stderr)


def _keys(args) -> None:
    if not args.roster:
        raise PagedKVError("keys needs the class: python -m pagedkv_lib.course keys --roster=ROSTER.csv "
                           "(Canvas's gradebook export, a hub roster id,role,name, or one student id per line)")
    if lms_canvas.is_gradebook_export(args.roster):
        roster = lms_canvas.read_roster(args.roster).students
        students = [s for s in dict.fromkeys(lms_canvas.student_of(r) for r in roster) if s]
    else:
        students = variant_keys.roster_students(args.roster)
    path = variant_keys.write_keys(args.course_dir, students)
    print(f"{len(students)} variant keys written to {path} (give each learner their own); the course secret they "
          f"come from is {variant_keys.SECRET_FILE}: keep it private and backed up")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "generate":
            print("generated:", ", ".join(generate(args.course_dir)))
        elif args.command == "keys":
            _keys(args)
        elif args.command == "collect":
            _collect(args)
        elif args.command == "autograde":
            print_summary(autograde(args.course_dir, timeout_s=args.timeout, workers=args.workers,
                                    trust_submissions=args.trust_submissions))
            print("results written to results/, grades to grades.csv, statuses to status.csv")
        elif args.command == "feedback":
            print(f"{len(feedback(args.course_dir))} feedback pages written to feedback/")
        elif args.command == "export":
            roster = lms_canvas.read_roster(args.roster) if args.format == "canvas" else None  # checked first
            print("grades written to", export_grades(args.course_dir))
            if roster:
                for warning in export_canvas_grades(args.course_dir, roster).warnings():
                    print("WARNING", warning, file=sys.stderr)
                print("Canvas gradebook import written to grades-canvas.csv")
        else:
            releases = _releases(args.course_dir, submitted_only=True)  # a set nobody handed in: no section
            print("report written to", report(args.course_dir, releases=releases, names=args.names))
    except (PagedKVError, FileNotFoundError) as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
