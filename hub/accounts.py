"""The class's accounts on one server: a real system user per roster row, run as root by ``make hub``.

``python hub/accounts.py create`` reads the roster (``id,role,name``; role is ``instructor`` or
``learner``) and:

- installs what learners run in ``--runtime`` (default ``/srv/pagedkv``), readable by every user: the
  learner release (``make release``: lessons, released sets, the library without the grader) in
  ``release/``, the servers' Jupyter configuration in ``singleuser/``, and ``venv/``, this checkout's
  venv with the library from the release's wheel in place of this checkout (its files hard-linked, so
  it costs almost no disk; ``runtimes.py``);
- creates, for each row without a system user, one with its own group and a private home (0700).
  Learners get the release's lessons in ``~/lessons``; the instructor gets the course repository in
  ``--course`` (default ``~/pagedkv``), owned by them: their nbgrader course directory, with its own
  ``.venv`` (the same hard-linked venv, importing the library from that course directory);
- writes the variant keys for the roster in the course directory (``make keys``, as the instructor), so
  each learner's server starts with their key, and releases the lessons in the exchange (as the
  assignment ``lessons``), so learners can hand in their predictions;
- takes every permission of other users off this checkout: it holds ``solutions/``, and nobody but root
  needs it now (the learners run the release, the instructor their own copy).

The exchange root is created world-writable with the sticky bit (nbgrader's file exchange).
Each learner's home and hand-in folder live on a small file system of their own (``home_images.py``,
``inbound_folders.py``). ``python hub/accounts.py remove`` deletes the roster's users, their homes and disks,
everything they own in the exchange and the runtime. ``python hub/accounts.py clear-inbound --assignment A [--entry NAME]`` removes what
learners left in ``inbound/`` (a refused hand-in, or all of A's after collect), which the instructor cannot. Existing users and folders are left as they are, so ``create`` again is safe.
"""
from __future__ import annotations

import argparse
import csv
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import home_images
from inbound_folders import clear_inbound, open_inbound, remove_mount_point
from other_copies import local_origin, other_checkouts
from runtimes import check_learner, check_runs, install_runtime, instructor_venv

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
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


