"""The hub's collect and feedback release against a learner who writes what they like in ``inbound/``.

Real files, links, FIFOs and users (the tests make two system users and remove them; they need root, as
``make hub`` does). Each attack is first shown to work on nbgrader's own collect, so the test of the
defence can fail, then refused by ``pagedkv_collect.OwnedCollect`` while the other learner is collected.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hub" / "singleuser" / "python"))

from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.exchange.abc.exchange import ExchangeError  # noqa: E402
from nbgrader.exchange.default.collect import ExchangeCollect  # noqa: E402
from pagedkv_collect import OwnedCollect, OwnedReleaseFeedback  # noqa: E402

from pagedkv_lib.course.instructor.intake.inbound_entries import Refused, copy_entry, judge  # noqa: E402

from throwaway_users import attacker_and_victim, own  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes system users: needs root, as make hub does")
ASSIGNMENT = "ps2_math"


@pytest.fixture(scope="module")
def users():
    """Two throwaway system users, removed afterwards: ``{"attacker": name, "victim": name}``."""
    yield from attacker_and_victim("pkvoc")


def learner_folder(inbound: Path, learner: str) -> Path:
    """``inbound/<learner>/`` as ``make hub`` leaves it (there a mount of the learner's own disk): theirs, 2750."""
    folder = inbound / learner
    if not folder.is_dir():
        folder.mkdir()
        own(folder, learner)
        folder.chmod(0o2750)
    return folder


def entry(inbound: Path, owner: str, named: str, stamp: str = "2026-12-06 10:00:00.000000 UTC",
          text: str = "answers", secret: str = "s3cret", into: str | None = "") -> Path:
    """A hand-in as nbgrader's submit leaves it, named for ``named``, every file owned by ``owner``, in the
    folder of learner ``into`` (default: the owner's own; None: ``inbound/`` itself, nbgrader's own layout)."""
    where = inbound if into is None else learner_folder(inbound, into or owner)
    folder = where / f"{named}+{ASSIGNMENT}+{stamp}+{secrets.token_hex(4)}"
    folder.mkdir()
    (folder / f"{ASSIGNMENT}.ipynb").write_text(text)
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(secret)
    own(folder, owner)
    return folder


@pytest.fixture
def course(tmp_path, monkeypatch):
    """An exchange with ``pagedkv/inbound`` (closed to learners, as make hub leaves it) and an empty course."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # nbgrader runs alembic
    inbound = tmp_path / "exchange" / "pagedkv" / "inbound"
    inbound.mkdir(parents=True)
    inbound.chmod(0o751)
    (tmp_path / "course").mkdir()
    return tmp_path


def collect(root: Path, cls=OwnedCollect, update: bool = True):
    where = CourseDirectory(root=str(root / "course"), course_id="pagedkv", assignment_id=ASSIGNMENT)
    return cls(coursedir=where, root=str(root / "exchange"), update=update).start()


def submitted(root: Path, student: str) -> Path:
    return root / "course" / "submitted" / student / ASSIGNMENT


def notes(root: Path) -> dict:
    return json.loads((root / "course" / "collect.json").read_text())


def test_a_hand_in_named_for_another_is_refused_and_said(course, users):
    """Attack 1: the attacker's folder named for the victim, later than the victim's own: in nbgrader's own
    inbound/ layout its collect takes it; here it is refused in the victim's folder (where the file system
    stops a learner: tests/hub/test_home_images.py) and in the attacker's own."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    mine = entry(inbound, users["victim"], users["victim"], text="victim's work", into=None)
    time.sleep(0.01)
    forged = entry(inbound, users["attacker"], users["victim"], stamp="2026-12-07 10:00:00.000000 UTC",
                   text="all wrong", secret="attacker-chosen", into=None)
    collect(course, ExchangeCollect)   # nbgrader's own: warns, and takes the forgery
    assert (submitted(course, users["victim"]) / f"{ASSIGNMENT}.ipynb").read_text() == "all wrong"
    (course / "course" / "submitted").rename(course / "plain")
    for made, where in ((mine, users["victim"]), (forged, users["victim"])):
        made.rename(learner_folder(inbound, where) / made.name)
    entry(inbound, users["attacker"], users["victim"], stamp="2026-12-07 10:00:00.000000 UTC", text="all wrong")
    with pytest.raises(ExchangeError, match=f"names {users['victim']} but is owned by {users['attacker']}"):
        collect(course)
    got = submitted(course, users["victim"])
    assert (got / f"{ASSIGNMENT}.ipynb").read_text() == "victim's work"
    assert (got / "submission_secret.txt").read_text() == "s3cret"   # feedback goes under the victim's secret
    assert any("refused hand-in" in n for n in notes(course)["problems"][f"{users['attacker']}/{ASSIGNMENT}"])
    assert f"{users['victim']}/{ASSIGNMENT}" not in notes(course).get("unreadable", {})


