"""Put a class's downloaded notebooks where nbgrader expects them: ``submitted/<student>/<assignment>/``.

Accepted names, from a folder or a zip: ``<student>.ipynb`` (when there is one assignment, or one is
given), ``<student>_<assignment>.ipynb`` or ``<assignment>_<student>.ipynb``, and any notebook inside a
student folder (``alice/ps2_math (1).ipynb``, ``alice/Copy of ps2_math.ipynb``). Each notebook is cleaned
on the way in (see ``notebook_cleaning.py``), within the bounds of ``submission_bounds.py``; whatever
cannot be placed or read is listed, by file and reason, and nothing in one file stops the others. Only
regular files are read: a symbolic link is never followed (a link named for a student makes that
student's status ``unreadable``, saying so).
"""
from __future__ import annotations

import json
import re
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..course_layout import COLLECT_LOG, SUBMITTED
from .notebook_cleaning import missing_note, normalise, parse_notebook
from .submission_bounds import Malformed, SubmissionLimits, Unreadable, read_bounded
from .variant_keys import key_problem, student_id

VERDICTS = {"unreadable": "unreadable", "malformed": "malformed", "failed": "grader error"}
"""The lists of notebooks collect could not take (fields of :class:`Collected`, keys of ``collect.json``),
and the status autograde gives each."""

_COPY = re.compile(r"^(copy of\s+)+|(\s*\(\d+\)|\s*-\s*copy)+$", re.IGNORECASE)


@dataclass
class Collected:
    """What collect did: files placed, files it could not place (with why), and notebooks it could not take
    (unreadable, malformed: outside the bounds, or failed: the grader's own error on it; each graded 0)."""

    placed: dict = field(default_factory=dict)      # "student/assignment" -> source file
    unplaced: dict = field(default_factory=dict)    # source file -> reason
    unreadable: dict = field(default_factory=dict)  # "student/assignment" -> reason (graded 0)
    malformed: dict = field(default_factory=dict)   # "student/assignment" -> reason (graded 0)
    failed: dict = field(default_factory=dict)      # "student/assignment" -> the grader's error (graded 0)
    problems: dict = field(default_factory=dict)    # "student/assignment" -> [messages]

    def refused(self) -> dict[str, str]:
        """``{student/assignment: why}`` of every notebook collect could not take (each of :data:`VERDICTS`)."""
        return {key: why for kind in VERDICTS for key, why in getattr(self, kind).items()}

    def taken(self) -> set[str]:
        """Every ``student/assignment`` collect has a notebook or a verdict for."""
        return {*self.placed, *self.refused()}


def _stem(name: str) -> str:
    return _COPY.sub("", Path(name).stem).strip()


def place(rel: Path, assignments: list[str], default: str | None) -> tuple[str, str]:
    """(student, assignment) for a notebook at ``rel`` inside the collection; ValueError says why not."""
    stem = _stem(rel.name).lower().replace(" ", "_")
    named = [a for a in assignments if a.lower() in stem]
    assignment = named[0] if len(named) == 1 else default
    if assignment is None:
        raise ValueError(f"cannot tell the assignment from the name (known: {', '.join(assignments)}; "
                         "pass --assignment)")
    rest = student_id(stem.replace(assignment.lower(), "") if named else stem)
    # a notebook named after the assignment belongs to the folder it sits in (alice/ps2_math (1).ipynb)
    student = rest or (student_id(rel.parts[-2]) if len(rel.parts) > 1 else "")
    if not student:
        raise ValueError("the file name holds no student name (put it in a folder named by the student)")
    return student, assignment