def chown_tree(path: Path, user: str, skip: Path | None = None) -> None:
    """``user`` owns ``path`` and everything under it but ``skip`` (a hard-linked venv: its files are this checkout's)."""
    if not path.is_dir():
        os.lchown(path, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
        return
    for folder, dirs, files in os.walk(path):
        if skip is not None and Path(folder) == skip.parent and skip.name in dirs:
            dirs.remove(skip.name)
            os.lchown(skip, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
        for name in [folder, *(os.path.join(folder, f) for f in files + dirs)]:
            os.lchown(name, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)


def write_keys(instructor: str, course: Path, roster: Path) -> None:
    """``make keys`` for the roster, as the instructor in their course directory (the secret stays theirs)."""
    shutil.copyfile(roster, course / "hub-roster.csv")
    chown_tree(course / "hub-roster.csv", instructor)
    subprocess.run(["runuser", "-u", instructor, "--", str(course / ".venv" / "bin" / "python"), "-m",
                    "pagedkv_lib.course", "keys", "--roster=hub-roster.csv"], cwd=course, check=True,
                   stdout=subprocess.DEVNULL)


def share_course(lead: str, lead_course: Path, other: str, course: Path) -> None:
    """Let instructor ``other`` grade in their own ``course``: the lead's course secret and keys (the same
    numbers for each learner), and the lead's group (the exchange's submissions are readable by it)."""
    for name in ("course-secret.txt", "keys.csv"):
        copy_owned(lead_course / name, lead, course, other)
    subprocess.run(["usermod", "--append", "--groups", grp.getgrgid(pwd.getpwnam(lead).pw_gid).gr_name, other],
                   check=True)


def copy_owned(source: Path, source_owner: str, folder: Path, owner: str) -> None:
    """Copy ``source`` into ``folder`` (same name, mode 0600, ``owner``'s), as root but never through a link:
    ``source`` must be a regular file of ``source_owner``'s and ``folder`` a folder of ``owner``'s, each opened
    with ``O_NOFOLLOW``, and the copy a new file. Otherwise an instructor's link (``course-secret.txt`` ->
    ``/etc/shadow``, or a TA's ``keys.csv`` -> a system file) would have root read or overwrite what it points at."""
    src_uid, (uid, gid) = pwd.getpwnam(source_owner).pw_uid, pwd.getpwnam(owner)[2:4]
    try:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise SystemExit(f"{source} cannot be opened without following a link ({err.strerror}): not copied") from None
    try:
        where = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        os.close(src)
        raise SystemExit(f"{folder} cannot be opened without following a link ({err.strerror}): not copied") from None
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != src_uid:
            raise SystemExit(f"{source} is not a regular file of {source_owner}'s: not copied")
        if os.fstat(where).st_uid != uid:
            raise SystemExit(f"{folder} is not {owner}'s folder: nothing copied into it")
        try:
            os.unlink(source.name, dir_fd=where)
        except FileNotFoundError:
            pass
        dst = os.open(source.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=where)
        try:
            os.fchown(dst, uid, gid)
            os.fchmod(dst, 0o600)
            while chunk := os.read(src, 1 << 16):
                os.write(dst, chunk)
        finally:
            os.close(dst)
    finally:
        os.close(src)
        os.close(where)


def publish_lessons(instructor: str, course: Path, runtime: Path, exchange: Path) -> None:
    """Release the lessons in the exchange as the assignment ``lessons``, as the instructor, with nbgrader's own
    release: a learner hands in ``~/lessons`` (their saved predictions) from the Assignment List, and
    ``make collect-lessons`` brings them to the course for ``make report``."""
    code = ("from nbgrader.coursedir import CourseDirectory\n"
            "from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment\n"
            f"where = CourseDirectory(root={str(course)!r}, course_id='pagedkv', "
            f"release_directory={str(runtime / 'handout')!r}, assignment_id='lessons')\n"
            f"ExchangeReleaseAssignment(coursedir=where, root={str(exchange)!r}, force=True).start()\n")
    proc = subprocess.run(["runuser", "-u", instructor, "--", str(course / ".venv" / "bin" / "python"), "-c", code],
                          cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"releasing the lessons as {instructor} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")


def create(members: list[Member], exchange: Path, home_root: Path | None, course: Path | None,
           release: Path, runtime: Path, images: Path, mib: int) -> None:
    install_runtime(release, runtime)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o1777)   # every user writes here; the sticky bit keeps others' folders from being renamed
    files = course_files()
    for m in members:
        if not exists(m.id):
            home = ["--home-dir", str(home_root / m.id)] if home_root else []
            subprocess.run(["useradd", "--create-home", *home, "--user-group", "--shell", "/bin/bash",
                            "--comment", m.name, m.id], check=True)
        home = Path(pwd.getpwnam(m.id).pw_dir)
        if m.role == "learner":   # a file system of its own (home_images.py), before anything is copied in
            home_images.mount_home(images, m.id, home, mib)
        home.chmod(0o700)
        if m.role == "learner" and not (home / "lessons").exists():
            shutil.copytree(runtime / "release" / "notebooks", home / "lessons")
            chown_tree(home / "lessons", m.id)
        if m.role == "instructor":
            where = course or home / "pagedkv"
            if not where.exists():
                copy_tree(files, REPO, where)
            if not (where / ".venv").is_dir() or (where / ".venv").is_symlink():
                if (where / ".venv").is_symlink():   # a course made before: its .venv pointed into this checkout
                    (where / ".venv").unlink()
                instructor_venv(where)
            chown_tree(where, m.id, skip=where / ".venv")
            where.chmod(0o700)


def seal_checkout() -> None:
    """Take every permission of other users off this checkout (it holds solutions/ and the grader)."""
    mode = REPO.stat().st_mode
    if mode & 0o007:
        REPO.chmod(stat.S_IMODE(mode) & ~0o007)
        print(f"{REPO} is now closed to other users (mode {stat.filemode(REPO.stat().st_mode)}): "
              f"it holds solutions/; learners run the release in the runtime")


def remove(members: list[Member], exchange: Path, runtime: Path, course: Path | None, images: Path) -> None:
    """Delete each roster user with their home and mail spool, everything they own in ``exchange`` (their
    submissions and feedback, the instructor's course folder), ``runtime``, and ``course`` when it is given
    (a course directory outside the instructor's home); stop the hub first.

    Raises naming every user it could not remove (userdel refuses while a user has processes)."""
    uids = {pwd.getpwnam(m.id).pw_uid for m in members if exists(m.id)}
    for m in (m for m in members if m.role == "learner"):   # their disks first: home and inbound folder
        where = exchange / "pagedkv" / "inbound"
        home_images.unmount(images, m.id, where / m.id, *([Path(pwd.getpwnam(m.id).pw_dir)] if exists(m.id) else []))
        remove_mount_point(where, m.id)
    if exchange.is_dir():
        for folder, dirs, files in os.walk(exchange, topdown=False):
            for name in files + dirs:
                path = os.path.join(folder, name)
                if os.lstat(path).st_uid in uids:
                    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        if not any(exchange.iterdir()):
            exchange.rmdir()
    for folder in (runtime, course):
        if folder is not None and folder.exists():
            shutil.rmtree(folder)
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
    p.add_argument("command", choices=["create", "remove", "clear-inbound"])
    p.add_argument("--roster", default=str(HERE / "roster.csv"), help="id,role,name (default hub/roster.csv)")
    p.add_argument("--exchange", default="/srv/nbgrader/exchange", help="nbgrader's exchange root")
    p.add_argument("--runtime", default="/srv/pagedkv", help="where the learners' release and venv are installed")
    p.add_argument("--release", default=str(REPO / "release"), help="the learner release (make release)")
    p.add_argument("--homes", default=None, help="create homes under this folder (default: useradd's, /home)")
    p.add_argument("--course", default=None, help="the instructor's course directory (default ~/pagedkv)")
    p.add_argument("--images", default=home_images.IMAGES, help="learners' disk images (a root-only folder)")
    p.add_argument("--home-mib", type=home_images.size_arg, default=home_images.HOME_MIB, help="each learner's disk, MiB")
    p.add_argument("--assignment", help="clear-inbound: the assignment whose inbound entries to remove")
    p.add_argument("--entry", action="append", default=[], help="clear-inbound: only this entry (repeatable)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("hub/accounts.py creates system users: run it (and make hub) as root", file=sys.stderr)
        return 1
    if args.command == "clear-inbound":
        if not args.assignment:
            p.error("clear-inbound needs --assignment")
        gone = clear_inbound(Path(args.exchange), "pagedkv", args.assignment, args.entry)
        print(f"removed {len(gone)} inbound entries of {args.assignment}: {', '.join(gone) or 'none'}")
        return 0
    members = read_roster(args.roster)
    images, mib = Path(args.images), args.home_mib
    if args.course and sum(m.role == "instructor" for m in members) > 1 and args.command == "create":
        print("COURSE= names one course folder, owned by one user; with several instructors in the roster leave it "
              "out: each gets ~/pagedkv, and the first in the roster leads (keys, lessons)", file=sys.stderr)
        return 1
    if args.command == "remove":
        remove(members, Path(args.exchange), Path(args.runtime), Path(args.course) if args.course else None, images)
        return 0
    create(members, Path(args.exchange), Path(args.homes) if args.homes else None,
           Path(args.course) if args.course else None, Path(args.release), Path(args.runtime), images, mib)
    instructors = [m for m in members if m.role == "instructor"]
    for m in instructors:
        course = Path(args.course) if args.course else Path(pwd.getpwnam(m.id).pw_dir) / "pagedkv"
        check_runs(m.id, course / ".venv" / "bin" / "python", "import pagedkv_lib.course.learner, nbgrader")
    # The first instructor of the roster leads: their course makes the variant keys the hub hands out and
    # releases the lessons (the exchange's course folders are theirs); each other instructor or TA has a
    # course copy of their own to grade in.
    lead = instructors[0]
    course = Path(args.course) if args.course else Path(pwd.getpwnam(lead.id).pw_dir) / "pagedkv"
    write_keys(lead.id, course, Path(args.roster))
    publish_lessons(lead.id, course, Path(args.runtime), Path(args.exchange))
    open_inbound(Path(args.exchange) / "pagedkv" / "inbound", [m.id for m in members if m.role == "learner"],
                 pwd.getpwnam(lead.id).pw_gid, images, mib)
    for m in instructors[1:]:
        share_course(lead.id, course, m.id, Path(pwd.getpwnam(m.id).pw_dir) / "pagedkv")
    seal_checkout()
    courses = [Path(args.course)] if args.course else [Path(pwd.getpwnam(m.id).pw_dir) / "pagedkv"
                                                        for m in members if m.role == "instructor"]
    for other in other_checkouts(skip=tuple(courses), also=local_origin()):
        print(f"WARNING: {other} is another copy of this course, and every user can read its solutions/: "
              f"learners can too. chmod o-rwx {other} (or remove it)", file=sys.stderr)
    check_learner(members, Path(args.runtime) / "venv" / "bin" / "python")
    print(f"accounts ready: {', '.join(f'{m.id} ({m.role})' for m in members)}; exchange {args.exchange}; "
          f"learners run {args.runtime}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
