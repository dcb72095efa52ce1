"""Other copies of the course on this machine that every user can read: ``make hub`` closes only its own checkout.

A clone left world-readable elsewhere (the one this checkout was cloned from, a copy in ``/opt``) still serves
``solutions/`` to every learner, so ``accounts.py create`` looks for such copies and warns, naming each.
"""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _others_can_read(folder: Path) -> bool:
    """Whether a user with none of the owner's or group's rights can list ``folder`` (every folder above searchable)."""
    real = Path(os.path.realpath(folder))
    try:
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in real.parents) and \
            os.stat(real).st_mode & (stat.S_IROTH | stat.S_IXOTH) == (stat.S_IROTH | stat.S_IXOTH)
    except OSError:
        return False


def local_origin() -> tuple[Path, ...]:
    """The clone this checkout was made from, when its git ``origin`` is a local path (else none)."""
    origin = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    return (Path(origin.removeprefix("file://")),) if origin.startswith(("/", "file://")) else ()


def other_checkouts(roots=("/",), depth: int = 4, skip: tuple = (), also: tuple = ()) -> list[Path]:
    """Other copies of the course (a folder holding ``solutions/`` and ``pagedkv_lib/``) whose ``solutions/``
    every user can read: found up to ``depth`` folders below each of ``roots``, plus the folders ``also``
    (``make hub`` passes :func:`local_origin`). ``make hub`` closes only this checkout, so it warns of these."""
    mine = {Path(os.path.realpath(p)) for p in (REPO, *skip)}
    found = set()
    candidates = list(also)
    for root in roots:
        base = len(Path(root).parts)
        for folder, dirs, _ in os.walk(root, onerror=lambda err: None):
            here = Path(folder)
            dirs[:] = [] if len(here.parts) - base >= depth else [
                d for d in dirs if d not in ("proc", "sys", "dev", "run", ".git", "node_modules", ".venv")]
            if "solutions" in dirs and "pagedkv_lib" in dirs:
                candidates.append(here)
    for where in candidates:
        real = Path(os.path.realpath(where))
        if real not in mine and (real / "solutions").is_dir() and _others_can_read(real / "solutions"):
            found.add(real)
    return sorted(found)