def _files(source: Path, scratch: Path, max_bytes: int, found: Collected) -> tuple[Path, list[Path]]:
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as z:
            for member in z.infolist():
                if member.file_size > max_bytes:  # said, never unpacked
                    found.unplaced[member.filename] = f"{member.file_size:,} bytes unpacked; at most {max_bytes:,}"
                else:
                    z.extract(member, scratch)
        source = scratch
    if not source.is_dir():
        raise FileNotFoundError(f"collect: {source} is neither a folder nor a zip file")
    skip = ("__MACOSX", ".ipynb_checkpoints")
    files = [p for p in sorted(source.rglob("*")) if (p.is_symlink() or not p.is_dir())  # FIFOs too: said, not read
             and not any(part in skip or part.startswith(".") for part in p.relative_to(source).parts)]
    for link in [p for p in files if p.is_symlink() and p.suffix != ".ipynb"]:  # a notebook's link: its student's status
        found.unplaced[str(link.relative_to(source))] = "a symbolic link: never followed"
    return source, [p for p in files if not (p.is_symlink() and p.suffix != ".ipynb")]


def collect_notebooks(source, course_dir=".", releases: dict | None = None, default: str | None = None,
                      where=place, limits: SubmissionLimits | None = None) -> Collected:
    """Place and clean every notebook under ``source`` (a folder or a zip) into ``submitted/``.

    ``releases`` maps each assignment name to its released notebook (a JSON dict); with one assignment
    it is the default for bare ``<student>.ipynb`` names. ``where`` places a file as :func:`place` does
    (``lms_canvas.collect_canvas_zip`` passes Canvas's). Writes ``collect.json`` beside ``submitted/``.
    """
    root, found, limits = Path(course_dir), Collected(), limits or SubmissionLimits()
    names = sorted(releases)
    default = default or (names[0] if len(names) == 1 else None)
    with tempfile.TemporaryDirectory() as scratch:
        base, files = _files(Path(source), Path(scratch), limits.file_bytes, found)
        for path in files:
            rel = path.relative_to(base)
            if path.suffix != ".ipynb":
                found.unplaced[str(rel)] = "not a notebook (.ipynb)"
                continue
            try:
                student, assignment = where(rel, names, default)
            except ValueError as err:
                found.unplaced[str(rel)] = str(err)
                continue
            key = f"{student}/{assignment}"
            if key in found.taken():
                found.unplaced[str(rel)] = f"a second notebook for {key}; kept the first"
                continue
            try:
                _store(root, path, rel, student, assignment, releases[assignment], found, limits)
            except Exception as err:  # noqa: BLE001 (the grader's own failure on this file: its verdict, not the class's)
                found.failed[key] = f"{rel}: the grader failed on it ({type(err).__name__}: {str(err)[:200]})"
    (root / COLLECT_LOG).write_text(json.dumps(asdict(found), indent=1), encoding="utf-8")
    return found


def _store(root: Path, path: Path, rel: Path, student: str, assignment: str, release: dict,
           found: Collected, limits: SubmissionLimits) -> None:
    key = f"{student}/{assignment}"
    try:
        norm = normalise(read_bounded(path, limits, str(rel)), release, str(rel), limits)
    except Unreadable as err:
        found.unreadable[key] = str(err)
        return
    except Malformed as err:
        found.malformed[key] = str(err)
        return
    dst = root / SUBMITTED / student / assignment / f"{assignment}.ipynb"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(norm.nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    found.placed[key] = str(rel)
    notes = [f"nbgrader metadata put back on {', '.join(norm.reattached)}"] if norm.reattached else []
    if norm.missing:
        notes.append(missing_note(norm.missing))
    mismatch = key_problem(root, student, norm.nb)
    if mismatch:
        notes.append(mismatch)
    if notes:
        found.problems[key] = notes


def release_notebooks(release_dir: Path) -> dict:
    """``{assignment: released notebook}`` for every ``<assignment>/<assignment>.ipynb`` in ``release_dir``."""
    out = {}
    for nb in sorted(Path(release_dir).glob("*/*.ipynb")):
        if nb.stem == nb.parent.name:
            out[nb.parent.name] = parse_notebook(nb.read_text(encoding="utf-8"), str(nb))
    return out
