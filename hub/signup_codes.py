"""One sign-up code per roster id: what a learner (or instructor) must type to claim their account.

A roster id is no secret (classmates know each other's), so sign-up asks also for a code only that
person was given: ``HMAC-SHA256(hub secret, id)``, cut to 12 characters. The hub secret lives in the hub's
state folder (mode 0600, root's), made on the first start. At each start the hub writes every code to
``signup-codes.csv`` there (0600: ``id,role,name,code``), for the operator to hand out through the
learning platform (one message per learner), and prints the instructors' codes to the operator's terminal.
A code is used once in effect: the name it claims is then taken.
"""
from __future__ import annotations

import csv
import hashlib
import hmac
import os
import secrets
from pathlib import Path

CODE_CHARS = 12


def hub_secret(state: Path) -> bytes:
    """The hub's sign-up secret from ``state/signup-secret``, made (0600) on the first call."""
    path = Path(state) / "signup-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def code_for(secret: bytes, user: str) -> str:
    """The sign-up code of ``user`` (lower-case letters and digits, :data:`CODE_CHARS` long)."""
    return hmac.new(secret, user.encode(), hashlib.sha256).hexdigest()[:CODE_CHARS]


def matches(secret: bytes, user: str, code: str) -> bool:
    """Whether ``code`` is ``user``'s (compared in constant time)."""
    return hmac.compare_digest(code_for(secret, user), (code or "").strip().lower())


def export(secret: bytes, members, out: Path) -> Path:
    """Write ``id,role,name,code`` for every roster member to ``out`` (0600); return it."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "role", "name", "code"])
        for m in members:
            w.writerow([m.id, m.role, m.name, code_for(secret, m.id)])
    os.chmod(out, 0o600)
    return out
