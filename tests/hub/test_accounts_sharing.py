"""hub/accounts.py's work around the course as root: copies of the course others can read, and a second
instructor's share of the lead's course (their secret and keys, never read or written through a link).

Real users (two throwaway system users, removed afterwards; root needed, as ``make hub`` does).
"""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hub"))

from accounts import other_checkouts, share_course  # noqa: E402

from throwaway_users import attacker_and_victim, own  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes system users: needs root, as make hub does")


@pytest.fixture(scope="module")
def users():
    """Two throwaway system users, removed afterwards: ``{"attacker": name, "victim": name}``."""
    yield from attacker_and_victim("pkvsh")


def test_make_hub_finds_another_readable_copy_of_the_course():
    """make hub closes only its own checkout; a copy elsewhere that everyone can read is named, a closed one not."""
    top = Path(tempfile.mkdtemp(prefix="pkv-copies-"))   # under /tmp, which every user can search
    try:
        copy = top / "old" / "clone"
        (copy / "solutions" / "ps2_math").mkdir(parents=True)
        (copy / "pagedkv_lib").mkdir()
        for p in (top, top / "old", copy, copy / "solutions"):
            p.chmod(0o755)
        assert other_checkouts([str(top)]) == [copy.resolve()]
        copy.chmod(0o750)
        assert other_checkouts([str(top)]) == []
        copy.chmod(0o755)
        assert other_checkouts([str(top / "old" / "nothing")], also=(copy,)) == [copy.resolve()]  # the origin
    finally:
        shutil.rmtree(top)


def test_a_second_instructor_grades_with_the_leads_secret_and_reads_the_exchange_by_group(users, tmp_path):
    """Several instructors: the first leads; another gets the lead's course secret and keys (the same numbers
    per learner) and the lead's group, through which nbgrader's inbound/ is readable."""
    lead, ta = users["victim"], users["attacker"]   # any two users
    lead_course, ta_course = tmp_path / "lead", tmp_path / "ta"
    lead_course.mkdir()
    ta_course.mkdir()
    (lead_course / "course-secret.txt").write_text("s" * 64)
    (lead_course / "keys.csv").write_text("student,key\nx,y\n")
    own(lead_course, lead)
    own(ta_course, ta)
    share_course(lead, lead_course, ta, ta_course)
    copied = ta_course / "course-secret.txt"
    assert copied.read_text() == "s" * 64 and copied.stat().st_uid == pwd.getpwnam(ta).pw_uid
    assert copied.stat().st_mode & 0o077 == 0
    assert ta in grp.getgrgid(pwd.getpwnam(lead).pw_gid).gr_mem


def test_sharing_the_course_never_follows_an_instructors_link(users, tmp_path):
    """share_course copies as root: a lead's secret that is a link to a root-only file is refused, never read,
    and a TA's keys.csv that is a link to a system file is replaced, never written through."""
    lead, ta = users["victim"], users["attacker"]
    lead_course, ta_course, private = tmp_path / "lead", tmp_path / "ta", tmp_path / "root-only"
    for folder in (lead_course, ta_course):
        folder.mkdir()
    private.write_text("root's secret")
    private.chmod(0o600)
    (lead_course / "course-secret.txt").symlink_to(private)
    (lead_course / "keys.csv").write_text("student,key\nx,y\n")
    own(lead_course, lead)
    own(ta_course, ta)
    with pytest.raises(SystemExit, match="not copied"):
        share_course(lead, lead_course, ta, ta_course)
    assert not (ta_course / "course-secret.txt").exists()
    (lead_course / "course-secret.txt").unlink()
    (lead_course / "course-secret.txt").write_text("s" * 64)
    own(lead_course, lead)
    (ta_course / "keys.csv").symlink_to(private)
    os.lchown(ta_course / "keys.csv", pwd.getpwnam(ta).pw_uid, pwd.getpwnam(ta).pw_gid)
    share_course(lead, lead_course, ta, ta_course)
    assert private.read_text() == "root's secret"
    assert not (ta_course / "keys.csv").is_symlink() and (ta_course / "keys.csv").read_text() == "student,key\nx,y\n"
