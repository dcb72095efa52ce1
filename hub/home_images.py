"""Each learner's disk on the hub: a small ext4 file system of their own, in a sparse image file.

File-system quotas would need a kernel built with ``CONFIG_QUOTA`` and a file system mounted with quota
options; a loop device needs neither, so the bound holds on any Linux where root can mount. A learner's
image (``<images>/<learner>.img``, :data:`HOME_MIB` MiB, sparse: it takes disk only as it fills) is made
once with ``mkfs.ext4 -m 0`` (no blocks reserved for root) and mounted ``nodev,nosuid`` at
``<images>/<learner>.mnt``; the folder ``images`` is root's alone (0700), outside every home. Two folders
of that file system are bind-mounted where the learner meets them:

- ``home/`` (the learner's, 0700) at the learner's home;
- ``inbound/`` (the learner's, the instructor's group, 2750) at ``<exchange>/<course>/inbound/<learner>``,
  so what they hand in counts against the same bound (:mod:`inbound_folders`).

A learner who fills it gets ``ENOSPC`` ("No space left on device") in their own home and hand-in folder,
and nobody else's disk changes. ``make hub`` mounts again what a restart unmounted, and never reformats an
image that exists; ``accounts.py remove`` unmounts each (the loop device is freed with its last mount) and
deletes the image.
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
from pathlib import Path

HOME_MIB = 512
"""Size of each learner's file system, in MiB (2**20 bytes): a home and everything they hand in. A problem
set's hand-in is under 1 MiB; the lessons copied in take about 2 MiB. ``make hub LEARNER_HOME_MIB=``."""
MIN_MIB = 16
"""Smallest size accepted, in MiB: ext4 needs a few MiB for its own records."""
IMAGES = "/var/lib/pagedkv-homes"
"""Default folder for the images and their mount points (root only, 0700). ``make hub HOME_IMAGES=``."""
OPTIONS = "nodev,nosuid"
"""Mount options of every mount made here: no device files and no set-user-id programs from a learner's disk."""


def mounted() -> dict[str, str]:
    """Every mount point of this machine -> the source device (``/proc/self/mountinfo``, escapes undone)."""
    points = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            point = fields[4].encode().decode("unicode_escape").encode("latin-1").decode()   # \040 for a space
            points[point] = tail[1]
    return points


def is_mounted(path: Path) -> bool:
    return str(Path(os.path.realpath(path))) in mounted()


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")


def check_size(mib) -> int:
    """``mib`` if it is a whole number of MiB no smaller than :data:`MIN_MIB`; else ValueError saying so."""
    if isinstance(mib, bool) or not isinstance(mib, int) or mib < MIN_MIB:
        raise ValueError(f"--home-mib (make hub LEARNER_HOME_MIB=): each learner's disk in MiB must be a whole "
                         f"number >= {MIN_MIB}, got {mib!r}")
    return mib


def size_arg(text: str) -> int:
    """``--home-mib``'s value, read by argparse: an error names the option, the value and what is allowed."""
    try:
        return check_size(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"each learner's disk in MiB must be a whole number >= {MIN_MIB}, "
                                         f"got {text!r}") from None


def image_root(images: Path, user: str) -> Path:
    """Where ``user``'s file system is mounted (inside the root-only ``images``)."""
    return images / f"{user}.mnt"


def mount_image(images: Path, user: str, mib: int = HOME_MIB) -> Path:
    """``user``'s file system, made (sparse, ext4, ``-m 0``) if it has no image yet and mounted if it is not;
    returns its mount point. An existing image is never formatted again, whatever ``mib`` says (a larger
    ``LEARNER_HOME_MIB`` applies to learners added after it)."""
    check_size(mib)
    images.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(images, 0, 0)
    images.chmod(0o700)
    image, root = images / f"{user}.img", image_root(images, user)
    if not image.exists():
        with open(image, "wb") as f:
            f.truncate(mib * 2**20)
        image.chmod(0o600)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0", "-L", f"pkv-{user}"[:16], str(image))
    root.mkdir(mode=0o700, exist_ok=True)
    if not is_mounted(root):
        _run("mount", "-o", f"loop,{OPTIONS}", str(image), str(root))
    return root


def bind(source: Path, target: Path) -> None:
    """``source`` mounted at ``target`` too (``nodev,nosuid``), unless something is mounted there already."""
    if not is_mounted(target):
        _run("mount", "--bind", "-o", OPTIONS, str(source), str(target))


def bind_fd(source: Path, target: int, path: Path) -> None:
    """``source`` mounted on the folder open as descriptor ``target`` (``/proc/self/fd``, not canonicalized:
    the kernel mounts on that very folder, whatever link is put at its path meanwhile), then made
    ``nodev,nosuid`` at ``path`` (where it now is: a remount only takes rights away)."""
    proc = subprocess.run(["mount", "--no-canonicalize", "--bind", str(source), f"/proc/self/fd/{target}"],
                          capture_output=True, text=True, pass_fds=(target,))
    if proc.returncode != 0:
        raise RuntimeError(f"mount --bind {source} on {path} failed: {proc.stderr.strip()}")
    _run("mount", "-o", f"remount,bind,{OPTIONS}", str(path))


def mount_home(images: Path, user: str, home: Path, mib: int = HOME_MIB) -> None:
    """``user``'s home becomes the folder ``home/`` of their file system (0700, theirs); what the home held
    before (useradd's skeleton files) is copied in the first time."""
    if is_mounted(home):
        return
    root = mount_image(images, user, mib)
    inside = root / "home"
    if not inside.exists():
        try:
            shutil.copytree(home, inside, symlinks=True) if home.is_dir() else inside.mkdir()
        except (OSError, shutil.Error) as err:   # a home made before, too big for the disk
            shutil.rmtree(inside, ignore_errors=True)
            raise RuntimeError(f"{home} does not fit on {user}'s {mib} MiB disk ({err}): make hub "
                               "LEARNER_HOME_MIB= larger, or move files out of it") from None
        uid, gid = _ids(user)
        for folder, dirs, files in os.walk(inside):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.lchown(name, uid, gid)
    inside.chmod(0o700)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    bind(inside, home)


def hand_in_folder(images: Path, user: str, group: int, mib: int = HOME_MIB) -> Path:
    """The folder ``inbound/`` on ``user``'s file system: theirs, group ``group`` (the instructor's, who
    collects through it), 2750 (set-group-id, so what they hand in takes that group; no one else enters)."""
    folder = mount_image(images, user, mib) / "inbound"
    folder.mkdir(exist_ok=True)
    os.chown(folder, _ids(user)[0], group)
    folder.chmod(0o2750)
    return folder


def unmount(images: Path, user: str, *targets: Path) -> None:
    """Unmount ``targets`` (``user``'s home, their inbound folder: each where mounted), then their file
    system (its loop device is freed with it), and delete the image. RuntimeError naming what is busy
    (a process of the user's still running: stop the hub first)."""
    for target in targets:
        if os.path.realpath(target) != os.path.abspath(target):   # a link put there by whoever owns a folder above
            raise RuntimeError(f"{target} is reached through a link: not unmounted (remove the link, then again)")
        if is_mounted(target):
            _run("umount", str(target))
    root = image_root(images, user)
    if is_mounted(root):
        _run("umount", str(root))
    if root.is_dir():
        root.rmdir()
    (images / f"{user}.img").unlink(missing_ok=True)
    if images.is_dir() and not any(images.iterdir()):
        images.rmdir()


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
