"""Each learner's variant key, made from the course secret: ``key = HMAC-SHA256(secret, "learner " + id)``.

The secret is :data:`SECRET_FILE` in the course root: 32 random bytes as hex, written (mode 0600) the
first time keys are made, git-ignored, and never copied into a release, a sandbox or a feedback page.
Without the secret, nobody can make a key, or tell whose a key is, or turn one learner's key into
another's. A course with no secret gives everyone the practice numbers (``learner/variants.py``).
"""
from __future__ import annotations

import csv
import hashlib
import hmac
import io
import os
import re
import secrets
from pathlib import Path

from ....errors import PagedKVError
from ...learner.variants import KEY_PATTERN

SECRET_FILE = "course-secret.txt"
KEYS_FILE = "keys.csv"  # student,key: what the instructor hands out (one key per learner)


def secret(root, create: bool = False) -> bytes | None:
    """The course secret, or None if there is none (then, with ``create``, a new one is written)."""
    path = Path(root) / SECRET_FILE
    if not path.exists():
        if not create:
            return None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_hex(32) + "\n")
    text = path.read_text(encoding="utf-8").strip()
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) < 16:
        raise PagedKVError(f"{path} should hold the course secret as at least 32 hex digits; it holds "
                           f"{len(text)} characters. Restore it from your backup (every key depends on it).")
    return value


def student_id(name: str) -> str:
    """A name as an nbgrader student id: lower-case letters, digits, ``_``, ``.`` and ``-`` only."""
    return re.sub(r"[^a-z0-9_.-]+", "_", name.lower()).strip("_.-")


def learner_key(course_secret: bytes, student: str) -> str:
    """The variant key of ``student`` (an nbgrader student id): 32 hex digits."""
    return hmac.new(course_secret, b"learner " + student.encode(), hashlib.sha256).hexdigest()[:32]


def key_for(root, student: str) -> str:
    """``student``'s key, or "" (the practice numbers) when the course has no secret."""
    return keys_for(root, [student])[student]


def keys_for(root, students) -> dict[str, str]:
    """``{student: key}`` for each of ``students`` (:func:`key_for`), the secret read once for them all."""
    value = secret(root)
    return {s: "" if value is None else learner_key(value, s) for s in students}


def class_students(root) -> list[str]:
    """Everyone a key may belong to: the students of ``keys.csv`` and of ``submitted/``."""
    root, found = Path(root), []
    if (root / KEYS_FILE).exists():
        with open(root / KEYS_FILE, newline="", encoding="utf-8") as f:
            found += [row["student"] for row in csv.DictReader(f) if row.get("student")]
    if (root / "submitted").is_dir():
        found += sorted(p.name for p in (root / "submitted").iterdir() if p.is_dir())
    return list(dict.fromkeys(found))


def roster_students(path) -> list[str]:
    """Student ids from a hub roster (``id,role,...``: learners only) or a file of one id per line.
    (A Canvas gradebook export is read by ``canvas.read_roster``.)"""
    text = Path(path).read_text(encoding="utf-8-sig")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    head = [c.strip().lower() for c in rows[0]] if rows else []
    if "id" in head:
        col, role = head.index("id"), head.index("role") if "role" in head else None
        rows = [[r[col]] for r in rows[1:] if role is None or r[role].strip() == "learner"]
    found = [s for s in dict.fromkeys(student_id(r[0]) for r in rows) if s]
    if not found:
        raise PagedKVError(f"roster {path} names no student: give a hub roster (id,role,name), one id per line, "
                           "or Canvas's gradebook export")
    return found


_PASTED = re.compile(r"""^VARIANT_KEY\s*=\s*["']([^"']*)["']""", re.MULTILINE)


def pasted_key(nb: dict) -> str | None:
    """The key pasted into a notebook's ``VARIANT_KEY = "..."`` line (the first one), or None if none."""
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        found = _PASTED.search(source if isinstance(source, str) else "".join(source))
        if cell.get("cell_type") == "code" and found:
            return found.group(1).strip().lower()
    return None


def key_problem(root, student: str, nb: dict) -> str | None:
    """What is wrong with the key in ``student``'s notebook, or None: it is theirs, or the course has
    no keys. The notebook is graded on ``student``'s own numbers either way."""
    value = secret(root)
    pasted = pasted_key(nb)
    if value is None or not pasted:
        return None  # no keys in this course; or none pasted (a hub, or the practice numbers)
    if not KEY_PATTERN.fullmatch(pasted):
        return f"variant key mismatch: the notebook's VARIANT_KEY ({pasted[:12]!r}) is not a key"
    if hmac.compare_digest(pasted.encode(), learner_key(value, student).encode()):
        return None
    whose = next((s for s in class_students(root) if s != student
                  and hmac.compare_digest(learner_key(value, s).encode(), pasted.encode())), None)
    return (f"variant key mismatch: the notebook holds {whose}'s key, not {student}'s" if whose else
            f"variant key mismatch: the notebook's key {pasted[:8]}... is no student's in this class")


def write_keys(root, students: list[str]) -> Path:
    """Write ``keys.csv`` (student, key) for ``students``, making the course secret if there is none."""
    value = secret(root, create=True)
    path = Path(root) / KEYS_FILE
    path.unlink(missing_ok=True)  # made afresh, private from its first byte
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["student", "key"])
        writer.writerows([s, learner_key(value, s)] for s in students)
    return path
