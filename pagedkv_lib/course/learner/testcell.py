"""What a graded test cell runs in your kernel: it calls your code on the test's inputs, shows you the
visible checks' one-line verdicts, and hands your results to the grader as plain data.

A test cell reads::

    from pagedkv_lib.course.learner import testcell as _testcell
    from pagedkv_lib.course.learner.pset_checks import ps2_math as _visible
    with _testcell.begin("q2_tests") as _t:
        _checks, _blocks = _visible.q2_tests(_t, V)   # the worked examples, run on your blocks_needed

where ``q2_tests`` takes your function through ``t.yours("blocks_needed")`` (each call's result is
recorded) and checks it with ``t.checks.check_value("blocks_needed(15, 4)", blocks(15, 4), 4, ...)``.

Every call through ``_t.yours``, every ``_t.value`` and ``_t.run`` adds one entry to the test's
record. Leaving the ``with`` block, however it is left, shows the record once, as an output of type
``RECORD_MIME``: the record's format, its entries and their labels are the contract in
``course/protocol.py`` (values encoded by ``course/plain_values.py``). Nothing here decides a score. The grader runs the same cell in its own
process, with the record standing in for your code, and with checks your kernel never receives
(``instructor/grading/judge.py``); so the checks you see here are for you, before handing in.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

from . import checks as _checks_module
from . import run_time_patches as _patches
from ..plain_values import decode, digest, encode
from ..protocol import (CHECK_FAILED, INSTANCE_TAG, NOT_WRITTEN, PASS_MIME, PATCHED_MAX_NAMES, RECORD_MAX_BYTES, RECORD_MIME,
                        Entry, EntryKind, Record, attr_label, instance_label, item_label, ok, raised, too_big)

#: What a recorder may hold on itself; anything more (a method set on the instance) is a patch.
_OWN = frozenset({"grade_id", "_namespace", "entries", "_instances"})


class Recorder:
    """One test cell's record, filled as the cell calls your code (see the module docstring)."""

    checks = _checks_module

    def __init__(self, grade_id: str, namespace: dict):
        self.grade_id, self._namespace = grade_id, namespace
        self.entries: list[Entry] = []
        self._instances = 0
        _patches.found()  # the whole comparison with the files, before anything is recorded

    def _add(self, kind: str, label: str, inputs: Any, outcome: dict) -> None:
        if not _patches.unchanged_since():  # something moved since the last whole comparison: look again
            _patches.found()
        self.entries.append(Entry(kind, label, digest(inputs), outcome))

    def _guarded(self, kind: str, label: str, inputs: Any, fn, *args, **kwargs):
        """Run ``fn`` and record its result or its one-line failure; return the result or raise that failure."""
        __tracebackhide__ = True
        try:
            result = fn(*args, **kwargs)
        except _checks_module.CheckFailed as failed:
            what = NOT_WRITTEN if isinstance(failed, _checks_module.NotWritten) else CHECK_FAILED
            self._add(kind, label, inputs, raised(what, failed))
            raise
        return result

    def yours(self, name: str) -> Any:
        """Your function or class ``name`` (from the notebook), each call's result recorded."""
        __tracebackhide__ = True
        namespace = self._namespace
        guarded = self._guarded(EntryKind.YOURS, name, None, _checks_module.yours_in, namespace, name)
        self._add(EntryKind.YOURS, name, None, ok(None))
        return _Recorded(self, guarded, name)

    def value(self, name: str) -> Any:
        """The plain value of your variable ``name`` (None if it is not set), recorded."""
        return self._kept(EntryKind.VALUE, name, None, self._namespace.get(name))

    def _kept(self, kind: str, label: str, inputs: Any, value: Any) -> Any:
        """Record ``value`` as data; return what the grader will read back (so both sides see the same)."""
        data = encode(value)
        self._add(kind, label, inputs, ok(data))
        return decode(data)

    def run(self, label: str, fn, *args: Any) -> Any:
        """``fn(*args)`` (test code that drives yours, such as a kernel launch), its plain result recorded."""
        __tracebackhide__ = True
        try:
            result = fn(*args)
        except _checks_module.CheckFailed as failed:
            self._add(EntryKind.RUN, label, args, raised(CHECK_FAILED, failed))
            raise
        except Exception as exc:  # a learner's kernel that cannot run: one line, as from yours
            message = f"{label} raised {_checks_module.describe(exc)}"
            self._add(EntryKind.RUN, label, args, raised(CHECK_FAILED, message))
            raise _checks_module.CheckFailed(message) from None
        return self._kept(EntryKind.RUN, label, args, result)

    def reference(self, module: str, name: str) -> Any:
        """The library's ``module.name`` for your visible checks, or None where it is hidden (while grading)."""
        found = getattr(importlib.import_module(module), name)
        return None if getattr(found, "__pagedkv_hidden__", False) else found

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        from IPython.display import display
        import json
        patched = _patches.found() + [f"the recorder's own {name}" for name in _patches.holds_own(self, _OWN)]
        if patched:  # results recorded through changed code are not the learner's: none are sent
            shown = patched[:PATCHED_MAX_NAMES] + ([f"{len(patched) - PATCHED_MAX_NAMES} more"] if len(patched) > PATCHED_MAX_NAMES else [])
            display({RECORD_MIME: Record(self.grade_id, [], tuple(shown)).to_wire(),
                     "text/plain": f"{self.grade_id}: the grading code in this kernel was changed while it ran "
                                   f"({', '.join(shown)}); no results are recorded, and this test scores 0"}, raw=True)
            return False
        record = Record(self.grade_id, self.entries).to_wire()
        if len(json.dumps(record)) > RECORD_MAX_BYTES:
            record = too_big(self.grade_id)
        display({RECORD_MIME: record, "text/plain": f"{self.grade_id}: {len(self.entries)} results recorded for the grader"},
                raw=True)
        if kind is None:
            display({PASS_MIME: {"grade_id": self.grade_id},
                     "text/plain": f"{self.grade_id}: the checks in this cell passed."}, raw=True)
        if isinstance(exc, _checks_module.Skipped):  # not an error here: the grader scores it 0 from the record
            print(exc)
            return True
        return False


