"""Copy detection on records as the judge keeps them: whose numbers a failed answer is right for."""
from __future__ import annotations

from fractions import Fraction

import pytest

from conftest import REPO
from psets_kernel import load
from pagedkv_lib.course.instructor.reporting import copy_detection as copies
from pagedkv_lib.course.instructor.grading.judge import judge_notebook, trusted_cells
from pagedkv_lib.course.protocol import RECORD_MIME
from pagedkv_lib.course.instructor.intake.variant_keys import learner_key
from pagedkv_lib.course.plain_values import digest, encode
from pagedkv_lib.course.learner.variants import for_set

KEYS = {s: learner_key(b"copies test secret", s) for s in ("ada", "bob", "cat", "dan", "eve", "fay")}
TRUSTED = trusted_cells(load(REPO / "solutions" / "ps2_math" / "ps2_math.ipynb"))


def _q6(value) -> dict:
    """ps2's Q6 record for a learner who set ``expected_slack_slots = value`` (its test reads it twice)."""
    entry = ["value", "expected_slack_slots", digest(None), {"ok": encode(value)}]
    return {"grade_id": "q6_tests", "entries": [entry, entry]}


def _right(student: str) -> float:
    v = for_set("ps2_math", KEYS[student])
    return float(Fraction(v.q6_requests * (v.q6_block_size - 1), 2))


def _q7(value, key: str) -> dict:
    """ps2's Q7 record for ``fp8_tokens = value`` from the kernel of the learner with ``key``, whose
    kv_bytes_per_token raised (so there is no slip to follow through)."""
    entry = ["value", "fp8_tokens", digest(None), {"ok": encode(value)}]
    raised = lambda args: ["call", "kv_bytes_per_token", digest([args, {}]), {"raised": "CheckFailed", "message": "x"}]
    yours = ["yours", "kv_bytes_per_token", digest(None), {"ok": None}]
    own = (*for_set("ps2_math", key).q7_shape, 1)
    return {"grade_id": "q7_tests", "entries": [entry, entry, yours, raised((3, 2, 64, 4)), yours, raised(own)]}


def _right7(key: str) -> int:
    v = for_set("ps2_math", key)
    return v.q7_gib * 2**30 // (2 * v.q7_shape[0] * v.q7_shape[1] * v.q7_shape[2])


def _cell(gid, record=None):
    return {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": gid}},
            "outputs": [] if record is None else [{"output_type": "display_data", "data": {RECORD_MIME: record}}]}


def _saved(values: dict, q7: dict | None = None) -> dict:
    out = {}
    for s, x in values.items():
        out[s] = {"q6_tests": {"record": _q6(x), "passed": copies.passes_on(TRUSTED, "q6_tests", _q6(x), KEYS[s])}}
        if q7 and s in q7:
            record = _q7(q7[s], KEYS[s])
            cells = [_cell("setup"), _cell("q7_tests", record)]  # judged as autograde judges it
            verdicts, _ = judge_notebook(cells, {g: TRUSTED[g] for g in ("setup", "q7_tests")}, KEYS[s])
            out[s]["q7_tests"] = {"record": record, "passed": verdicts["q7_tests"].passed}
    return out


def test_answers_right_for_a_classmates_numbers_are_flagged_with_whose_from_two_on():
    practice = float(Fraction(for_set("ps2_math").q6_requests * 11, 2))
    q6 = {"ada": _right("ada"), "bob": _right("bob"), "cat": _right("bob"), "dan": practice, "eve": _right("bob"),
          "fay": 1.25}
    q7 = {"bob": _right7(KEYS["bob"]), "cat": _right7(KEYS["bob"]), "dan": _right7(""), "eve": 7}
    saved = _saved(q6, q7)
    assert [saved[s]["q6_tests"]["passed"] for s in sorted(saved)] == [True, True, False, False, False, False]
    assert saved["bob"]["q7_tests"]["passed"] and not saved["cat"]["q7_tests"]["passed"]
    flags = copies.find(TRUSTED, saved, KEYS)
    assert flags == {"cat": [f"q{q}_tests: the answer matches the numbers of bob, not this student's own" for q in (6, 7)],
                     "dan": [f"q{q}_tests: the answer matches the practice numbers, not this student's own" for q in (6, 7)]}
    # eve's Q6 is bob's too, but one answer alone is not flagged: a common slip often lands on someone's
    assert "eve" not in flags


def test_the_same_wrong_value_handed_in_by_many_is_judged_once_each_not_against_each_other(monkeypatch):
    saved = _saved({s: 1.25 for s in KEYS})
    calls = []
    real = copies.passes_on
    monkeypatch.setattr(copies, "passes_on", lambda *a: calls.append(a[3]) or real(*a))
    assert copies.find(TRUSTED, saved, KEYS) == {}
    assert calls == [""] * len(KEYS), "only the practice numbers are tried: no classmate passed with 1.25"


