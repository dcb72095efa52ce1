"""Entries in nbgrader's file-exchange ``inbound/``, judged before anything in them is read.

Every learner can write in ``inbound/``, so an entry's name, its ``timestamp.txt`` and whatever links it
holds are the learner's words. An entry is taken only when its name parses as
``<student>+<assignment>+<anything>+<anything>``, and it and everything under it are plain folders and
regular files owned by the uid of the student it names (checked with ``lstat``: a symbolic link, a device,
a FIFO or a socket anywhere refuses the whole entry, and none is ever opened), within a file count and a
byte total counted before one byte is copied. Its time is the server's: the latest status-change time
(``st_ctime``, which only the kernel sets) of the entry and everything in it.

:func:`copy_entry` copies a judged entry opening each folder and file relative to its parent's descriptor
with ``O_NOFOLLOW``, and checks each opened file again (regular, same owner) and stops at the byte bound,
so a link swapped in after the judgement is refused too, never followed.
"""
from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass, field

from .submission_bounds import file_kind

MAX_FILES = 200
"""Most files and folders one hand-in may hold (a problem set's hand-in holds a notebook and two text files)."""
MAX_BYTES = 100 * 2**20
"""Most bytes one hand-in may hold (the grader takes notebooks up to 50 MiB: ``submission_bounds.py``)."""


class Refused(ValueError):
    """The entry is not taken; the message says why, for the instructor's log and the learner's status."""


@dataclass
class Entry:
    """One inbound entry: its folder name, the student it names, its owner's user name, and after
    :func:`judge` its time (seconds since the epoch, the server's clock), files (relative paths) and bytes."""

    name: str
    student: str
    assignment: str
    owner: str
    time: float = 0.0
    files: list = field(default_factory=list)
    bytes: int = 0


def parse_name(name: str, assignment: str) -> tuple[str, str]:
    """``(student, assignment)`` from an entry name ``<student>+<assignment>+<time>+<random>``; Refused if
    the name has another shape or names another assignment (only the first two parts matter here)."""
    parts = name.rsplit("+", 3)
    if len(parts) != 4 or not parts[0] or parts[1] != assignment:
        raise Refused(f"inbound entry {shown(name)} is not named <student>+{assignment}+<time>+<random>")
    return parts[0], parts[1]


SHOWN_CHARS = 80
"""Most characters of a learner's name for a file or entry quoted in a message (a path may be 4,096 bytes)."""


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` quoted for a message to the instructor or a status: control and invisible characters escaped
    (``repr``), cut in the middle to ``limit`` characters with an ellipsis (its start and end are what tell
    names apart), so that a learner's file name can neither flood a message nor disguise itself."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else f"{quoted[:limit // 2]}…{quoted[-(limit - 1 - limit // 2):]}"


def owner_name(uid: int) -> str:
    """The user name of ``uid``, or ``uid <n>`` for a uid with no user."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def judge(inbound: str, name: str, assignment: str, max_files: int = MAX_FILES,
          max_bytes: int = MAX_BYTES) -> Entry:
    """The entry ``inbound/name`` judged as the module docstring says; Refused naming the first reason.

    Reads only metadata (``lstat``), and stops walking at ``max_files``: a hand-in of a million files or
    of a sparse 2 GB file costs about as little as a small one."""
    student, assignment = parse_name(name, assignment)
    what, top = f"inbound entry {shown(name)}", os.path.join(inbound, name)
    info = os.lstat(top)
    owner = owner_name(info.st_uid)
    entry = Entry(name, student, assignment, owner)
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"{what} names {shown(student)}, who is no user here (owned by {owner})") from None
    if info.st_uid != uid:
        raise Refused(f"{what} names {student} but is owned by {owner}: not taken as {student}'s")
    if not stat.S_ISDIR(info.st_mode):
        raise Refused(f"{what} is {file_kind(info.st_mode)}, not a folder")
    entry.time, stack = info.st_ctime, [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(top, rel)) as it:
            for item in it:
                path = os.path.join(rel, item.name)
                st = item.stat(follow_symlinks=False)
                if len(entry.files) >= max_files:
                    raise Refused(f"{what} holds more than {max_files} files and folders")
                if st.st_uid != uid:
                    raise Refused(f"{what}: {shown(path)} is owned by {owner_name(st.st_uid)}, not {student}")
                entry.time = max(entry.time, st.st_ctime)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(path)
                elif stat.S_ISREG(st.st_mode):
                    entry.bytes += max(st.st_size, st.st_blocks * 512)  # a sparse file counts its full size
                    if entry.bytes > max_bytes:
                        raise Refused(f"{what} holds more than {max_bytes:,} bytes ({shown(path)})")
                else:
                    raise Refused(f"{what}: {shown(path)} is {file_kind(st.st_mode)}; never read")
                entry.files.append(path)
    return entry


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def copy_entry(inbound: str, entry: Entry, dest: str, max_bytes: int = MAX_BYTES) -> None:
    """Copy the judged ``entry`` into the new folder ``dest`` (files 0644, folders 0755, the copier's own),
    never following a link; Refused (``dest`` left partly written for the caller to remove) when anything
    changed since :func:`judge` so that it would now be refused."""
    uid = pwd.getpwnam(entry.student).pw_uid
    what, top = f"inbound entry {shown(entry.name)}", os.open(os.path.join(inbound, entry.name), _DIR)
    copied = 0
    try:
        if os.fstat(top).st_uid != uid:
            raise Refused(f"{what} changed owner while it was collected")
        os.makedirs(dest, mode=0o755)
        for rel in sorted(entry.files, key=lambda p: p.count(os.sep)):
            fd = _open_below(top, rel, what)
            try:
                st = os.fstat(fd)
                if st.st_uid != uid:
                    raise Refused(f"{what}: {shown(rel)} changed owner while it was collected")
                if stat.S_ISDIR(st.st_mode):
                    os.makedirs(os.path.join(dest, rel), mode=0o755, exist_ok=True)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise Refused(f"{what}: {shown(rel)} is {file_kind(st.st_mode)}; never read")
                with open(os.path.join(dest, rel), "wb") as out:
                    while chunk := os.read(fd, 1 << 20):
                        copied += len(chunk)
                        if copied > max_bytes:
                            raise Refused(f"{what} grew past {max_bytes:,} bytes while collected")
                        out.write(chunk)
            finally:
                os.close(fd)
    finally:
        os.close(top)


def _open_below(top: int, rel: str, what: str) -> int:
    """A descriptor for ``rel`` under the folder ``top``, each part opened relative to the last with
    ``O_NOFOLLOW`` (a link at any level fails with ``ELOOP`` or ``ENOTDIR``: Refused)."""
    parts, fd = rel.split(os.sep), top
    try:
        for i, part in enumerate(parts):
            flags = _FILE if i == len(parts) - 1 else _DIR
            nxt = os.open(part, flags, dir_fd=fd)
            if fd != top:
                os.close(fd)
            fd = nxt
        return fd
    except OSError as err:
        if fd != top:
            os.close(fd)
        raise Refused(f"{what}: {shown(rel)} cannot be opened without following a link ({err.strerror})") from None
