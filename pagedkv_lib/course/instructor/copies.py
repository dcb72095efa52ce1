"""Copy detection: a failed answer that is right for another learner's numbers, said to the instructor.

While grading, the judge keeps each test's record of results and verdict in
``grading-cache/records/<assignment>/<student>.json`` (:func:`save`: plain data, instructor-side,
never in a sandbox or a feedback page). After the class is graded, each test a student failed whose
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
from pathlib import Path

from ..learner.record import digest
from .grade import CACHE_DIR
from .judge import RECORD_MIME, Missing, Replay, judge_notebook

RECORDS = "records"
MIN_MATCHES = 2
"""Failed answers that must pass on the same other numbers before a student is flagged. One is not
enough: a common slip often lands on some classmate's right answer when answers span a small range
(ps1's block ids, 1-99). Simulated for ps1 with every answer a catalogued slip and exact values: one
match flags 194 of 200 students, two matches from one classmate 3 of 200 (1 of 100 in a class of 100)."""


def save(root: Path, assignment: str, student: str, tests: dict) -> None:
    """Keep ``{test grade_id: {"record": ..., "passed": bool}}`` for one student's graded notebook."""
    folder = Path(root) / CACHE_DIR / RECORDS / assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{student}.json").write_text(json.dumps(tests), encoding="utf-8")


def load(root: Path, assignment: str) -> dict[str, dict]:
    """``{student: tests}`` saved for ``assignment`` in this run."""
    folder = Path(root) / CACHE_DIR / RECORDS / assignment
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            tests = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # a damaged file: that student is not compared
            continue
        if isinstance(tests, dict) and all(isinstance(t, dict) for t in tests.values()):
            out[path.stem] = tests
    return out


def clear(root: Path) -> None:
    """Forget the records of an earlier run (a student graded then may not be graded now)."""
    folder = Path(root) / CACHE_DIR / RECORDS
    for path in folder.glob("*/*.json") if folder.is_dir() else []:
        path.unlink()


class _OnOtherNumbers(Replay):
    """The judge's stand-in when a record is judged on numbers it was not made for: a call of the
    learner's code recorded on other inputs is skipped, as if it had raised (a follow-through of an
    earlier slip then falls back to the right formula), and the record need not be used up."""

    def take(self, kind: str, label: str, inputs):
        entry = self._peek()
        if entry is not None and kind in ("call", "run") and entry[:2] == [kind, label] and entry[2] != digest(inputs):
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
    found = [e[3] for e in entries if isinstance(e, list) and len(e) == 4 and e[0] == "value"]
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


def find(trusted: dict, saved: dict[str, dict], keys: dict[str, str]) -> dict[str, list[str]]:
    """``{student: ["<test>: matches the numbers of <other>", ...]}`` for the class's ``saved`` records.

    ``trusted`` is the assignment's instructor cells (``judge.trusted_from_gradebook``); ``keys`` each
    student's variant key ("" or missing: the practice numbers).
    """
    flags: dict[str, list[str]] = {}
    for student, tests in saved.items():
        own, matched = keys.get(student, ""), {}  # label -> the tests that pass on those numbers
        for gid, test in tests.items():
            mine = _values(test.get("record"))
            if test.get("passed") or mine is None or gid not in trusted:
                continue
            others = [(f"the numbers of {o}", keys.get(o, "")) for o, theirs in sorted(saved.items())
                      if o != student and theirs.get(gid, {}).get("passed")
                      and _values(theirs.get(gid, {}).get("record")) == mine]
            for label, key in [("the practice numbers", ""), *others]:
                if key != own and passes_on(trusted, gid, test["record"], key):
                    matched.setdefault(label, []).append(gid)
        for label, gids in matched.items():
            if len(gids) >= MIN_MATCHES:
                flags.setdefault(student, []).extend(
                    f"{gid}: the answer matches {label}, not this student's own" for gid in gids)
    return flags