def test_a_link_is_never_followed_at_any_depth(course, users, tmp_path):
    """Attack 2: a link to the instructor's solution, as the entry itself and as a file inside one."""
    secret_file = tmp_path / "solution.ipynb"
    secret_file.write_text("THE SOLUTION")
    secret_file.chmod(0o600)
    inbound = course / "exchange" / "pagedkv" / "inbound"
    linked = inbound / f"{users['attacker']}+{ASSIGNMENT}+2026-12-06 10:00:00 UTC+x"
    (tmp_path / "sol_dir").mkdir()
    (tmp_path / "sol_dir" / f"{ASSIGNMENT}.ipynb").write_text("THE SOLUTION")
    linked.symlink_to(tmp_path / "sol_dir")
    own(linked, users["attacker"])
    collect(course, ExchangeCollect)
    assert (submitted(course, users["attacker"]) / f"{ASSIGNMENT}.ipynb").read_text() == "THE SOLUTION"
    (course / "course" / "submitted").rename(course / "plain")
    linked.rename(learner_folder(inbound, users["attacker"]) / linked.name)   # in their own folder, as on the hub
    inner = entry(inbound, users["victim"], users["victim"])
    (inner / f"{ASSIGNMENT}.ipynb").unlink()
    (inner / f"{ASSIGNMENT}.ipynb").symlink_to(secret_file)
    own(inner, users["victim"])
    with pytest.raises(ExchangeError) as err:
        collect(course)
    assert "symbolic link" in str(err.value) and "THE SOLUTION" not in str(err.value)
    assert not (course / "course" / "submitted").exists() or not any((course / "course" / "submitted").rglob("*.ipynb"))
    log = notes(course)
    assert "symbolic link" in log["unreadable"][f"{users['victim']}/{ASSIGNMENT}"]


def test_a_bad_name_a_fifo_and_a_huge_file_cost_only_their_owner(course, users):
    """Attack 4: a malformed name, a FIFO (which would block a reader) and a 2 GB sparse file; the other
    learner is collected, and the attacker's earlier collected copy is kept, not deleted first."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    entry(inbound, users["attacker"], users["attacker"], text="first try")
    collect(course)
    bad = learner_folder(inbound, users["attacker"]) / "nobody+ps2_math+not-a-time"   # three parts: nbgrader's parse_utc fails on the time
    bad.mkdir()
    own(bad, users["attacker"])
    fifo_entry = entry(inbound, users["attacker"], users["attacker"])
    os.mkfifo(fifo_entry / "pipe")
    own(fifo_entry, users["attacker"])
    huge = entry(inbound, users["attacker"], users["attacker"])
    with open(huge / "big.bin", "wb") as f:
        f.truncate(2 * 2**30)
    own(huge, users["attacker"])
    entry(inbound, users["victim"], users["victim"], text="victim's work")
    with pytest.raises(ExchangeError) as err:
        collect(course)
    said = str(err.value)
    assert "not named" in said and "a FIFO" in said and "more than" in said
    assert (submitted(course, users["victim"]) / f"{ASSIGNMENT}.ipynb").read_text() == "victim's work"
    assert (submitted(course, users["attacker"]) / f"{ASSIGNMENT}.ipynb").read_text() == "first try"


def test_the_time_is_the_servers(course, users):
    """Attack 5: a backdated timestamp.txt and name; the collected copy carries the server's time."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    before = time.time()
    entry(inbound, users["victim"], users["victim"], stamp="2000-01-01 00:00:00.000000 UTC")
    collect(course)
    stamp = (submitted(course, users["victim"]) / "timestamp.txt").read_text()
    assert not stamp.startswith("2000") and stamp >= time.strftime("%Y-%m-%d %H:%M", time.gmtime(before - 60))