class _Recorded:
    """Your callable; each call goes through the checks' guard and its result (or failure) is recorded."""

    __slots__ = ("_rec", "_target", "_label")

    def __init__(self, rec: Recorder, target: Any, label: str):
        self._rec, self._target, self._label = rec, target, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        rec, label = self._rec, self._label
        result = rec._guarded(EntryKind.CALL, label, [args, kwargs], self._target, *args, **kwargs)
        if isinstance(result, _checks_module.GuardedInstance):
            rec._instances += 1
            instance = rec._instances
            rec._add(EntryKind.CALL, label, [args, kwargs], ok({INSTANCE_TAG: instance}))
            return _RecordedInstance(rec, result, instance_label(label, instance))
        return rec._kept(EntryKind.CALL, label, [args, kwargs], result)

    def __getitem__(self, key: Any) -> "_Recorded":
        return _Recorded(self._rec, self._target[key], item_label(self._label, key))


class _RecordedInstance:
    """An object of your class: its methods are recorded like your functions, its other attributes read once."""

    __slots__ = ("_rec", "_target", "_label")

    def __init__(self, rec: Recorder, target: Any, label: str):
        self._rec, self._target, self._label = rec, target, label

    def __getattr__(self, attr: str) -> Any:
        __tracebackhide__ = True
        rec, label = self._rec, attr_label(self._label, attr)
        value = rec._guarded(EntryKind.ATTR, label, None, getattr, self._target, attr)
        if isinstance(value, _checks_module.Guarded):
            return _Recorded(rec, value, label)
        return rec._kept(EntryKind.ATTR, label, None, value)


def begin(grade_id: str) -> Recorder:
    """Start test cell ``grade_id``: ``with begin(...) as _t:`` records what the cell asks of your code."""
    return Recorder(grade_id, sys._getframe(1).f_globals)