@pytest.mark.parametrize("record", [None, {"entries": "x"}, {"grade_id": "q6_tests", "entries": [["value"]]}, "junk"])
def test_a_malformed_record_is_not_compared(record):
    saved = {"ada": {"q6_tests": {"record": record, "passed": False}},
             "bob": {"q6_tests": {"record": _q6(_right("bob")), "passed": True}}}
    assert copies.find(TRUSTED, saved, KEYS) == {}


def test_a_follow_through_recorded_on_ones_own_inputs_is_judged_on_the_other_numbers():
    """ps2 Q5 calls the learner's kv_bytes_per_token on their own model: on bob's numbers that call was
    recorded for other inputs, so it is skipped (as if it raised) and the right formula is used."""
    ada, bob = for_set("ps2_math", KEYS["ada"]), for_set("ps2_math", KEYS["bob"])
    per_token = lambda v: 4 * v.q5_shape[0] * v.q5_shape[1] * v.q5_shape[2]
    blocks = lambda v: ((int(v.q5_utilization * v.q5_gpu_gib * 2**30) - int(v.q5_params * 2))
                        // (v.q5_block_size * per_token(v)))

    def record(value):  # as ada's kernel records it: her kv_bytes_per_token called on her own model
        entry = ["value", "gpu_blocks", digest(None), {"ok": value}]
        yours = ["yours", "kv_bytes_per_token", digest(None), {"ok": None}]
        return {"grade_id": "q5_tests", "entries": [
            entry, entry, yours, ["call", "kv_bytes_per_token", digest([(3, 2, 64, 4), {}]), {"ok": 3072}],
            yours, ["call", "kv_bytes_per_token", digest([(*ada.q5_shape, 2), {}]), {"ok": per_token(ada)}]]}
    assert copies.passes_on(TRUSTED, "q5_tests", record(blocks(ada)), KEYS["ada"]), "the record is as the kernel makes it"
    assert not copies.passes_on(TRUSTED, "q5_tests", record(blocks(bob)), KEYS["ada"])
    assert copies.passes_on(TRUSTED, "q5_tests", record(blocks(bob)), KEYS["bob"])


class _Counted(dict):
    """One student's tests, as a loader hands them out (a dict that can be weakly referenced)."""


def test_copy_detection_holds_one_students_records_at_a_time():
    """The grading process's memory must not grow with the class: ``find`` asks for each student's records
    (as ``SavedRecords`` reads them from disk) and drops them before asking for the next."""
    import gc
    import weakref
    from collections.abc import Mapping
    practice = float(Fraction(for_set("ps2_math").q6_requests * 11, 2))
    q6 = {"ada": _right("ada"), "bob": _right("bob"), "cat": _right("bob"), "dan": practice, "eve": _right("bob"),
          "fay": 1.25}
    q7 = {"bob": _right7(KEYS["bob"]), "cat": _right7(KEYS["bob"]), "dan": _right7(""), "eve": 7}
    on_disk, live, most = _saved(q6, q7), [], []

    class Loader(Mapping):
        def __getitem__(self, student):
            gc.collect()
            most.append(sum(ref() is not None for ref in live))  # records still alive when the next are read
            tests = _Counted(on_disk[student])
            live.append(weakref.ref(tests))
            return tests

        def __iter__(self):
            return iter(on_disk)

        def __len__(self):
            return len(on_disk)

    assert copies.find(TRUSTED, Loader(), KEYS) == copies.find(TRUSTED, on_disk, KEYS) != {}
    assert most and max(most) == 0, most


def test_saved_records_are_read_from_the_job_folders_when_asked_for(tmp_path):
    import json
    from pagedkv_lib.course.protocol import JUDGED_FILE, job_folder
    for student, text in {"ada": json.dumps({"q6_tests": {"record": _q6(1.0), "passed": False}}),
                          "bob": "{not json", "cat": json.dumps(["a", "list"])}.items():
        job_folder(tmp_path, "ps2_math", student).mkdir(parents=True)
        (job_folder(tmp_path, "ps2_math", student) / JUDGED_FILE).write_text(text, encoding="utf-8")
    saved = copies.SavedRecords(tmp_path, "ps2_math")
    assert sorted(saved) == ["ada", "bob", "cat"] and saved.get("bob") is None and saved.get("cat") is None
    assert saved["ada"]["q6_tests"]["passed"] is False and saved["ada"] is not saved["ada"]  # read afresh, not kept
    assert copies.SavedRecords(tmp_path, "ps3_code") == {}
