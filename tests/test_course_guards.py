"""The grader's own defences, without a kernel: the judge's rules for records, the record's encoding,
the answer scan and the output cap."""
import nbformat
import pytest

from pagedkv_lib.course.instructor.grading.judge import judge_notebook, kernel_source, trusted_cells
from pagedkv_lib.course.instructor.intake.answer_scan import grader_names_used
from pagedkv_lib.course.plain_values import Opaque, decode, digest, encode
from pagedkv_lib.course.protocol import RECORD_MIME


@pytest.mark.parametrize("source, names", [
    ("check_value = check_known_mistakes = lambda *a, **k: None", ["check_known_mistakes", "check_value"]),
    ("import pagedkv_lib.course as c\nc.check_value = print", ["check_value", "pagedkv_lib.course"]),
    ("import builtins\nbuiltins.AssertionError = KeyError", ["AssertionError", "builtins"]),
    ("get_ipython().set_custom_exc((Exception,), lambda *a: None)", ["set_custom_exc"]),
    ("ip = get_ipython(); ip.input_transformers_post.append(f)", ["input_transformers_post"]),
    ("get_ipython().events.register('post_run_cell', f)", ["events.register"]),
    ("tuple = lambda r: (52, 6)\ndef isinstance(*a):\n    return True", ["def isinstance", "def tuple"]),
    ("%time x = 1\ncheck_value(1)", ["check_value"]),  # not Python: words in the text
])
def test_scan_names_what_an_answer_touches(source, names):
    assert grader_names_used(source) == names


def test_scan_leaves_honest_answers_alone():
    honest = ("def blocks_needed(num_tokens, block_size):\n    if num_tokens < 0:\n"
              "        raise AssertionError('negative')\n    return -(-num_tokens // block_size)\n")
    assert grader_names_used(honest) == []


def _cell_with(outputs, grade_id="q1_tests"):
    cell = nbformat.v4.new_code_cell("x")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 1}
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def test_cap_output_keeps_a_bounded_number_of_bytes(monkeypatch, tmp_path):
    from pagedkv_lib.course.instructor.grading.grading_job import GradingJob
    from pagedkv_lib.course.instructor.grading.nbgrader_hooks import CapOutput
    cell = _cell_with([{"output_type": "stream", "name": "stdout", "text": "z" * 1_000_000}])
    cap = CapOutput(max_bytes=5_000)
    cap._job = job = GradingJob(str(tmp_path), "ps1", "ann")
    cap.preprocess_cell(cell, {}, 0)
    assert sum(len(str(o)) for o in cell.outputs) < 6_000
    assert "output cut" in cell.outputs[-1]["text"]
    assert "huge_output" in [e["kind"] for e in job.events()]


TEST = ("from pagedkv_lib.course.learner import testcell as _testcell\n"
        "with _testcell.begin('q1_tests') as _t:\n"
        "    _f = _t.yours('f')\n"
        "    _got = [_f(n) for n in (1, 2)]\n"
        "    ### BEGIN HIDDEN TESTS\n"
        "    ### GRADER ONLY\n"
        "    _t.checks.check_value('f(1)', _got[0], 2)\n"
        "    _t.checks.check_value('f(2)', _got[1], 4)\n"
        "    ### END HIDDEN TESTS\n")


def _record(results, grade_id="q1_tests", args=((1,), (2,))):
    entries = [["yours", "f", digest(None), {"ok": None}]]
    entries += [["call", "f", digest([a, {}]), {"ok": encode(r)}] for a, r in zip(args, results)]
    return {"output_type": "display_data", "metadata": {}, "data": {RECORD_MIME: {"grade_id": grade_id, "entries": entries}}}


def _judge(*test_outputs, answer_outputs=()):
    answer = nbformat.v4.new_code_cell("def f(n):\n    return 2 * n")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "q1_answer"}
    answer.outputs = [nbformat.from_dict(o) for o in answer_outputs]
    test = _cell_with(list(test_outputs))
    test.source = TEST
    return judge_notebook([answer, test], trusted_cells([answer, test]))


