"""Canvas in: its gradebook export as the roster, and its "Download Submissions" names (its import CSV,
for grades out, is ``reporting/canvas_grades.py``).

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
from dataclasses import asdict, dataclass
from pathlib import Path

from ....errors import PagedKVError
from ..course_layout import COLLECT_LOG
from .collect_notebooks import collect_notebooks, place
from .variant_keys import student_id

#: Canvas's student columns, in the order its export writes them (the import needs Student, ID first
#: and Section last).
IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Integration ID", "Root Account", "Section")
#: Where the ids may start in a member name (a lookahead, so that every candidate position is seen).
_IDS = re.compile(r"(?=[_-](?:(?P<late>late)_)?(?P<user>\d+)_(?P<file>\d+)_(?P<original>.+)$)", re.IGNORECASE)
_LATE = re.compile(r"[_-]late_\d+_\d+_", re.IGNORECASE)
ANONYMOUS = re.compile(r"^(?:late_)?anon_[a-z0-9]+_\d+_.+$", re.IGNORECASE)
ASSIGNMENT_ID = re.compile(r"\s*\((\d+)\)\s*$")


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


def title_words(text: str) -> str:
    """``text`` as lower-case words joined and framed by ``_`` (so ``in`` matches whole words)."""
    return "_" + re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") + "_"


def parse_download_name(member: str, users=frozenset()) -> dict | None:
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
    return any(m.endswith(".ipynb") and (parse_download_name(m) or ANONYMOUS.match(m)) for m in members)


def _assignment(original: str, assignments: list[str], default: str | None) -> str | None:
    named = [a for a in assignments if title_words(a) in title_words(Path(original).stem)]
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
        match = parse_download_name(m, users)
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
    """For a Canvas download, a function like :func:`collect_notebooks.place` that places its members; else None."""
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


def collect_canvas_zip(source, course_dir=".", releases: dict | None = None, default: str | None = None, roster=None,
                       limits=None):
    """:func:`collect_notebooks.collect_notebooks`, placing a Canvas "Download Submissions" zip (or its
    unpacked folder) through ``roster``; any other collection as ``collect_notebooks`` does."""
    names = sorted(releases or {})
    default = default or (names[0] if len(names) == 1 else None)
    where = placer(_members(Path(source)), roster, names, default)
    found = collect_notebooks(source, course_dir, releases, default, where or place, limits)
    late = [key for key, member in found.placed.items() if where and _LATE.search(member)]
    for key in late:  # into collect.json, whose notes autograde puts in the student's status details
        found.problems.setdefault(key, []).append("handed in late (Canvas marked the file LATE)")
    if late:
        (Path(course_dir) / COLLECT_LOG).write_text(json.dumps(asdict(found), indent=1), encoding="utf-8")
    return found
