"""Copy detection: a failed answer that is right for another learner's numbers, said to the instructor.

While grading, the judge keeps each test's record of results and verdict in the job's folder
(``grading/judged_records.py``: plain data, instructor-side, never in a sandbox or a feedback page). After the class is graded, each test a student failed whose
record holds values (``_t.value``: numbers the learner set) is judged again on other numbers: the
practice numbers, and the numbers of each classmate who handed in the same values for that test and
passed it (the same values failing for both say nothing, and are not judged again). A
test that passes on someone else's numbers, and failed on the student's own, is flagged "matches the
numbers of <student>" when at least :data:`MIN_MATCHES` of a student's failed answers pass on the same
other numbers. It already scored 0 there; the flag goes to the status, for the instructor, who judges:
it says the numbers coincide, not who copied.

What this cannot see: an answer copied from a classmate who did not hand that value in, and answers
written as code (code that reads ``V`` computes each learner's own numbers: that is the method, shared).
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from ...plain_values import digest
from ...protocol import JOBS_DIR, JUDGED_FILE, RECORD_MIME, Entry, EntryKind
from ..grading.judge import Missing, RecordedAnswers, judge_notebook

MIN_MATCHES = 2
"""Failed answers that must pass on the same other numbers before a student is flagged. One is not
enough: a common slip often lands on some classmate's right answer when answers span a small range
(ps1's block ids, then 1-99). Simulated for ps1 with block ids 1-99, every answer a catalogued slip and
exact values: one match flagged 194 of 200 students, two matches from one classmate 3 of 200 (1 of 100 in a
class of 100). The ids now span 1-999, which makes a chance match rarer; that range was not simulated."""


class SavedRecords(Mapping):
    """``{student: tests}`` the judge kept for ``assignment`` in this run (``grading/judged_records.py``), each
    student's read from disk when asked for and never kept here: a class's records together are too big
    to hold (a ps3 notebook's are megabytes of JSON, several times that as Python objects, and the
    grading process's memory grew with the class while :func:`find` held them all). A damaged file reads
    as no entry (``get`` gives None)."""

    def __init__(self, root: Path, assignment: str):
        folder = Path(root) / JOBS_DIR / assignment
        self._files = {p.parent.name: p for p in sorted(folder.glob(f"*/{JUDGED_FILE}"))} if folder.is_dir() else {}

    def __getitem__(self, student: str) -> dict:
        try:
            tests = json.loads(self._files[student].read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            raise KeyError(student) from None
        if not (isinstance(tests, dict) and all(isinstance(t, dict) for t in tests.values())):
            raise KeyError(student)
        return tests

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


class _OnOtherNumbers(RecordedAnswers):
    """The judge's stand-in when a record is judged on numbers it was not made for: a call of the
    learner's code recorded on other inputs is skipped, as if it had raised (a follow-through of an
    earlier slip then falls back to the right formula), and the record need not be used up."""

    def take(self, kind: str, label: str, inputs):
        entry = self._peek()
        if (entry is not None and kind in EntryKind.WITH_INPUTS and (entry.kind, entry.label) == (kind, label)
                and entry.inputs != digest(inputs)):
            self.pos += 1
            raise Missing(f"{label} was recorded on other inputs")
        return super().take(kind, label, inputs)

    def __exit__(self, kind, exc, tb) -> bool:
        return False


def _values(record) -> list | None:
    """The outcomes of a record's ``value`` entries (what the learner set), or None if it has none."""
    entries = record.get("entries") if isinstance(record, dict) else None
    if not isinstance(entries, list):
        return None
    found = [e.outcome for e in map(Entry.from_wire, entries) if e is not None and e.kind == EntryKind.VALUE]
    return found or None


def _cell(gid: str, record=None) -> dict:
    outputs = [] if record is None else [{"output_type": "display_data", "data": {RECORD_MIME: record}}]
    return {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": gid}}, "outputs": outputs}


def passes_on(trusted: dict, gid: str, record: dict, key: str) -> bool:
    """Would test ``gid`` pass with ``record`` on the numbers of ``key``?"""
    setup = [g for g, (_, test) in trusted.items() if not test]
    cells = [_cell(g) for g in setup] + [_cell(gid, record)]
    verdicts, _ = judge_notebook(cells, {g: trusted[g] for g in [*setup, gid]}, key, replay=_OnOtherNumbers)
    return verdicts[gid].passed


def _summary(tests: dict) -> dict[str, tuple[bool, list | None]]:
    """``{test: (passed, the values its record holds or None)}``: what comparing needs of one student's
    records, without the records."""
    return {gid: (bool(test.get("passed")), _values(test.get("record"))) for gid, test in tests.items()}


def find(trusted: dict, saved: Mapping[str, dict], keys: dict[str, str],
         failed: dict[str, str] | None = None) -> dict[str, list[str]]:
    """``{student: ["<test>: matches the numbers of <other>", ...]}`` for the class's ``saved`` records.

    ``trusted`` is the assignment's instructor cells (``judge.trusted_from_gradebook``); ``keys`` each
    student's variant key ("" or missing: the practice numbers). ``saved`` maps each student to their
    judged tests (:class:`SavedRecords` reads them from disk when asked); each student's
    are asked for at most twice, once to note their values and verdicts, once more only if one of their
    answers is judged again, so the class's records are never held together. A student whose records
    cannot be compared (any error while judging them again) is left out, with the reason in ``failed``.
    """
    flags: dict[str, list[str]] = {}
    summaries = {}
    for student in saved:
        try:
            tests = saved.get(student)
            if tests is not None:
                summaries[student] = _summary(tests)
        except Exception as err:  # noqa: BLE001 (one student's records never stop the others')
            if failed is not None:
                failed[student] = f"{type(err).__name__}: {str(err)[:200]}"
        tests = None  # not held while the next student's are read
    for student, summary in summaries.items():
        try:
            _compare(student, summary, saved, trusted, summaries, keys, flags)
        except Exception as err:  # noqa: BLE001 (one student's records never stop the others')
            flags.pop(student, None)
            if failed is not None:
                failed[student] = f"{type(err).__name__}: {str(err)[:200]}"
    return flags


def _compare(student: str, summary: dict, saved: Mapping[str, dict], trusted: dict, summaries: dict, keys: dict,
             flags: dict) -> None:
    """Add ``student``'s flags to ``flags`` (see :func:`find`); their records are read only to judge one again."""
    own, matched, tests = keys.get(student, ""), {}, None  # label -> the tests that pass on those numbers
    for gid, (passed, mine) in summary.items():
        if passed or mine is None or gid not in trusted:
            continue
        others = [(f"the numbers of {o}", keys.get(o, "")) for o, theirs in sorted(summaries.items())
                  if o != student and gid in theirs and theirs[gid][0] and theirs[gid][1] == mine]
        for label, key in [("the practice numbers", ""), *others]:
            if key == own:
                continue
            tests = saved[student] if tests is None else tests
            if passes_on(trusted, gid, tests[gid]["record"], key):
                matched.setdefault(label, []).append(gid)
    for label, gids in matched.items():
        if len(gids) >= MIN_MATCHES:
            flags.setdefault(student, []).extend(
                f"{gid}: the answer matches {label}, not this student's own" for gid in gids)