def test_the_kernel_never_receives_grader_only_regions():
    sent = kernel_source(TEST)
    assert "check_value" not in sent and "GRADER ONLY" not in sent and "_got = [" in sent


def test_one_record_of_right_results_passes_and_wrong_ones_fail_with_the_message():
    verdicts, elsewhere = _judge(_record([2, 4]))
    assert verdicts["q1_tests"].passed and not verdicts["q1_tests"].forged and not elsewhere
    verdicts, _ = _judge(_record([2, 5]))
    assert not verdicts["q1_tests"].passed and "f(2) = 5 is not right" in verdicts["q1_tests"].message
    assert not verdicts["q1_tests"].forged


@pytest.mark.parametrize("outputs, why", [
    ([_record([2, 4]), _record([2, 4])], "2 records"),
    ([_record([2, 4], args=((1,), (3,)))], "do not match"),  # results for other inputs
    ([_record([2, 4, 6], args=((1,), (2,), (3,)))], "holds 4 results"),  # more than the test asked for
    ([_record([2, 4], grade_id="q2_tests")], "another test"),
    ([{"output_type": "display_data", "metadata": {}, "data": {RECORD_MIME: {"grade_id": "q1_tests", "entries": 7}}}],
     "malformed"),
])
def test_a_forged_or_doubled_record_scores_0_and_is_flagged(outputs, why):
    verdicts, _ = _judge(*outputs)
    assert not verdicts["q1_tests"].passed
    assert any(why in f for f in verdicts["q1_tests"].forged), verdicts["q1_tests"]


def test_a_record_shown_by_an_answer_cell_is_flagged_and_a_cut_record_only_fails():
    verdicts, elsewhere = _judge(_record([2, 4]), answer_outputs=[_record([2, 4])])
    assert verdicts["q1_tests"].passed and elsewhere == ["cell q1_answer (not a test) showed a record of results"]
    short = _record([2])  # the kernel stopped after the first call: not the learner's forgery
    verdicts, elsewhere = _judge(short)
    assert not verdicts["q1_tests"].passed and "no result for f" in verdicts["q1_tests"].message
    assert not verdicts["q1_tests"].forged and not elsewhere


