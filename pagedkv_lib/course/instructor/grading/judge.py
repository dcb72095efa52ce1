"""Judge a graded notebook from the records its test cells showed, in the grader's own process.

The learner's kernel ran each test cell without its grader-only parts and showed one record of the
learner's results (``learner/testcell.py``). Here each test cell runs again, in full, with the record
standing in for the learner's code: ``_t.yours(name)(args)`` returns the recorded result for those
inputs, in order. Expected values, reference implementations and misconception messages live only in
this process; learner code never runs here, and a record is JSON, which holds no object to rig.

A test is judged from exactly one well-formed record with its own ``grade_id``, shown by its own cell.
No record, a second one, a record whose entries do not match the test's cases (another input, another
order, more results than asked for), a record whose recorder found the grading code in the kernel patched
at run time (``learner/run_time_patches.py``: it carries no results, only what was changed), or a record
shown by any other cell: the test scores 0 and the student is flagged ``forged record``. A kernel that stopped early leaves entries missing: that test
scores 0 with the reason, and is not flagged.
"""
from __future__ import annotations

import builtins
import importlib
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...learner import checks as trusted_checks
from ...learner.variants import KEY_ENV
from ...plain_values import decode, digest
from ...protocol import (INSTANCE_TAG, MESSAGE_MAX_CHARS, NOT_WRITTEN, PATCHED_KEY, PATCHED_MAX_NAMES, RECORD_MAX_BYTES,
                         RECORD_MIME, Entry, EntryKind, attr_label, instance_label, item_label)
from ..intake.notebook_cleaning import cell_text, is_test

#: First line of a hidden-test region that is never sent to the learner's kernel (it holds expected values).
GRADER_ONLY = "### GRADER ONLY"
_BEGIN, _END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def kernel_source(source: str) -> str:
    """``source`` without its grader-only hidden regions: what the learner's kernel is sent."""
    out, lines, i = [], source.split("\n"), 0
    while i < len(lines):
        if _BEGIN in lines[i] and i + 1 < len(lines) and lines[i + 1].strip() == GRADER_ONLY:
            while i < len(lines) and _END not in lines[i]:
                i += 1
            i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


class Missing(trusted_checks.CheckFailed):
    """The record ends before this result: the learner's kernel stopped before it (not their doing to flag)."""


class RecordMismatch(trusted_checks.CheckFailed):
    """The record does not match the test's cases: forged or tampered with in the kernel."""


@dataclass
class _InstanceTag:
    number: int


def _outcome(entry: Entry) -> Any:
    outcome = entry.outcome
    if not isinstance(outcome, dict):
        raise RecordMismatch("a malformed entry in the record of results")
    if "raised" in outcome:
        kind = trusted_checks.NotWritten if outcome["raised"] == NOT_WRITTEN else trusted_checks.CheckFailed
        raise kind(str(outcome.get("message", ""))[:MESSAGE_MAX_CHARS])
    if "ok" not in outcome:
        raise RecordMismatch("a malformed entry in the record of results")
    value = outcome["ok"]
    if isinstance(value, dict) and set(value) == {INSTANCE_TAG} and isinstance(value[INSTANCE_TAG], int):
        return _InstanceTag(value[INSTANCE_TAG])
    return decode(value)


class RecordedAnswers:
    """The judge's stand-in for the learner's kernel in one test cell: answers from the record, in order.

    It builds each entry's label with ``protocol``'s label functions, as the learner's recorder did."""

    checks = trusted_checks

    def __init__(self, grade_id: str, entries: list):
        self.grade_id, self.entries, self.pos = grade_id, entries, 0

    def _peek(self) -> Entry | None:
        if self.pos >= len(self.entries):
            return None
        entry = Entry.from_wire(self.entries[self.pos])
        if entry is None:
            raise RecordMismatch("a malformed entry in the record of results")
        return entry

    def take(self, kind: str, label: str, inputs: Any) -> Any:
        entry = self._peek()
        if entry is None:
            raise Missing(f"no result for {label}: the test stopped in your kernel before it got there "
                          "(an error above, a timeout or a crash)")
        if entry.kind != kind or entry.label != label or (kind in EntryKind.WITH_INPUTS and entry.inputs != digest(inputs)):
            raise RecordMismatch(f"the results recorded for {label} do not match this test's cases")
        self.pos += 1
        return _outcome(entry)

    def yours(self, name: str) -> "_Replayed":
        self.take(EntryKind.YOURS, name, None)
        return _Replayed(self, name)

    def value(self, name: str) -> Any:
        return self.take(EntryKind.VALUE, name, None)

    def run(self, label: str, fn, *args: Any) -> Any:
        return self.take(EntryKind.RUN, label, args)

    def reference(self, module: str, name: str) -> Any:
        """The library's own ``module.name``, here in the grader's process."""
        return getattr(importlib.import_module(module), name)

    def __enter__(self) -> "RecordedAnswers":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None and self.pos != len(self.entries):
            raise RecordMismatch(f"the record holds {len(self.entries)} results; this test asked for {self.pos}")
        return False


