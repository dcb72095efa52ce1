"""Canvas in and out: its gradebook export as the roster, its "Download Submissions" names, its import CSV.

Formats, as Canvas's own code writes and reads them (instructure/canvas-lms; the Instructure Community
guides "How do I export/import grades in the Gradebook?" describe the same files for instructors):

- **Gradebook export** (``lib/gradebook_exporter.rb``): a header ``Student, ID, [SIS User ID], SIS Login
  ID, [Integration ID], [Root Account], Section``, then custom columns, then one column per assignment
  titled ``<title> (<assignment id>)``, then read-only totals (``Current Score`` ...). Below the header an
  optional row of ``Manual Posting`` marks, then a row whose first cell is ``"    Points Possible"``, then
  one row per student; ``ID`` is the Canvas user id. The test student ("Student, Test") comes last.
- **Gradebook import** (``lib/gradebook_importer.rb``): the header must start ``Student, ID`` and the
  student columns end with ``Section``; a student is found by ``ID``, else ``SIS User ID``, else ``SIS
  Login ID``, else name; an assignment by the id in its header, else by title (a new title makes a new
  assignment); a ``Points Possible`` row sets points possible; a blank score changes nothing.
- **Download Submissions** (``lib/content_zipper.rb``, ``get_filename`` and ``add_upload_submission``):
  each uploaded file is ``<sortable name, lower-cased, non-word characters removed>[_LATE]_<user id>_
  <attachment id>_<file's display name>``. The third field is the attachment (file) id, often called the
  submission id. Canvas renames a re-uploaded file of the same name ``ps2_math-1.ipynb``; only the latest
  submission's files are in the zip. Older Canvas wrote ``doe-jane-late_<user id>``; third-party tools
  observe ``_late_`` in lower case; both are accepted. Anonymous grading writes ``anon_<id>`` instead of
  the name and user id, which no roster can match.

Pure functions on files: nothing here runs nbgrader.
"""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...errors import PagedKVError
from . import intake
from .keys import student_id

#: Canvas's student columns, in the order its export writes them (the import needs Student, ID first
#: and Section last).
IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Integration ID", "Root Account", "Section")
#: Where the ids may start in a member name (a lookahead, so that every candidate position is seen).
_IDS = re.compile(r"(?=[_-](?:(?P<late>late)_)?(?P<user>\d+)_(?P<file>\d+)_(?P<original>.+)$)", re.IGNORECASE)
_LATE = re.compile(r"[_-]late_\d+_\d+_", re.IGNORECASE)
ANONYMOUS = re.compile(r"^(?:late_)?anon_[a-z0-9]+_\d+_.+$", re.IGNORECASE)
_ASSIGNMENT_ID = re.compile(r"\s*\((\d+)\)\s*$")


@dataclass
class Roster:
    """A Canvas gradebook export: its header, the Points Possible row and one dict per student row."""

    header: list[str]
    points: dict[str, str]
    students: list[dict]
    path: str = ""

    @property
    def identity(self) -> list[str]:
        """The roster's own student columns, in its order."""
        return [c for c in self.header if c in IDENTITY]

    def by_user_id(self) -> dict[str, dict]:
        return {row["ID"]: row for row in self.students if row.get("ID")}


def is_gradebook_export(path) -> bool:
    """True if the CSV at ``path`` starts as Canvas's gradebook export does (``Student,ID``)."""
    first = Path(path).read_text(encoding="utf-8-sig").split("\n", 1)[0].replace(";", ",")
    return [c.strip().strip('"') for c in first.split(",")[:2]] == ["Student", "ID"]


def read_roster(path) -> Roster:
    """Read a Canvas gradebook export (``,`` or ``;`` separated, with or without a byte-order mark)."""
    if not path:
        raise PagedKVError("ROSTER is needed: Canvas's gradebook export CSV (Canvas: Grades > Export > Export "
                           "Entire Gradebook), e.g. make export FORMAT=canvas ROSTER=gradebook.csv")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise FileNotFoundError(f"ROSTER {path} does not exist (give the CSV from Canvas: Grades > Export)") from None
    first = text.split("\n", 1)[0]
    rows = list(csv.reader(io.StringIO(text), delimiter=";" if first.count(";") > first.count(",") else ","))
    if not rows or len(rows[0]) < 3 or "Student" not in rows[0][0] or rows[0][1].strip() != "ID" \
            or "Section" not in rows[0]:
        raise PagedKVError(f"ROSTER {path} is not a Canvas gradebook export: its header must start "
                           f"'Student,ID' and hold 'Section' (got {rows[0][:6] if rows else 'an empty file'})")
    header = [h.strip() for h in rows[0]]
    points, students = {}, []
    for row in rows[1:]:
        cells = dict(zip(header, (c.strip() for c in row)))
        if "Points Possible" in (row[0] if row else ""):
            points = cells
        elif cells.get("ID", "").isdigit():  # skips the Manual Posting row and blank lines
            students.append(cells)
    return Roster(header, points, students, str(path))


def student_of(row: dict) -> str:
    """The nbgrader student id of a roster row: its SIS Login ID, else its SIS User ID ("" if neither)."""
    return student_id(row.get("SIS Login ID") or row.get("SIS User ID") or "")


def _keys(row: dict) -> set[str]:
    ids = [row.get("SIS Login ID", ""), row.get("SIS User ID", "")]
    return {k for i in ids if i for k in (student_id(i), i.lower())}


def _words(text: str) -> str:
    return "_" + re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") + "_"