def test_a_record_holds_plain_values_only():
    class Rigged(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

        def __int__(self):
            return 8

    class Anything:
        def __eq__(self, other):
            return True

    assert encode(Rigged(3)) == 3 and type(encode(Rigged(3))) is int
    assert isinstance(decode(encode(Anything())), Opaque) and decode(encode(Anything())) != 3
    assert decode(encode({(1, 2): {3.5, float("nan")} - {3.5}, "k": [None, True]}))["k"] == [None, True]
    import torch
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(decode(encode(t)), t) and digest([t]) == digest([t.clone()]) != digest([t + 1])


def test_identical_long_answers_are_paired_but_short_stub_and_reference_ones_are_not(tmp_path):
    from pagedkv_lib.course.instructor.reporting.similar_answers import similar_answers

    def nb(**answers):
        cells = []
        for gid, src in answers.items():
            cell = nbformat.v4.new_code_cell(src)
            cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": gid}
            cells.append(cell)
        return nbformat.v4.new_notebook(cells=cells)

    long_a = "def f(xs, s):\n    total = 0\n    for x in xs:\n        total += (x + s - 1) // s * s - x\n    return total, len(xs)\n"
    long_b = long_a.replace("total", "waste")  # the same idea, other names: not identical
    ref = "def g(n, s):\n    return [(i + s - 1) // s for i in range(n) if i % 2 == 0 and i > s - 1 or i == 0]\n"
    students = {"ann": nb(q1=long_a, q2=long_a.replace("len(xs)", "0"), q3="x = 8", q4=ref),
                "bea": nb(q1="# copied\n" + long_a, q2=long_a.replace("len(xs)", "0"), q3="x = 8", q4=ref),
                "cat": nb(q1=long_b, q2="x = 1", q3="x = 8", q4=ref)}
    for student, notebook in students.items():
        path = tmp_path / student / "ps" / "ps.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
    release = nb(q1="raise NotImplementedError()", q2="raise NotImplementedError()", q3="x = None", q4="pass")
    source = nb(q1="pass", q2="pass", q3="x = 8", q4="### BEGIN SOLUTION\n" + ref + "### END SOLUTION\n")
    assert similar_answers(tmp_path, {"ps": release}, {"ps": source}) == [("ps", "ann", "bea", ["q1", "q2"])]


def test_no_honest_answer_is_flagged():
    """The reference answers, and every correct answer in another style, reach for nothing and call no
    graded library function: a flag never lands on a student who did nothing."""
    import json
    import re

    from conftest import REPO
    from psets_mutations import STYLES
    from pagedkv_lib.course.instructor.intake.answer_scan import library_calls, reaches

    for name, styles in STYLES.items():
        nb = json.loads((REPO / "solutions" / name / f"{name}.ipynb").read_text(encoding="utf-8"))
        graded = nb["metadata"].get("pagedkv", {}).get("graded_functions", [])
        good = {c["metadata"]["nbgrader"]["grade_id"]: re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n?", "", "".join(c["source"]))
                for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}
        answers = list(good.values()) + [good[a].replace(*change) if len(change) == 2 else change[0] for a, *change in styles]
        for source in answers:
            assert reaches(source) == [] and library_calls(source, graded) == [], (name, source[:200])


def test_the_judge_runs_only_the_instructors_source_never_a_submitted_one(tmp_path):
    """A learner can type any metadata: a cell marked locked, or a test cell whose source they rewrote."""
    marker = tmp_path / "ran-in-the-grader"
    injected = nbformat.v4.new_code_cell(f"open({str(marker)!r}, 'w').write('learner code')")
    injected.metadata["nbgrader"] = {"locked": True, "grade": False, "solution": False}
    answer = nbformat.v4.new_code_cell("def f(n):\n    return 2 * n")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "q1_answer"}
    test = _cell_with([_record([3, 5])])  # wrong results
    test.source = TEST
    trusted = trusted_cells([answer, test])
    rewritten = _cell_with([_record([3, 5])])
    rewritten.source = f"open({str(marker)!r}, 'w').write('learner code')"  # the submitted copy, rewritten
    verdicts, elsewhere = judge_notebook([injected, answer, rewritten], trusted)
    assert not marker.exists()
    assert not verdicts["q1_tests"].passed  # judged by the instructor's test source, from the record
    assert any("grader metadata the instructor never wrote" in e for e in elsewhere)


def test_the_output_depth_check_walks_without_recursion_and_leaves_records_alone():
    from pagedkv_lib.course.instructor.grading.grading_limits import NotebookLimits
    from pagedkv_lib.course.instructor.grading.nbgrader_hooks import nested_deeper
    MAX_OUTPUT_DEPTH = NotebookLimits().max_output_depth
    from pagedkv_lib.course.plain_values import encode
    deep = []
    for _ in range(100_000):  # far deeper than any recursive walk could go
        deep = [deep]
    assert nested_deeper({"data": deep}, MAX_OUTPUT_DEPTH)
    nested = 0
    for _ in range(60):
        nested = [nested]
    record = {"grade_id": "q1_tests", "entries": [["call", "f", "0" * 16, {"ok": encode(nested)}]]}
    assert not nested_deeper({"data": {RECORD_MIME: record}}, MAX_OUTPUT_DEPTH), "the deepest value a record holds"


def test_the_judge_frees_what_a_run_made_without_waiting_for_the_collector():
    """Copy detection runs the judge thousands of times in one process: each run's values go when it ends."""
    import gc
    import sys
    import types
    probe = sys.modules["pkv_probe"] = types.ModuleType("pkv_probe")
    probe.refs = []
    setup = ("import weakref, pkv_probe\nclass Big:\n    pass\nbig = Big()\npkv_probe.refs.append(weakref.ref(big))\n"
             "def keep():\n    return big\n")
    cells = [{"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "setup", "locked": True}}, "outputs": []}]
    gc.disable()
    try:
        judge_notebook(cells, {"setup": (setup, False)})
        assert probe.refs and probe.refs[0]() is None, "the run's namespace outlived it (a cycle through keep)"
    finally:
        gc.enable()
        del sys.modules["pkv_probe"]
