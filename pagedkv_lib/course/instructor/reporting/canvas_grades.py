"""Canvas out: nbgrader's ``grades.csv`` as the CSV Canvas's gradebook import reads.

The import's format, as Canvas's own code reads it (``lib/gradebook_importer.rb``; see
``intake/lms_canvas.py`` for the export it starts from): the header must start ``Student, ID`` and the
student columns end with ``Section``; a student is found by ``ID``, else ``SIS User ID``, else ``SIS Login
ID``, else name; an assignment by the id in its header, else by title; a ``Points Possible`` row sets
points possible; a blank score changes nothing.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from ....errors import PagedKVError
from ..course_layout import GRADES_CSV
from ..intake.lms_canvas import ASSIGNMENT_ID, Roster, title_words
from ..intake.variant_keys import student_id


def _keys(row: dict) -> set[str]:
    ids = [row.get("SIS Login ID", ""), row.get("SIS User ID", "")]
    return {k for i in ids if i for k in (student_id(i), i.lower())}


def assignment_columns(roster: Roster, assignments: list[str]) -> tuple[dict, list[str]]:
    """``({assignment: roster column}, [assignments with no column])``: a column is an assignment's when
    the assignment's name appears, as whole words, in the column's title (``ps2_math (12345)``,
    ``PS2 math (12345)``, ``Problem set 2: ps2_math (12345)``). Two columns for one name is an error."""
    titled = [c for c in roster.header if ASSIGNMENT_ID.search(c)]
    found, missing = {}, []
    for name in assignments:
        hits = [c for c in titled if title_words(name) in title_words(ASSIGNMENT_ID.sub("", c))]
        if len(hits) > 1:
            raise PagedKVError(f"ROSTER {roster.path}: assignment {name!r} matches {len(hits)} columns {hits}; "
                               "rename one in Canvas so that only one title holds it")
        if hits:
            found[name] = hits[0]
        else:
            missing.append(name)
    return found, missing


@dataclass
class CanvasGrades:
    """What :func:`import_rows` made: the CSV rows and everything it could not match, for the instructor."""

    rows: list[list[str]]
    columns: dict                                           # assignment -> roster column
    no_column: list[str] = field(default_factory=list)      # our assignments with no roster column
    not_in_roster: list[str] = field(default_factory=list)  # graded students no roster row matches
    no_grades: list[str] = field(default_factory=list)      # roster students with no grade row
    not_submitted: int = 0                                  # grade rows left blank (nothing handed in)
    points_differ: list[str] = field(default_factory=list)  # assignments whose max score != Canvas's points

    def warnings(self) -> list[str]:
        out = [f"no Canvas column for {a} (its title must contain the name; see ROSTER)" for a in self.no_column]
        out += [f"graded student {s!r} is not in the roster (no SIS Login ID or SIS User ID matches); "
                "their grades are NOT in the Canvas file" for s in self.not_in_roster]
        out += [f"roster student {s} has no grades here; their cells are blank (Canvas keeps what it has)"
                for s in self.no_grades]
        out += self.points_differ
        if self.not_submitted:
            out.append(f"{self.not_submitted} grade rows are 'not submitted': left blank, not 0")
        return out


def _score(text: str) -> str:
    return f"{float(text):.2f}"


def import_rows(grades: list[dict], roster: Roster, assignments: list[str]) -> CanvasGrades:
    """Canvas import rows from nbgrader's ``grades.csv`` rows (with ``status``) and the roster.

    Every roster student keeps a row with Canvas's identity columns; a score goes under the assignment's
    roster column, with two decimals as Canvas exports them. The Points Possible row is the roster's own
    (writing other points would change the assignment in Canvas).
    """
    columns, no_column = assignment_columns(roster, assignments)
    out = CanvasGrades([], columns, no_column)
    keys = {}
    for row in roster.students:
        for k in _keys(row):
            keys.setdefault(k, row["ID"])
    scores: dict[str, dict] = {}
    for g in grades:
        column = columns.get(g["assignment"])
        if column is None:
            continue
        uid = keys.get(g["student_id"]) or keys.get(g["student_id"].lower())
        if uid is None:
            if g["student_id"] not in out.not_in_roster:
                out.not_in_roster.append(g["student_id"])
            continue
        if g.get("status") == "not submitted":
            out.not_submitted += 1
            continue
        scores.setdefault(uid, {})[column] = _score(g["score"])
        canvas_points = roster.points.get(column, "")
        if g.get("max_score") and canvas_points and abs(float(g["max_score"]) - float(canvas_points)) > 1e-9:
            note = (f"{g['assignment']}: nbgrader's maximum is {float(g['max_score']):g} points, Canvas's "
                    f"'{column}' has {canvas_points}; scores are written as points, unscaled")
            if note not in out.points_differ:
                out.points_differ.append(note)
    identity, cols = roster.identity, list(columns.values())
    out.rows.append(identity + cols)
    out.rows.append(["    Points Possible"] + [""] * (len(identity) - 1) + [roster.points.get(c, "") for c in cols])
    for row in roster.students:
        mine = scores.get(row["ID"], {})
        if not mine and cols:
            out.no_grades.append(f"{row.get('Student', '')} (ID {row['ID']}, login {row.get('SIS Login ID') or '-'})")
        out.rows.append([row.get(c, "") for c in identity] + [mine.get(c, "") for c in cols])
    return out


def write_import(path, rows: list[list[str]]) -> Path:
    """Write the rows as the CSV Canvas's gradebook import reads (UTF-8, comma separated)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def export_canvas_grades(course_dir, roster: Roster, grades_csv: str = GRADES_CSV, to: str = "grades-canvas.csv") -> CanvasGrades:
    """Write ``<to>``: ``grades_csv`` (nbgrader's export, with status) as a Canvas gradebook import."""
    root = Path(course_dir)
    grades = list(csv.DictReader((root / grades_csv).open(encoding="utf-8")))
    names = sorted({g["assignment"] for g in grades})
    result = import_rows(grades, roster, names)
    write_import(root / to, result.rows)
    return result