class _Replayed:
    __slots__ = ("_rec", "_label")

    def __init__(self, rec: RecordedAnswers, label: str):
        self._rec, self._label = rec, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self._rec.take(EntryKind.CALL, self._label, [args, kwargs])
        if isinstance(value, _InstanceTag):
            return _ReplayedInstance(self._rec, instance_label(self._label, value.number))
        return value

    def __getitem__(self, key: Any) -> "_Replayed":
        return _Replayed(self._rec, item_label(self._label, key))


class _ReplayedInstance:
    __slots__ = ("_rec", "_label")

    def __init__(self, rec: RecordedAnswers, label: str):
        self._rec, self._label = rec, label

    def __getattr__(self, attr: str) -> Any:
        rec, label = self._rec, attr_label(self._label, attr)
        entry = rec._peek()
        if entry is not None and entry.kind == EntryKind.ATTR and entry.label == label:
            return rec.take(EntryKind.ATTR, label, None)
        return _Replayed(rec, label)


class _JudgeSide:
    """What ``from pagedkv_lib.course.learner import testcell`` gives a cell run by the judge."""

    def __init__(self):
        self.current: RecordedAnswers | None = None

    def begin(self, grade_id: str) -> RecordedAnswers:
        if self.current is None or self.current.grade_id != grade_id:
            raise RecordMismatch(f"test cell {grade_id} is not the one being judged")
        return self.current


def _builtins_for(side: _JudgeSide) -> dict:
    real_import = builtins.__import__

    def judge_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "pagedkv_lib.course.learner" and fromlist and "testcell" in fromlist:
            class _Package:
                testcell = side
            return _Package
        if name == "pagedkv_lib.course.learner.testcell":
            raise ImportError("test cells import the testcell module with `from pagedkv_lib.course.learner import testcell`")
        return real_import(name, globals, locals, fromlist, level)
    return dict(vars(builtins), __import__=judge_import)


@dataclass
class Verdict:
    """The judge's verdict on one test cell; ``forged`` names what was wrong with its record, if anything."""

    grade_id: str
    passed: bool
    message: str = ""
    forged: list[str] = field(default_factory=list)


def records_in(outputs: list) -> list:
    """The records of results among a cell's outputs (whatever their content)."""
    return [o.get("data", {}).get(RECORD_MIME) for o in outputs
            if o.get("output_type") in ("display_data", "execute_result") and RECORD_MIME in o.get("data", {})]


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _source(cell) -> str:
    return cell_text(cell["source"])


def _judge_test(ns: dict, side: _JudgeSide, cell, gid: str, replay: type[RecordedAnswers] = RecordedAnswers) -> Verdict:
    found = records_in(cell.get("outputs", []))
    mine = [r for r in found if isinstance(r, dict) and r.get("grade_id") == gid]
    forged = [f"{gid}: a record for another test" for r in found if r not in mine]
    if len(mine) > 1:
        return Verdict(gid, False, f"{gid}: the cell showed {len(mine)} records of results, and exactly one is "
                       "accepted: this test scores 0.", forged + [f"{gid}: {len(mine)} records"])
    record = mine[0] if mine else {"entries": []}
    entries = record.get("entries")
    if record.get("too_big"):
        return Verdict(gid, False, f"{gid}: your results took more than {RECORD_MAX_BYTES:,} bytes; "
                       "return what the question asks for.", forged)
    patched = record.get(PATCHED_KEY, [])
    if not isinstance(entries, list) or not isinstance(patched, list) or not all(isinstance(p, str) for p in patched):
        return Verdict(gid, False, f"{gid}: the record of results is malformed: this test scores 0.",
                       forged + [f"{gid}: malformed record"])
    if patched:  # the recorder found its own code, the checks or the display publisher changed in the kernel
        names = ", ".join(p[:120] for p in patched[:PATCHED_MAX_NAMES])[:MESSAGE_MAX_CHARS]
        return Verdict(gid, False, f"{gid}: the grading code in your kernel was changed while it ran ({names}): "
                       "this test scores 0.", forged + [f"{gid}: grading code patched at run time ({names})"])
    side.current = replay(gid, entries)
    try:
        exec(compile(_source(cell), f"<test cell {gid}>", "exec"), ns)
    except RecordMismatch as err:
        return Verdict(gid, False, f"{gid}: {err}: this test scores 0.", forged + [f"{gid}: {err}"])
    except trusted_checks.CheckFailed as err:
        return Verdict(gid, False, str(err), forged)
    except AssertionError as err:
        return Verdict(gid, False, str(err) or f"{gid}: a check failed", forged)
    except Exception as err:  # the learner's data broke a check (say, a string where a number was due)
        text = " ".join(str(err).split())[:300]
        return Verdict(gid, False, f"{gid}: your results could not be checked ({type(err).__name__}: {text})", forged)
    finally:
        side.current = None
    return Verdict(gid, True, "", forged)


