"""The grading protocol's contract: everything that crosses a process boundary, in the one module both
sides import.

Three boundaries cross here:

- a learner's kernel -> the grader: a test cell shows one *record* (:class:`Record`, as an output of
  type :data:`RECORD_MIME`) holding one :class:`Entry` per result; the learner's recorder
  (``learner/testcell.py``) writes it and the judge's replay (``instructor/grading/judge.py``) reads it,
  and both build each entry's label with the same functions (:func:`item_label`, :func:`instance_label`,
  :func:`attr_label`), so they agree character for character;
- a lesson's prediction gate -> the class report: :data:`PREDICTION_MIME`;
- the class's autograde -> its grading worker and nbgrader's hooks: one folder per graded notebook
  (:func:`job_folder`) holding the job's parameters (:data:`JOB_FILE`), what the run saw
  (:data:`EVENTS_FILE`, one :class:`EventKind` per JSON line) and the records the judge read
  (:data:`JUDGED_FILE`).

Values inside entries are plain JSON data (``plain_values.py``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

#: The mime type of a test's record of results, read by the grader outside the kernel.
RECORD_MIME = "application/vnd.pagedkv.result+json"
#: The mime type of the marker a test cell shows when every visible check in it passed.
PASS_MIME = "application/vnd.pagedkv.test-passed+json"
#: The mime type of a committed prediction saved in the notebook (written by ``lesson.record``, read
#: for the class report by ``instructor/reporting/prediction_records.py``), and the kinds it may hold.
PREDICTION_MIME = "application/vnd.pagedkv.prediction+json"
PREDICTION_KINDS = ("choice", "number", "text")

#: Most bytes of JSON one test's record may take; a bigger one is shown as :data:`TOO_BIG` instead.
RECORD_MAX_BYTES = 8_000_000


class EntryKind:
    """What an entry records: ``YOURS`` (the learner's callable was found), ``VALUE`` (a variable's
    value), ``CALL`` (a call of the learner's code), ``RUN`` (test code driving the learner's code),
    ``ATTR`` (an attribute of the learner's object)."""

    YOURS, VALUE, CALL, RUN, ATTR = "yours", "value", "call", "run", "attr"
    ALL = frozenset({YOURS, VALUE, CALL, RUN, ATTR})
    #: kinds whose inputs the judge checks against the test's own (by digest)
    WITH_INPUTS = frozenset({CALL, RUN})


#: What an entry's outcome says was raised: a failed check, or a function still to be written.
CHECK_FAILED, NOT_WRITTEN = "CheckFailed", "NotWritten"
#: Longest message kept from a raised outcome, in characters.
MESSAGE_MAX_CHARS = 500
#: The tag of a value that is the n-th object of the learner's class made in this test.
INSTANCE_TAG = "__instance__"


def ok(value: Any) -> dict:
    """The outcome of a result: ``value`` as plain data."""
    return {"ok": value}


def raised(what: str, message: str) -> dict:
    """The outcome of a failure: ``what`` (:data:`CHECK_FAILED` or :data:`NOT_WRITTEN`) and its message."""
    return {"raised": what, "message": str(message)[:MESSAGE_MAX_CHARS]}


class Entry(NamedTuple):
    """One result in a record: its ``kind`` (:class:`EntryKind`), ``label`` (what was asked, built by the
    label functions below), ``inputs`` (digest of the call's inputs, ``plain_values.digest``) and
    ``outcome`` (:func:`ok` or :func:`raised`). On the wire it is a JSON array in this order."""

    kind: str
    label: str
    inputs: str
    outcome: dict

    @classmethod
    def from_wire(cls, data: Any) -> "Entry | None":
        """The entry ``data`` holds, or None when it is not one (wrong length or types)."""
        if not (isinstance(data, list) and len(data) == 4 and all(isinstance(x, str) for x in data[:3])):
            return None
        return cls(*data)


class Record(NamedTuple):
    """One test cell's record of results: the test's ``grade_id``, its entries in order, and ``patched``:
    what of the grading code in the kernel was found changed at run time (``learner/run_time_patches.py``;
    empty when nothing was). A record with anything in ``patched`` carries no entries, and the judge
    scores it 0 as forged."""

    grade_id: str
    entries: list
    patched: tuple = ()

    def to_wire(self) -> dict:
        return {"grade_id": self.grade_id, "entries": [list(e) for e in self.entries], PATCHED_KEY: list(self.patched)}


#: The key of a record's list of what was patched in the kernel (see :class:`Record`).
PATCHED_KEY = "patched"
#: Most names of patched code a record lists (a longer list is cut, and says how many more).
PATCHED_MAX_NAMES = 20


def too_big(grade_id: str) -> dict:
    """What a test cell shows instead of a record over :data:`RECORD_MAX_BYTES`."""
    return {"grade_id": grade_id, "entries": [], "too_big": True}


def item_label(label: str, key: Any) -> str:
    """The label of ``yours[key]`` (one entry of a learner's table of functions)."""
    return f"{label}[{key!r}]"


def instance_label(label: str, number: int) -> str:
    """The label of the ``number``-th object made by calling the learner's class ``label``."""
    return f"{label}#{number}"


def attr_label(label: str, attr: str) -> str:
    """The label of attribute ``attr`` of the learner's object ``label``."""
    return f"{label}.{attr}"


# -- the class's autograde and its grading workers: one folder per graded notebook ------------------

#: Under the course root (in the grading cache, never in a sandbox), one folder per graded notebook:
#: ``grading-cache/jobs/<assignment>/<student>/``.
JOBS_DIR = "grading-cache/jobs"
#: In a job's folder: its parameters (``instructor/grading/grading_job.py``), written before it runs.
JOB_FILE = "job.json"
#: In a job's folder: what nbgrader's hooks and the sandbox saw while it ran, one JSON object a line.
EVENTS_FILE = "events.jsonl"
#: In a job's folder: each test's record of results and verdict, as the judge saw them (copy detection).
JUDGED_FILE = "judged.json"


def job_folder(root: Path, assignment: str, student: str) -> Path:
    """The folder of the job that grades ``student``'s ``assignment`` in the course at ``root``."""
    return Path(root) / JOBS_DIR / assignment / student


class EventKind:
    """The kinds of event a grading job records (each line of :data:`EVENTS_FILE` has ``kind``)."""

    TIMEOUT, STUCK, KERNEL_DIED, RESTARTED = "timeout", "stuck", "kernel_died", "restarted"
    TAMPERED, CELLS_MISSING, HUGE_OUTPUT, EXITED = "tampered", "cells_missing", "huge_output", "exited"
    FORGED, DENIED, MEMORY, MALFORMED_OUTPUT = "forged", "denied", "memory", "malformed_output"
    DISK, BUDGET = "disk", "budget"
    HIDDEN_CALLED = "hidden_called"  # a graded function the sandbox hides, called (however it was imported)
