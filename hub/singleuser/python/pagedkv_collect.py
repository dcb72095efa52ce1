"""nbgrader's collect and release-feedback for the class hub, where a hand-in is a folder a learner wrote.

On the hub each learner hands in to ``inbound/<learner>/``, a folder on their own disk that only they can
write (``hub/inbound_folders.py``); ``inbound/`` itself is closed to learners. ``OwnedCollect`` reads entries
there, and still believes no name a learner wrote: the folder must be a folder owned by the learner it is
named for, and an entry in it must name that same learner. An entry found in ``inbound/`` itself is refused.
It takes a hand-in as a student's only when the hub's own record says that student made it:
the entry is owned by the student's uid, and holds nothing but folders and regular files of theirs, within
a size and a file count (``pagedkv_lib.course.instructor.intake.inbound_entries``). Its time is the
server's, never the learner's ``timestamp.txt`` (which it overwrites in the collected copy). An entry that
fails is never read; it is logged, and written into the course's ``collect.json`` once per entry however
often collect runs (its owner's status says so at the next autograde), and collect goes on with the rest,
then ends with an error that lists the refused entries, so formgrader shows it as a failure, not a success.
Every name a learner chose is quoted escaped and cut short, and only the first few entries are named. A
student's earlier collected copy is replaced only once a new one has been copied whole; a partial copy is
removed on every way out.

``OwnedReleaseFeedback`` releases each student's feedback on its own: a student whose feedback folder lacks
its ``submission_secret.txt`` (or holds one that cannot be read) is named in the log and skipped; the rest
are released, and it ends with an error naming the skipped.

Only the instructor's nbgrader configuration names these (``hub/singleuser/instructor/nbgrader_config.py``);
they import the grader, which learners' servers do not have.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import stat
from datetime import datetime, timezone

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.utils import notebook_hash
from pagedkv_lib.course.instructor.course_layout import COLLECT_LOG
from pagedkv_lib.course.instructor.intake.inbound_entries import Refused, copy_entry, judge, owner_name, shown
from pagedkv_lib.course.instructor.intake.submission_bounds import file_kind

SHOWN_REFUSALS = 10
"""Most refused entries named in collect's error, and most notes on one student's status: a learner can make
thousands of entries, and each note quotes a name they chose (cut by ``inbound_entries.shown``)."""
REFUSED, UNNAMED = "refused hand-in ", "refused hand-ins at the last collect: "
"""How a status note on one refused entry begins, and the note that counts those not named."""


def server_time(seconds: float) -> str:
    """``seconds`` since the epoch as nbgrader writes a timestamp (UTC)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


class OwnedCollect(ExchangeCollect):
    """nbgrader's collect, taking only the entries each student owns (see the module docstring)."""

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        assignment, wanted = self.coursedir.assignment_id, self.coursedir.student_id or "*"
        self.refused = {}   # entry name -> (owner, why)
        taken = {}
        for top in sorted(os.listdir(self.inbound_path)):
            if f"+{assignment}+" in top:   # an entry in inbound/ itself, where no learner can write any more
                self._refuse(top, f"inbound entry {shown(top)} is not in its learner's folder inbound/<learner>/",
                             self.inbound_path)
            if "+" in top or (wanted != "*" and top != wanted):
                continue
            folder = os.path.join(self.inbound_path, top)
            for name in self._entries(folder, top, assignment):
                try:
                    entry = judge(folder, name, assignment)
                    if entry.student != top:
                        raise Refused(f"inbound entry {shown(name)} names {shown(entry.student)} but is in "
                                      f"{shown(top)}'s folder: not taken")
                except Refused as err:
                    self._refuse(name, str(err), folder)
                    continue
                except OSError as err:   # removed or unreadable meanwhile
                    self._refuse(name, f"inbound entry {shown(name)} could not be examined ({err.strerror})", folder)
                    continue
                entry.folder = folder
                taken.setdefault(entry.student, []).append(entry)
        self.duedate = self._duedate()
        self.src_records = [self._choose(entries) for entries in taken.values()]

    def _entries(self, folder: str, learner: str, assignment: str) -> list:
        """The names of ``assignment``'s entries in the learner's folder ``inbound/<learner>/``; none, and the
        folder refused, when it is not a folder (a link) or not owned by the learner it is named for."""
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or owner_name(info.st_uid) != learner:
                raise Refused(f"inbound folder {shown(learner)} is not {shown(learner)}'s own folder "
                              f"({file_kind(info.st_mode)} of {owner_name(info.st_uid)}'s): nothing in it taken")
            return [n for n in sorted(os.listdir(folder)) if f"+{assignment}+" in n]
        except Refused as err:
            self._refuse(learner, str(err), self.inbound_path)
        except OSError as err:
            self._refuse(learner, f"inbound folder {shown(learner)} could not be listed ({err.strerror})",
                         self.inbound_path)
        return []

    def _refuse(self, name: str, why: str, folder: str) -> None:
        try:
            owner = owner_name(os.lstat(os.path.join(folder, name)).st_uid)  # a link's own owner
        except OSError:
            owner = "unknown"
        self.refused[name] = (owner, why)
        self.log.error("refused (never read): %s", why)

    def _duedate(self):
        from nbgrader.api import Gradebook, MissingEntry
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                return gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                return None

    def _choose(self, entries: list) -> dict:
        """The latest entry by the server's time; with ``before_duedate``, the latest before the due date."""
        entries = sorted(entries, key=lambda e: e.time, reverse=True)
        if self.duedate is not None and self.before_duedate:
            due = self.duedate.replace(tzinfo=timezone.utc).timestamp()
            entries = [e for e in entries if e.time <= due] or entries
        e = entries[0]
        return {"username": e.student, "filename": e.name, "entry": e,
                "timestamp": datetime.fromtimestamp(e.time, timezone.utc).replace(tzinfo=None)}

    def copy_files(self):
        self.log.info("Processing %d submissions of '%s' for course '%s'", len(self.src_records),
                      self.coursedir.assignment_id, self.coursedir.course_id)
        for rec in self.src_records:
            try:
                self._collect_one(rec)
            except Refused as err:
                self._refuse(rec["filename"], str(err), rec["entry"].folder)
            except OSError as err:   # our own paths stay out of what the learner's status may show
                self._refuse(rec["filename"], f"inbound entry {shown(rec['filename'])} could not be collected "
                                              f"({err.strerror or type(err).__name__})", rec["entry"].folder)
        self._record_refusals()
        if self.refused:
            self.fail(f"collected the others; refused {len(self.refused)} inbound entries (never read): "
                      + _listed([why for _, why in self.refused.values()]))

    def _collect_one(self, rec: dict) -> None:
        student, entry = rec["username"], rec["entry"]
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, self.coursedir.assignment_id)
        if os.path.isdir(dest):
            existing = self.coursedir.get_existing_timestamp(dest)
            if not self.update or (existing is not None and rec["timestamp"] <= existing):
                self.log.info("No newer submission to collect: %s %s", student, self.coursedir.assignment_id)
                return
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fresh = f"{dest}.collecting"   # beside dest, so never a folder autograde reads once collect returns
        shutil.rmtree(fresh, ignore_errors=True)
        try:
            copy_entry(entry.folder, entry, fresh)
            # the server's time, whatever the learner wrote (a folder named timestamp.txt fails here: refused)
            with open(os.path.join(fresh, "timestamp.txt"), "w", encoding="utf-8") as fh:
                fh.write(server_time(entry.time))
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            os.rename(fresh, dest)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)   # on every way out, a failure's included
        self.log.info("Collected submission: %s %s (%s)", student, self.coursedir.assignment_id, shown(entry.name))

    def _record_refusals(self) -> None:
        """The refused entries into the course's ``collect.json``: notes on each owner's status (see
        :func:`_noted`), and, for a student none of whose entries was taken, the verdict ``unreadable`` with why."""
        if not self.refused:
            return
        path = os.path.join(self.coursedir.root, COLLECT_LOG)
        log = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
        taken = {r["username"] for r in self.src_records if r["filename"] not in self.refused}
        assignment = self.coursedir.assignment_id
        by_owner = {}
        for name, (owner, why) in self.refused.items():
            by_owner.setdefault(owner, {})[name] = why
            student = name.split("+", 1)[0]
            if owner == student and student not in taken:
                log.setdefault("unreadable", {})[f"{student}/{assignment}"] = f"its hand-in was refused: {why}"
        for owner, refused in by_owner.items():
            notes = log.setdefault("problems", {}).setdefault(f"{owner}/{assignment}", [])
            notes[:] = _noted(notes, refused)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(log, fh, indent=1)


