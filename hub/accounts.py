"""The class's accounts on one server: a real system user per roster row, run as root by ``make hub``.

``python hub/accounts.py create`` reads the roster (``id,role,name``; role is ``instructor`` or
``learner``) and, for each row that has no system user yet, creates one with its own group and a
private home (0700). Learners get a copy of the lessons in ``~/lessons``; the instructor gets the
course repository in ``--course`` (default ``~/pagedkv``), owned by them: it is their nbgrader course
directory, with ``.venv`` pointing at this checkout's venv so ``make autograde`` and the rest work there.
The exchange root is created world-writable with the sticky bit (nbgrader's file exchange).
``python hub/accounts.py remove`` deletes the roster's users and their homes (the tests' clean-up).
Existing users and folders are left as they are, so running it again is safe.
"""
from __future__ import annotations

import argparse
import csv
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROLES = ("instructor", "learner")


@dataclass(frozen=True)
class Member:
    """One roster row: ``id`` is the system and hub user name."""
    id: str
    role: str
    name: str


def read_roster(path) -> list[Member]:
    """The roster's rows; a clear error for a missing column, an unknown role or a bad or repeated id."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    members, seen = [], set()
    for line, row in enumerate(rows, start=2):
        missing = [k for k in ("id", "role", "name") if not (row.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{path} line {line}: no {', '.join(missing)} (columns: id,role,name)")
        m = Member(row["id"].strip(), row["role"].strip().lower(), row["name"].strip())
        if m.role not in ROLES:
            raise ValueError(f"{path} line {line}: role must be one of {ROLES}, got {m.role!r}")
        if not m.id.replace("-", "").replace("_", "").isalnum() or not m.id[0].isalpha() or m.id != m.id.lower():
            raise ValueError(f"{path} line {line}: id must be a lower-case system user name "
                             f"(letters, digits, - and _, starting with a letter), got {m.id!r}")
        if m.id in seen:
            raise ValueError(f"{path} line {line}: id {m.id!r} appears twice")
        seen.add(m.id)
        members.append(m)
    if not any(m.role == "instructor" for m in members):
        raise ValueError(f"{path}: no row with role instructor")
    return members


def exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def copy_tree(files: list[str], src: Path, dest: Path) -> None:
    """Copy ``files`` (paths relative to ``src``) keeping their times (so make sees the venv as up to date)."""
    for name in files:
        if (src / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)


def course_files() -> list[str]:
    """What a clone of the course holds (tracked files plus untracked ones git does not ignore)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout.decode()
    return [n for n in out.split("\0") if n]


def chown_tree(path: Path, user: str) -> None:
    subprocess.run(["chown", "-R", "--no-dereference", f"{user}:{user}", str(path)], check=True)


def create(members: list[Member], exchange: Path, home_root: Path | None, course: Path | None) -> None:
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o1777)   # every user writes here; the sticky bit keeps others' folders from being renamed
    files = course_files()
    for m in members:
        if not exists(m.id):
            home = ["--home-dir", str(home_root / m.id)] if home_root else []
            subprocess.run(["useradd", "--create-home", *home, "--user-group", "--shell", "/bin/bash",
                            "--comment", m.name, m.id], check=True)
        home = Path(pwd.getpwnam(m.id).pw_dir)
        home.chmod(0o700)
        if m.role == "learner" and not (home / "lessons").exists():
            copy_tree([f for f in files if f.startswith("notebooks/")], REPO, home / "lessons.tmp")
            (home / "lessons.tmp" / "notebooks").rename(home / "lessons")
            (home / "lessons.tmp").rmdir()
            chown_tree(home / "lessons", m.id)
        if m.role == "instructor":
            where = course or home / "pagedkv"
            if not where.exists():
                copy_tree(files, REPO, where)
                (where / ".venv").symlink_to(REPO / ".venv")
                chown_tree(where, m.id)
            where.chmod(0o700)


def check_venv_readable(members: list[Member]) -> None:
    """Learners' kernels run this checkout's venv: fail early, naming the fix, if a learner cannot import the course."""
    learner = next((m.id for m in members if m.role == "learner"), None)
    if learner is None:
        return
    python = REPO / ".venv" / "bin" / "python"
    proc = subprocess.run(["runuser", "-u", learner, "--", str(python), "-c", "import pagedkv_lib, nbgrader"],
                          cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"user {learner} cannot run {python} and import the course: every folder above "
                         f"{REPO} must be readable and searchable by others (chmod o+rx):\n{proc.stderr[-1500:]}")


def remove(members: list[Member]) -> None:
    """Delete each roster user with their home and mail spool (stop the hub first); absent users are skipped.

    Raises naming every user it could not remove (userdel refuses while a user has processes)."""
    failed = []
    for m in members:
        if exists(m.id):
            proc = subprocess.run(["userdel", "--remove", m.id], capture_output=True, text=True)
            if exists(m.id):
                failed.append(f"{m.id}: {proc.stderr.strip()}")
    if failed:
        raise RuntimeError("could not remove " + "; ".join(failed))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="hub/accounts.py", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["create", "remove"])
    p.add_argument("--roster", default=str(REPO / "hub" / "roster.csv"), help="id,role,name (default hub/roster.csv)")
    p.add_argument("--exchange", default="/srv/nbgrader/exchange", help="nbgrader's exchange root")
    p.add_argument("--homes", default=None, help="create homes under this folder (default: useradd's, /home)")
    p.add_argument("--course", default=None, help="the instructor's course directory (default ~/pagedkv)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("hub/accounts.py creates system users: run it (and make hub) as root", file=sys.stderr)
        return 1
    members = read_roster(args.roster)
    if args.command == "remove":
        remove(members)
        return 0
    create(members, Path(args.exchange), Path(args.homes) if args.homes else None,
           Path(args.course) if args.course else None)
    check_venv_readable(members)
    print(f"accounts ready: {', '.join(f'{m.id} ({m.role})' for m in members)}; exchange {args.exchange}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
