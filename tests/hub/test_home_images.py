"""Each learner's disk on the hub (``hub/home_images.py``, ``hub/inbound_folders.py``), with real users, loop
devices and mounts: a learner who fills theirs gets ENOSPC in their home and in their hand-in folder while a
classmate still writes and hands in, and no learner can write in ``inbound/`` itself or in a classmate's folder.

Needs root (as ``make hub`` does); everything made here (users, images, mounts, loop devices) is removed after,
and the test checks that no loop device of its images is left.
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hub"))
sys.path.insert(0, str(REPO / "hub" / "singleuser" / "python"))

import home_images  # noqa: E402
from inbound_folders import clear_inbound, open_inbound, remove_mount_point  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes users and mounts: needs root, as make hub does")


def _loop_devices() -> str | None:
    """Why this machine cannot make a learner's disk (no mkfs.ext4, no free loop device), or None."""
    if not shutil.which("mkfs.ext4"):
        return "no mkfs.ext4 (e2fsprogs): make hub needs it for each learner's disk"
    found = subprocess.run(["losetup", "-f"], capture_output=True, text=True) if shutil.which("losetup") else None
    if found is None or found.returncode != 0:
        return f"no free loop device (losetup -f: {found.stderr.strip() if found else 'no losetup'}): make hub needs one per learner"
    return None


@pytest.fixture(scope="module", autouse=True)
def loop_devices():
    why = _loop_devices() if os.geteuid() == 0 else None
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
MIB = 32
"""Each test learner's disk, in MiB (about 26 MiB usable once ext4 has its records)."""


def as_user(user: str, code: str) -> subprocess.CompletedProcess:
    """Python ``code`` run as ``user`` (their uid and groups), from ``/``."""
    return subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", "-c", code], capture_output=True,
                          text=True, cwd="/")


def loops_of(images: Path) -> list[str]:
    """The loop devices (``losetup``'s lines) whose backing file is under ``images``."""
    listed = subprocess.run(["losetup", "--list", "--noheadings", "-O", "NAME,BACK-FILE"], capture_output=True,
                            text=True, check=True).stdout
    return [line for line in listed.splitlines() if str(images) in line]


@pytest.fixture(scope="module")
def hub_disks():
    """Two learners and an instructor (real users), each learner's home and inbound folder on their own disk."""
    tag = secrets.token_hex(3)
    names = {"one": f"pkvda{tag}", "two": f"pkvdb{tag}", "teacher": f"pkvdt{tag}"}
    top = Path(tempfile.mkdtemp(prefix="pkv-disks-"))
    top.chmod(0o711)
    homes, images = top / "homes", top / "images"
    homes.mkdir(mode=0o711)
    inbound = top / "exchange" / "pagedkv" / "inbound"
    inbound.mkdir(parents=True)
    for p in (top / "exchange", top / "exchange" / "pagedkv"):
        p.chmod(0o755)
    made = []
    try:
        for name in names.values():
            subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name), "--user-group", name],
                           check=True)
            made.append(name)
        os.chown(inbound, pwd.getpwnam(names["teacher"]).pw_uid, pwd.getpwnam(names["teacher"]).pw_gid)
        for who in ("one", "two"):
            home_images.mount_home(images, names[who], homes / names[who], MIB)
        open_inbound(inbound, [names["one"], names["two"]], pwd.getpwnam(names["teacher"]).pw_gid, images, MIB)
        yield {"names": names, "homes": homes, "images": images, "inbound": inbound, "top": top}
    finally:
        for who in ("one", "two"):
            home_images.unmount(images, names[who], inbound / names[who], homes / names[who])
            remove_mount_point(inbound, names[who])
        for name in made:
            subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)
        left = loops_of(images)
        subprocess.run(["rm", "-rf", "--one-file-system", str(top)], check=False)
        assert not left, f"loop devices left on the test's images: {left}"


def fill(path: Path, mib: int, how: str = "fallocate") -> str:
    """Code that puts ``mib`` MiB at ``path`` (``fallocate``, instant; or ``write``, 1 MiB at a time) and prints
    ``ok`` or the error's text."""
    put = ("    os.posix_fallocate(fd, 0, {mib} * 2**20)\n" if how == "fallocate" else
           "    for _ in range({mib}):\n        os.write(fd, bytes(2**20))\n    os.fsync(fd)\n").format(mib=mib)
    return (f"import os\ntry:\n    fd = os.open({str(path)!r}, os.O_WRONLY | os.O_CREAT, 0o600)\n{put}"
            "    print('ok')\nexcept OSError as err:\n    print(err.strerror)\n")