def _listed(items: list) -> str:
    """``items`` joined by "; ", the first :data:`SHOWN_REFUSALS` of them, then how many more there are."""
    more = f"; and {len(items) - SHOWN_REFUSALS} more" if len(items) > SHOWN_REFUSALS else ""
    return "; ".join(items[:SHOWN_REFUSALS]) + more


def _noted(notes: list, refused: dict) -> list:
    """A status's ``notes`` with one note per refused entry (``refused``: entry name -> why): a note from an
    earlier collect on the same entry is replaced, not repeated; at most :data:`SHOWN_REFUSALS` entries are
    named, and when this collect refused more, one note says how many (replacing the last such note)."""
    heads = {f"{REFUSED}{shown(name)}: ": why for name, why in refused.items()}
    kept = [n for n in notes if not n.startswith(UNNAMED) and not any(n.startswith(h) for h in heads)]
    named = sum(n.startswith(REFUSED) for n in kept)
    fresh = [head + why for head, why in heads.items()][:max(0, SHOWN_REFUSALS - named)]
    if len(fresh) == len(heads):
        return kept + fresh
    return kept + fresh + [f"{UNNAMED}{len(heads)}, {len(heads) - len(fresh)} of them not named here"]


class OwnedReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release-feedback, one student at a time: a student's missing or odd file skips that student."""

    def copy_files(self):
        skipped = []
        for html in sorted(glob.glob(os.path.join(self.src_path, "*.html"))):
            folder, notebook_id = os.path.dirname(html), os.path.splitext(os.path.basename(html))[0]
            student = os.path.basename(os.path.dirname(folder))
            if student in set(filter(None, (self.coursedir.student_id_exclude or "").split(","))):
                continue
            try:
                with open(os.path.join(folder, "submission_secret.txt"), encoding="utf-8") as fh:
                    secret = fh.read()
                if not secret.strip():
                    raise ValueError("its submission_secret.txt is empty")
                name = notebook_hash(secret=secret, notebook_id=notebook_id)
                tmp = os.path.join(self.dest_path, f"{name}-tmp.html")
                shutil.copy(html, tmp)
                os.replace(tmp, os.path.join(self.dest_path, f"{name}.html"))
                self.log.info("Released feedback for %s on %s/%s", student, self.coursedir.assignment_id,
                              shown(notebook_id))
            except (OSError, ValueError) as err:
                why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                skipped.append(f"{student} ({shown(notebook_id)}: {why})")   # a file name the learner chose
                self.log.error("feedback not released for %s: %s", student, skipped[-1])
        if skipped:
            self.fail(f"released the others' feedback; not released for {len(skipped)}: " + _listed(skipped))
