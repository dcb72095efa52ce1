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
    lead instructor's) bind-mounted there; ``inbound/`` itself is closed to learners (:data:`MODE`)."""
    inbound.chmod(MODE)
    for user in learners:
        source = home_images.hand_in_folder(images, user, group, mib)
        target = inbound / user
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise RuntimeError(f"{target} is not a folder: remove it (accounts.py clear-inbound) and run make hub again")
        target.mkdir(mode=0o755, exist_ok=True)
        home_images.bind(source, target)


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