def trusted_cells(cells: list) -> dict[str, tuple[str, bool]]:
    """``{grade_id: (source, is_test)}`` of the locked instructor cells of a trusted notebook.

    The only code the judge ever runs. Build it from what the learner cannot touch: the gradebook
    (:func:`trusted_from_gradebook`) or a notebook in ``solutions/``.
    """
    out = {}
    for cell in cells:
        meta = _meta(cell)
        if cell.get("cell_type") == "code" and meta.get("grade_id") and not meta.get("solution") \
                and (meta.get("locked") or meta.get("grade")):
            out[meta["grade_id"]] = (_source(cell), is_test(cell))
    return out


def trusted_from_gradebook(db_url: str, notebook: str, assignment: str) -> dict[str, tuple[str, bool]]:
    """:func:`trusted_cells` as nbgrader's gradebook holds them (saved when the assignment was generated)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        nb = gb.find_notebook(notebook, assignment)
        graded = {c.name for c in nb.grade_cells}
        solutions = {c.name for c in nb.solution_cells}
        return {c.name: (c.source, c.name in graded) for c in nb.source_cells
                if c.cell_type == "code" and c.name not in solutions and (c.locked or c.name in graded)}


def judge_notebook(cells: list, trusted: dict[str, tuple[str, bool]], variant_key: str = "",
                   replay: type[RecordedAnswers] | None = None) -> tuple[dict[str, Verdict], list[str]]:
    """``({test grade_id: verdict}, [forged records in other cells])`` for an executed notebook's cells.

    ``variant_key`` is the key of the student the notebook is filed under (``intake/variant_keys.py``):
    the set-up cells read it as ``VARIANT_KEY``, so each test judges against that student's numbers.
    The learner's own key cell is not an instructor cell, so it never runs here. ``replay`` (a
    :class:`RecordedAnswers` subclass) stands in for the learner's code; copy detection passes a lenient one.

    ``trusted`` (:func:`trusted_cells`) says which grade ids are instructor cells and holds their source:
    the judge runs that source, never the submitted one. The submission only says where each cell's
    outputs are; a cell whose grade id the instructor never wrote (metadata a learner can type, such as
    ``"locked": true``) is never run, and a grade id seen a second time is not judged again.
    """
    with _variant_env(variant_key):
        return _judge_all(cells, trusted, variant_key, replay or RecordedAnswers)


@contextmanager
def _variant_env(key: str):
    """``KEY_ENV`` set to ``key`` while the judge runs, so a set-up cell cannot pick up another key."""
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = key
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = before


def _judge_all(cells: list, trusted: dict, variant_key: str, replay: type[RecordedAnswers]) -> tuple[dict, list]:
    side = _JudgeSide()
    ns: dict = {"__builtins__": _builtins_for(side), "__name__": "__pagedkv_judge__", "VARIANT_KEY": variant_key}
    verdicts, elsewhere, seen = {}, [], set()
    try:
        for index, cell in enumerate(cells):
            if cell.get("cell_type") != "code":
                continue
            gid = _meta(cell).get("grade_id")
            known = isinstance(gid, str) and gid in trusted and gid not in seen
            if known:
                seen.add(gid)
            source, test = trusted[gid] if known else ("", False)
            if test:
                verdicts[gid] = _judge_test(ns, side, dict(cell, source=source), gid, replay)
                continue
            if records_in(cell.get("outputs", [])):
                elsewhere.append(f"cell {gid or index} (not a test) showed a record of results")
            meta = _meta(cell)
            if not known and (meta.get("locked") or meta.get("grade")) and not meta.get("solution"):
                elsewhere.append(f"cell {gid or index} carries grader metadata the instructor never wrote (not run here)")
            if known:
                try:
                    exec(compile(source, f"<set-up cell {gid}>", "exec"), ns)
                except Exception as err:  # the instructor's cell needs the learner's kernel (none should): say so
                    warnings.warn(f"set-up cell {gid} failed in the judge ({type(err).__name__}: {err}); "
                                  "the tests after it may fail for every student", stacklevel=1)
    finally:  # the cells' functions hold the namespace as their globals: a cycle the collector frees late,
        ns.clear()  # with every tensor in it (copy detection judges a class's records thousands of times)
    return verdicts, elsewhere


_CHECK_MESSAGE = re.compile(r"^(CheckFailed|NotWritten|AssertionError): ")


def error_output(message: str) -> dict:
    """The error output a failed test cell gets: the judge's one-line message."""
    message = _CHECK_MESSAGE.sub("", message)
    return {"output_type": "error", "ename": "CheckFailed", "evalue": message, "traceback": [f"CheckFailed: {message}"]}
