"""nbgrader's ``inbound/`` on the hub: one folder per learner, on that learner's own disk.

nbgrader's file exchange makes ``inbound/`` writable by every user (0733 with the set-group-id bit), so one
learner could write entries named for another (``inbound/<classmate>+ps2_math+...``) and fill the disk that
everybody hands in to. Here ``inbound/`` is closed to learners (0751: its owner, the lead instructor who
released into the exchange, writes; their group lists; others only pass through) and holds one folder per
learner, ``inbound/<learner>/``, which is the folder ``inbound/`` of that learner's file system
(:mod:`home_images`) mounted there: the learner's own (set-group-id, the instructor's group, 2750), so only
they write in it, the instructor's collect reads it through the group, and what they hand in counts against
their own bound. Writing in ``inbound/`` itself or in a classmate's folder fails with ``EACCES``.

``inbound/`` stays the lead instructor's, not root's: nbgrader's release refuses an existing ``inbound/`` its
releaser does not own ("You don't own the directory").
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import home_images

MODE = 0o751
"""``inbound/``: its owner (the lead instructor) writes, their group lists, everyone else may only pass through."""


def open_inbound(inbound: Path, learners: list[str], group: int, images: Path, mib: int = home_images.HOME_MIB) -> None:
    """Each of ``learners`` gets ``inbound/<learner>/``, their disk's hand-in folder (group ``group``, the
    lead instructor's) bind-mounted there; ``inbound/`` itself is closed to learners (:data:`MODE`).

    Root works here in folders the lead instructor owns (``<course>/`` and ``inbound/`` in the exchange), so
    nothing is followed: ``inbound/`` and each mount point are opened one part at a time with ``O_NOFOLLOW``
    from the exchange's root, and the mount is made on the opened folder itself (``/proc/self/fd``), so a link
    put in their place never has root mount a learner's folder elsewhere."""
    top = _open_below(inbound.parent.parent, inbound.parent.name, inbound.name)
    try:
        os.fchmod(top, MODE)
        for user in learners:
            source = home_images.hand_in_folder(images, user, group, mib)
            try:
                os.mkdir(user, 0o755, dir_fd=top)
            except FileExistsError:
                pass
            try:
                target = os.open(user, _DIR, dir_fd=top)
            except OSError as err:
                raise RuntimeError(f"{inbound / user} is not a folder ({err.strerror}): remove it and run make hub "
                                   "again") from None
            try:
                if not home_images.is_mounted(inbound / user):
                    home_images.bind_fd(source, target, inbound / user)
            finally:
                os.close(target)
    finally:
        os.close(top)


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_below(base: Path, *parts: str) -> int:
    """A descriptor for ``base/parts...``, each part opened relative to the last with ``O_NOFOLLOW``
    (RuntimeError naming the path when a part is a link or no folder)."""
    fd = os.open(base, _DIR)
    try:
        for part in parts:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except OSError as err:
        os.close(fd)
        raise RuntimeError(f"{base.joinpath(*parts)} cannot be opened without following a link ({err.strerror})") from None


def remove_mount_point(inbound: Path, user: str) -> None:
    """Remove the empty folder left where ``user``'s hand-in folder was mounted (already unmounted)."""
    target = inbound / user
    if target.is_dir() and not target.is_symlink() and not home_images.is_mounted(target) and not any(target.iterdir()):
        target.rmdir()


def clear_inbound(exchange: Path, course_id: str, assignment: str, entries: list[str] = ()) -> list[str]:
    """Remove what learners left in ``inbound/`` for ``assignment`` (only the named ``entries`` when given), as
    root: the instructor cannot, since each entry is its learner's in the learner's own folder. Entries are
    looked for in every learner's folder ``inbound/<learner>/`` and in ``inbound/`` itself (an exchange from
    before the folders). A link is removed itself, never followed (``shutil.rmtree`` works through folder
    descriptors). Returns the names removed; ValueError naming an entry that is not there or belongs to
    another assignment."""
    inbound = exchange / course_id / "inbound"
    found = {}
    for top in sorted(os.listdir(inbound)):
        where = inbound / top
        if "+" not in top and where.is_dir() and not where.is_symlink():
            found.update({n: where / n for n in sorted(os.listdir(where)) if n.split("+")[1:2] == [assignment]})
        elif top.split("+")[1:2] == [assignment]:
            found[top] = where
    for name in entries:
        if name not in found:
            raise ValueError(f"--entry {name!r} is not an inbound entry of {assignment!r} in {inbound} "
                             f"(nor in a learner's folder there)")
    chosen = list(entries) or list(found)
    for name in chosen:
        path = found[name]
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return chosen