def assignment_columns(roster: Roster, assignments: list[str]) -> tuple[dict, list[str]]:
    """``({assignment: roster column}, [assignments with no column])``: a column is an assignment's when
    the assignment's name appears, as whole words, in the column's title (``ps2_math (12345)``,
    ``PS2 math (12345)``, ``Problem set 2: ps2_math (12345)``). Two columns for one name is an error."""
    titled = [c for c in roster.header if _ASSIGNMENT_ID.search(c)]
    found, missing = {}, []
    for name in assignments:
        hits = [c for c in titled if _words(name) in _words(_ASSIGNMENT_ID.sub("", c))]
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


def export(course_dir, roster: Roster, grades_csv: str = "grades.csv", to: str = "grades-canvas.csv") -> CanvasGrades:
    """Write ``<to>``: ``grades_csv`` (nbgrader's export, with status) as a Canvas gradebook import."""
    root = Path(course_dir)
    grades = list(csv.DictReader((root / grades_csv).open(encoding="utf-8")))
    names = sorted({g["assignment"] for g in grades})
    result = import_rows(grades, roster, names)
    write_import(root / to, result.rows)
    return result


def parse(member: str, users=frozenset()) -> dict | None:
    """``{name, late, user, file, original}`` of a Download Submissions member name, or None.

    A name may end in ``_<digits>`` and a file name may hold ``_<digits>_`` too, so the split is not
    always unique: the first one whose user id is in ``users`` (the roster's) wins, else the first.
    """
    if "/" in member:
        return None
    found = [dict(m.groupdict(), name=member[:m.start()]) for m in _IDS.finditer(member) if m.start() > 0]
    return next((f for f in found if f["user"] in users), found[0] if found else None)


def is_download(members: list[str]) -> bool:
    """Whether a zip's (or folder's) member names are Canvas's "Download Submissions" names: any notebook
    at the top level named ``<name>_<user id>_<attachment id>_<file>``."""
    return any(m.endswith(".ipynb") and (parse(m) or ANONYMOUS.match(m)) for m in members)


def _assignment(original: str, assignments: list[str], default: str | None) -> str | None:
    named = [a for a in assignments if _words(a) in _words(Path(original).stem)]
    return named[0] if len(named) == 1 else default


def placements(members: list[str], roster: Roster, assignments: list[str], default: str | None) -> dict:
    """``{member: (student, assignment) or the reason it cannot be placed}`` for a Canvas download.

    The student is the roster row of the member's Canvas user id, by its SIS Login ID (else SIS User ID).
    Where one student's submission holds several notebooks for one assignment, the newest (highest
    attachment id) is kept and the others say so.
    """
    users, out, newest = roster.by_user_id(), {}, {}
    for m in members:
        if not m.endswith(".ipynb"):
            continue
        match = parse(m, users)
        row = users.get(match["user"]) if match else None
        if row is None and "/" not in m and ANONYMOUS.match(m):
            out[m] = "anonymous grading hides who submitted: turn it off in Canvas and download again"
            continue
        if not match:
            out[m] = "not named as Canvas names submissions (<name>_<user id>_<file id>_<file>)"
            continue
        assignment = _assignment(match["original"], assignments, default)
        if row is None:
            out[m] = f"Canvas user {match['user']} ({match['name']}) is not in ROSTER {roster.path}"
        elif not student_of(row):
            out[m] = f"the roster row of Canvas user {match['user']} has no SIS Login ID or SIS User ID"
        elif assignment is None:
            out[m] = (f"cannot tell the assignment from {match['original']!r} (known: {', '.join(assignments)}; "
                      "pass --assignment)")
        else:
            out[m] = (student_of(row), assignment)
            key, fid = out[m], int(match["file"])
            if key not in newest or fid > newest[key][0]:
                newest[key] = (fid, m)
    for m, where in out.items():
        if isinstance(where, tuple) and newest[where][1] != m:
            out[m] = f"an older file of {where[0]}'s Canvas submission for {where[1]}; kept {newest[where][1]}"
    return out


def placer(members: list[str], roster_path, assignments: list[str], default: str | None):
    """For a Canvas download, a function like :func:`intake.place` that places its members; else None."""
    if not is_download(members):
        return None
    if not roster_path:
        raise PagedKVError("this is Canvas's \"Download Submissions\" zip (names like doejane_12345_67890_"
                           "ps2_math.ipynb): give the roster that maps Canvas user ids to students, "
                           "make collect FROM=submissions.zip ROSTER=<Canvas gradebook export>.csv")
    where = placements(members, read_roster(roster_path), assignments, default)

    def place(rel, _assignments=None, _default=None):
        found = where.get(Path(rel).as_posix(), "not a Canvas submission file")
        if isinstance(found, str):
            raise ValueError(found)
        return found
    return place


def _members(source: Path) -> list[str]:
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as z:
            return [n for n in z.namelist() if not n.endswith("/")]
    return [p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()] if source.is_dir() else []


def collect(source, course_dir=".", releases: dict | None = None, default: str | None = None, roster=None):
    """:func:`intake.collect`, placing a Canvas "Download Submissions" zip (or its unpacked folder) through
    ``roster``; any other collection as ``intake.collect`` does."""
    names = sorted(releases or {})
    default = default or (names[0] if len(names) == 1 else None)
    where = placer(_members(Path(source)), roster, names, default)
    found = intake.collect(source, course_dir, releases, default, where or intake.place)
    late = [key for key, member in found.placed.items() if where and _LATE.search(member)]
    for key in late:  # into collect.json, whose notes autograde puts in the student's status details
        found.problems.setdefault(key, []).append("handed in late (Canvas marked the file LATE)")
    if late:
        (Path(course_dir) / intake.COLLECT_LOG).write_text(json.dumps(asdict(found), indent=1), encoding="utf-8")
    return found
