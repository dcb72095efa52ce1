"""What a graded test cell runs in your kernel: it calls your code on the test's inputs, shows you the
visible checks' one-line verdicts, and hands your results to the grader as plain data.

A test cell reads::

    from pagedkv_lib.course.learner import testcell as _testcell
    with _testcell.begin("q2_tests") as _t:
        _checks = _t.checks
        _blocks = _t.yours("blocks_needed")       # your function: each call's result is recorded
        _checks.check_value("blocks_needed(15, 4)", _blocks(15, 4), 4, ...)

Every call through ``_t.yours``, every ``_t.value`` and ``_t.run`` adds one entry to the test's
record. Leaving the ``with`` block, however it is left, shows the record once, as an output of type
:data:`RECORD_MIME`: ``{"grade_id": ..., "entries": [[kind, label, inputs digest, outcome], ...]}``
with the outcome ``{"ok": value}`` or ``{"raised": "CheckFailed" | "NotWritten", "message": ...}``
(values encoded by ``record.py``). Nothing here decides a score. The grader runs the same cell in its own
process, with the record standing in for your code, and with checks your kernel never receives
(``instructor/judge.py``); so the checks you see here are for you, before handing in.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

from . import checks as _checks_module
from .record import RECORD_MAX_BYTES, decode, digest, encode

#: The mime type of a test's record of results, read by the grader outside the kernel.
RECORD_MIME = "application/vnd.pagedkv.result+json"
#: The mime type of the marker a test cell shows when every visible check in it passed.
PASS_MIME = "application/vnd.pagedkv.test-passed+json"


class Recorder:
    """One test cell's record, filled as the cell calls your code (see the module docstring)."""

    checks = _checks_module

    def __init__(self, grade_id: str, namespace: dict):
        self.grade_id, self._namespace = grade_id, namespace
        self.entries: list = []
        self._instances = 0

    def _add(self, kind: str, label: str, inputs: Any, outcome: dict) -> None:
        self.entries.append([kind, label, digest(inputs), outcome])

    def _guarded(self, kind: str, label: str, inputs: Any, fn, *args, **kwargs):
        """Run ``fn`` and record its result or its one-line failure; return the result or raise that failure."""
        __tracebackhide__ = True
        try:
            result = fn(*args, **kwargs)
        except _checks_module.CheckFailed as failed:
            self._add(kind, label, inputs, {"raised": type(failed).__name__ if isinstance(failed, _checks_module.NotWritten)
                                            else "CheckFailed", "message": str(failed)[:500]})
            raise
        return result

    def yours(self, name: str) -> Any:
        """Your function or class ``name`` (from the notebook), each call's result recorded."""
        __tracebackhide__ = True
        namespace = self._namespace
        guarded = self._guarded("yours", name, None, _checks_module.yours_in, namespace, name)
        self._add("yours", name, None, {"ok": None})
        return _Recorded(self, guarded, name)

    def value(self, name: str) -> Any:
        """The plain value of your variable ``name`` (None if it is not set), recorded."""
        return self._kept("value", name, None, self._namespace.get(name))

    def _kept(self, kind: str, label: str, inputs: Any, value: Any) -> Any:
        """Record ``value`` as data; return what the grader will read back (so both sides see the same)."""
        data = encode(value)
        self._add(kind, label, inputs, {"ok": data})
        return decode(data)

    def run(self, label: str, fn, *args: Any) -> Any:
        """``fn(*args)`` (test code that drives yours, such as a kernel launch), its plain result recorded."""
        __tracebackhide__ = True
        try:
            result = fn(*args)
        except _checks_module.CheckFailed as failed:
            self._add("run", label, args, {"raised": "CheckFailed", "message": str(failed)[:500]})
            raise
        except Exception as exc:  # a learner's kernel that cannot run: one line, as from yours
            message = f"{label} raised {_checks_module.describe(exc)}"
            self._add("run", label, args, {"raised": "CheckFailed", "message": message[:500]})
            raise _checks_module.CheckFailed(message) from None
        return self._kept("run", label, args, result)

    def reference(self, module: str, name: str) -> Any:
        """The library's ``module.name`` for your visible checks, or None where it is hidden (while grading)."""
        found = getattr(importlib.import_module(module), name)
        return None if getattr(found, "__pagedkv_hidden__", False) else found

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        from IPython.display import display
        import json
        record = {"grade_id": self.grade_id, "entries": self.entries}
        if len(json.dumps(record)) > RECORD_MAX_BYTES:
            record = {"grade_id": self.grade_id, "entries": [], "too_big": True}
        display({RECORD_MIME: record, "text/plain": f"{self.grade_id}: {len(self.entries)} results recorded for the grader"},
                raw=True)
        if kind is None:
            display({PASS_MIME: {"grade_id": self.grade_id},
                     "text/plain": f"{self.grade_id}: the checks in this cell passed."}, raw=True)
        return False


class _Recorded:
    """Your callable; each call goes through the checks' guard and its result (or failure) is recorded."""

    __slots__ = ("_rec", "_target", "_label")

    def __init__(self, rec: Recorder, target: Any, label: str):
        self._rec, self._target, self._label = rec, target, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        rec, label = self._rec, self._label
        result = rec._guarded("call", label, [args, kwargs], self._target, *args, **kwargs)
        if isinstance(result, _checks_module.GuardedInstance):
            rec._instances += 1
            instance = rec._instances
            rec._add("call", label, [args, kwargs], {"ok": {"__instance__": instance}})
            return _RecordedInstance(rec, result, f"{label}#{instance}")
        return rec._kept("call", label, [args, kwargs], result)

    def __getitem__(self, key: Any) -> "_Recorded":
        return _Recorded(self._rec, self._target[key], f"{self._label}[{key!r}]")


class _RecordedInstance:
    """An object of your class: its methods are recorded like your functions, its other attributes read once."""

    __slots__ = ("_rec", "_target", "_label")

    def __init__(self, rec: Recorder, target: Any, label: str):
        self._rec, self._target, self._label = rec, target, label

    def __getattr__(self, attr: str) -> Any:
        __tracebackhide__ = True
        rec, label = self._rec, f"{self._label}.{attr}"
        value = rec._guarded("attr", label, None, getattr, self._target, attr)
        if isinstance(value, _checks_module.Guarded):
            return _Recorded(rec, value, label)
        return rec._kept("attr", label, None, value)


def begin(grade_id: str) -> Recorder:
    """Start test cell ``grade_id``: ``with begin(...) as _t:`` records what the cell asks of your code."""
    return Recorder(grade_id, sys._getframe(1).f_globals)