def test_a_full_disk_stops_its_learner_only(hub_disks):
    """learner one asks for 2 GiB in their home and in their hand-in folder: "No space left on device" both
    times; then fills their home by writing, and cannot put even 1 MiB in their hand-in folder (one bound for
    both). learner two still writes 8 MiB in their home and hands in. Without the images every one of these
    would succeed on the machine's own disk (the homes' and the exchange's folder are on it)."""
    one, two = hub_disks["names"]["one"], hub_disks["names"]["two"]
    homes, inbound = hub_disks["homes"], hub_disks["inbound"]
    assert home_images.is_mounted(homes / one) and home_images.is_mounted(inbound / one)
    assert os.statvfs(homes / one).f_blocks * os.statvfs(homes / one).f_frsize <= MIB * 2**20
    for where in (homes / one / "big.bin", inbound / one / "big.bin"):
        said = as_user(one, fill(where, 2 * 2**10))   # 2 GiB, the journey's attack 4
        assert said.stdout.strip() == "No space left on device", (where, said)
        as_user(one, f"import os\nos.unlink({str(where)!r})")
    said = as_user(one, fill(homes / one / "full.bin", 2 * MIB, how="write"))
    assert said.stdout.strip() == "No space left on device", said
    said = as_user(one, fill(inbound / one / "one.bin", 1, how="write"))
    assert said.stdout.strip() == "No space left on device", said
    said = as_user(two, fill(homes / two / "work.bin", 8, how="write"))
    assert said.stdout.strip() == "ok", said
    hand_in = (f"import os\nd = {str(inbound / two)!r} + '/{two}+ps2_math+2026-12-06 10:00:00 UTC+x'\nos.mkdir(d)\n"
               "open(d + '/ps2_math.ipynb', 'w').write('{}')\nprint(os.stat(d).st_gid)\n")
    said = as_user(two, hand_in)
    assert said.returncode == 0 and int(said.stdout) == pwd.getpwnam(hub_disks["names"]["teacher"]).pw_gid, said
    assert clear_inbound(hub_disks["top"] / "exchange", "pagedkv", "ps2_math") == [
        f"{two}+ps2_math+2026-12-06 10:00:00 UTC+x"]
    as_user(one, f"import os\nos.unlink({str(homes / one / 'full.bin')!r})")


def test_no_learner_writes_in_inbound_or_a_classmates_folder(hub_disks):
    """Attack 1 at the file system: a folder named for a classmate, in ``inbound/`` or in the classmate's own
    folder, fails with "Permission denied"; the classmate's folder cannot be listed either."""
    one, two = hub_disks["names"]["one"], hub_disks["names"]["two"]
    inbound = hub_disks["inbound"]
    for where in (inbound / f"{two}+ps2_math+2099-01-01 00:00:00 UTC+forged",
                  inbound / two / f"{two}+ps2_math+2099-01-01 00:00:00 UTC+forged"):
        said = as_user(one, f"import os\ntry:\n    os.mkdir({str(where)!r})\n    print('made')\n"
                            "except OSError as err:\n    print(err.strerror)")
        assert said.stdout.strip() == "Permission denied", (where, said)
    said = as_user(one, f"import os\ntry:\n    os.listdir({str(inbound / two)!r})\nexcept OSError as err:\n"
                        "    print(err.strerror)")
    assert said.stdout.strip() == "Permission denied", said
    assert sorted(os.listdir(inbound)) == sorted([one, two])
    for target in (inbound / one, hub_disks["homes"] / one):   # no device files, no set-user-id programs
        options = next(line.split()[5] for line in open("/proc/self/mountinfo") if line.split()[4] == str(target))
        assert {"nodev", "nosuid"} <= set(options.split(",")), (target, options)
    assert oct(os.stat(inbound).st_mode & 0o7777) == "0o751" and oct(os.stat(inbound / one).st_mode & 0o7777) == "0o2750"