def test_a_link_swapped_in_after_judging_is_refused(course, users, tmp_path):
    inbound = course / "exchange" / "pagedkv" / "inbound"
    folder = entry(inbound, users["victim"], users["victim"])
    judged = judge(str(folder.parent), folder.name, ASSIGNMENT)
    (tmp_path / "secret").write_text("instructor's")
    (folder / "timestamp.txt").unlink()
    (folder / "timestamp.txt").symlink_to(tmp_path / "secret")
    with pytest.raises(Refused, match="without following a link"):
        copy_entry(str(folder.parent), judged, str(tmp_path / "out"))


def test_feedback_release_skips_only_the_learner_whose_files_are_odd(course, users):
    """Deliver 3: one learner's feedback folder without its secret costs that learner's feedback only."""
    fb = course / "course" / "feedback"
    for who, secret in ((users["victim"], "victim-secret"), (users["attacker"], None)):
        folder = fb / who / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.html").write_text(f"<p>{who}</p>")
        (folder / "timestamp.txt").write_text("2026-12-06 10:00:00 UTC")
        if secret:
            (folder / "submission_secret.txt").write_text(secret)
    where = CourseDirectory(root=str(course / "course"), course_id="pagedkv", assignment_id=ASSIGNMENT)
    with pytest.raises(ExchangeError, match=f"not released for 1: {users['attacker']}"):
        OwnedReleaseFeedback(coursedir=where, root=str(course / "exchange")).start()
    from nbgrader.utils import notebook_hash
    released = course / "exchange" / "pagedkv" / "feedback" / f"{notebook_hash(secret='victim-secret', notebook_id=ASSIGNMENT)}.html"
    assert released.read_text() == f"<p>{users['victim']}</p>"


def test_root_clears_what_a_learner_left_without_following_links(course, users, tmp_path):
    """The instructor cannot remove a learner's entry (sticky inbound/, the learner's own files, perhaps 0700);
    ``accounts.py clear-inbound`` can, and removes a link itself, never what it points at."""
    sys.path.insert(0, str(REPO / "hub"))
    from accounts import clear_inbound
    inbound = course / "exchange" / "pagedkv" / "inbound"
    locked = entry(inbound, users["attacker"], users["victim"])
    locked.chmod(0o700)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "precious").write_text("x")
    link = learner_folder(inbound, users["attacker"]) / f"{users['attacker']}+{ASSIGNMENT}+t+x"
    link.symlink_to(kept)
    old = entry(inbound, users["attacker"], users["attacker"], into=None)   # left in inbound/ itself before folders
    other = entry(inbound, users["victim"], users["victim"])
    other = other.rename(other.parent / f"{users['victim']}+ps1_intuition+t+y")
    with pytest.raises(ValueError, match="--entry 'nope'"):
        clear_inbound(course / "exchange", "pagedkv", ASSIGNMENT, ["nope"])
    assert locked.exists()
    assert clear_inbound(course / "exchange", "pagedkv", ASSIGNMENT, [locked.name]) == [locked.name]
    assert not locked.exists() and link.is_symlink()
    assert sorted(clear_inbound(course / "exchange", "pagedkv", ASSIGNMENT)) == sorted([link.name, old.name])
    assert (kept / "precious").read_text() == "x" and other.exists() and not link.is_symlink() and not old.exists()
    assert sorted(p.name for p in inbound.iterdir()) == sorted(users.values())   # the learners' folders stay


def test_a_refused_entry_is_noted_once_however_often_collect_runs(course, users):
    """collect.json keeps one note per refused entry: an instructor who collects three times sees one, not three."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    entry(inbound, users["attacker"], users["victim"])
    for _ in range(3):
        with pytest.raises(ExchangeError):
            collect(course)
    refusals = [n for n in notes(course)["problems"][f"{users['attacker']}/{ASSIGNMENT}"] if "refused" in n]
    assert len(refusals) == 1, refusals


def test_every_name_a_learner_chose_is_quoted_short_in_what_the_instructor_reads(course, users):
    """Long names, a deep path and terminal control characters: collect's error and each status note stay short,
    escaped, and name at most a few entries; feedback release's error too."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    for i in range(30):   # malformed names (three parts), 200 characters and an escape sequence each
        (learner_folder(inbound, users["attacker"]) / f"{'x' * 180}\x1b[2J{i:03d}+{ASSIGNMENT}+t").mkdir()
    own(inbound / users["attacker"], users["attacker"])
    deep = entry(inbound, users["attacker"], users["attacker"])
    folder = deep
    for _ in range(10):
        folder = folder / ("d" * 200)
        folder.mkdir()
    os.mkfifo(folder / "pipe")
    own(deep, users["attacker"])
    with pytest.raises(ExchangeError) as err:
        collect(course)
    said = str(err.value)
    assert "\x1b" not in said and len(said) < 3000 and said.endswith("and 21 more"), (len(said), said[-200:])
    log = json.dumps(notes(course))
    assert "\x1b" not in log and len(log) < 5000, len(log)
    theirs = notes(course)["problems"][f"{users['attacker']}/{ASSIGNMENT}"]
    assert len(theirs) == 11 and "31, 21 of them not named" in theirs[-1], theirs[-1]
    assert "a FIFO" in notes(course)["unreadable"][f"{users['attacker']}/{ASSIGNMENT}"]
    fb = course / "course" / "feedback" / users["attacker"] / ASSIGNMENT
    fb.mkdir(parents=True)
    (fb / f"{'n' * 240}.html").write_text("<p>no secret beside it</p>")
    where = CourseDirectory(root=str(course / "course"), course_id="pagedkv", assignment_id=ASSIGNMENT)
    with pytest.raises(ExchangeError) as err:
        OwnedReleaseFeedback(coursedir=where, root=str(course / "exchange")).start()
    assert "n" * 100 not in str(err.value) and users["attacker"] in str(err.value)


def test_a_hand_in_that_fails_midway_leaves_no_partial_copy(course, users):
    """A folder named timestamp.txt fails collect after the copy: the entry is refused, no ``.collecting``
    folder is left where autograde would read it as a set, and the refusal does not show the course's path."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    handed = entry(inbound, users["victim"], users["victim"])
    (handed / "timestamp.txt").unlink()
    (handed / "timestamp.txt").mkdir()
    (handed / "timestamp.txt" / "x").write_text("x")
    own(handed, users["victim"])
    with pytest.raises(ExchangeError) as err:
        collect(course)
    assert "could not be collected (Is a directory)" in str(err.value) and str(course) not in str(err.value)
    assert sorted(p.name for p in (course / "course" / "submitted").rglob("*")) == [users["victim"]]


def test_a_taken_entrys_name_is_quoted_short_in_collects_log(course, users, caplog):
    """Formgrader shows collect's log: the name of an entry that is taken is the learner's words there too."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    folder = entry(inbound, users["victim"], users["victim"])
    folder.rename(folder.parent / f"{users['victim']}+{ASSIGNMENT}+{'t' * 200}\x1b[2J+x")
    caplog.set_level(logging.INFO, logger="traitlets")
    collect(course)
    said = [r.getMessage() for r in caplog.records if "Collected submission" in r.getMessage()]
    assert said and all("\x1b" not in m and len(m) < 200 for m in said), said


def test_an_entry_is_taken_only_from_its_own_learners_folder(course, users):
    """The hub's layout: an entry counts only inside ``inbound/<learner>/`` of the learner it names and who owns
    it (entry and folder); one in ``inbound/`` itself or in a folder its learner does not own is refused."""
    inbound = course / "exchange" / "pagedkv" / "inbound"
    entry(inbound, users["victim"], users["victim"], text="victim's work")
    entry(inbound, users["attacker"], users["attacker"], into=users["victim"])   # theirs, in the victim's folder
    entry(inbound, users["attacker"], users["attacker"], into=None)   # in inbound/ itself
    with pytest.raises(ExchangeError) as err:
        collect(course)
    said = str(err.value)
    assert f"but is in {users['victim']!r}'s folder" in said and "is not in its learner's folder" in said, said
    assert (submitted(course, users["victim"]) / f"{ASSIGNMENT}.ipynb").read_text() == "victim's work"
    assert not submitted(course, users["attacker"]).exists()
    shutil.rmtree(course / "course" / "submitted")
    for made in inbound.iterdir():
        shutil.rmtree(made)
    entry(inbound, users["attacker"], users["attacker"])
    own(inbound / users["attacker"], users["victim"])   # the attacker's folder, but not owned by them
    with pytest.raises(ExchangeError, match=f"inbound folder {users['attacker']!r} is not {users['attacker']!r}'s own"):
        collect(course)
    assert not (course / "course" / "submitted").exists() or not any((course / "course" / "submitted").iterdir())