def test_make_hub_again_mounts_what_is_not_and_never_formats_an_image(hub_disks):
    """``accounts.py create`` on every start: a learner's disk unmounted (a restart) is mounted again with
    what it held, and a second mount call changes nothing."""
    one = hub_disks["names"]["one"]
    homes, images, inbound = hub_disks["homes"], hub_disks["images"], hub_disks["inbound"]
    as_user(one, f"open({str(homes / one / 'kept.txt')!r}, 'w').write('mine')")
    for target in (inbound / one, homes / one, home_images.image_root(images, one)):
        subprocess.run(["umount", str(target)], check=True)
    assert not home_images.is_mounted(homes / one)
    home_images.mount_home(images, one, homes / one, MIB)
    home_images.mount_home(images, one, homes / one, MIB)
    open_inbound(inbound, [one], pwd.getpwnam(hub_disks["names"]["teacher"]).pw_gid, images, MIB)
    assert (homes / one / "kept.txt").read_text() == "mine"
    assert list(home_images.mounted().values()).count(home_images.mounted()[str(homes / one)]) == 3
    assert oct(os.stat(homes / one).st_mode & 0o777) == "0o700" and os.stat(homes / one).st_uid == pwd.getpwnam(one).pw_uid


def test_root_never_mounts_a_learners_folder_through_a_link(hub_disks):
    """The lead instructor owns ``inbound/`` (nbgrader's release needs it): a link they put where a learner's
    folder goes, or in place of ``inbound/`` itself, is refused and nothing is mounted where it points."""
    one, teacher = hub_disks["names"]["one"], hub_disks["names"]["teacher"]
    images, inbound, elsewhere = hub_disks["images"], hub_disks["inbound"], hub_disks["top"] / "elsewhere"
    elsewhere.mkdir()
    group = pwd.getpwnam(teacher).pw_gid
    subprocess.run(["umount", str(inbound / one)], check=True)
    (inbound / one).rmdir()
    (inbound / one).symlink_to(elsewhere)
    try:
        with pytest.raises(RuntimeError, match="is not a folder"):
            open_inbound(inbound, [one], group, images, MIB)
        assert not home_images.is_mounted(elsewhere)
        (inbound / one).unlink()
        inbound.rename(inbound.with_name("moved"))
        inbound.symlink_to(inbound.with_name("moved"))
        with pytest.raises(RuntimeError, match="without following a link"):
            open_inbound(inbound, [one], group, images, MIB)
    finally:
        if inbound.is_symlink():
            inbound.unlink()
            inbound.with_name("moved").rename(inbound)
        if (inbound / one).is_symlink():
            (inbound / one).unlink()
        open_inbound(inbound, [one], group, images, MIB)
    assert home_images.is_mounted(inbound / one) and not home_images.is_mounted(elsewhere)
    elsewhere.rmdir()


def test_a_home_too_big_for_its_disk_is_named(hub_disks):
    """A home made before the disks (here 40 MiB in a 32 MiB disk): create stops naming the home and the fix,
    and leaves no half-copied home (a rerun with a larger size starts clean)."""
    teacher, homes, images = hub_disks["names"]["teacher"], hub_disks["homes"], hub_disks["images"]
    with open(homes / teacher / "data.bin", "wb") as f:
        f.write(bytes(40 * 2**20))
    try:
        with pytest.raises(RuntimeError, match=f"{homes / teacher} does not fit on {teacher}'s {MIB} MiB disk"):
            home_images.mount_home(images, teacher, homes / teacher, MIB)
        assert not home_images.is_mounted(homes / teacher)
        assert not (home_images.image_root(images, teacher) / "home").exists()
    finally:
        home_images.unmount(images, teacher)
        (homes / teacher / "data.bin").unlink()
    assert not loops_of(images / f"{teacher}.img")


def test_a_size_out_of_bounds_is_refused_naming_the_option():
    for bad in (4, 0, -1, "x"):
        said = subprocess.run([sys.executable, str(REPO / "hub" / "accounts.py"), "create", "--home-mib", str(bad)],
                              capture_output=True, text=True)
        assert said.returncode == 2 and "--home-mib" in said.stderr and repr(str(bad)) in said.stderr, said.stderr
    with pytest.raises(ValueError, match="--home-mib"):
        home_images.check_size(8)
