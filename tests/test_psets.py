"""Every problem set is fair, helpful and honest, proven in one live kernel per set.

- fair: the reference answers and correct answers in other styles keep full marks;
- helpful: each plausible wrong answer (a mutation) loses the points of its question, and the
  catch rate per set is printed, for the full tests and (on the practice numbers) the visible checks alone;
- honest: no visible cell of a released set holds a hidden expected value or one a factor away.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import REPO
from psets_kernel import NO_TRITON, LiveKernel, load, points, solutions
from psets_leaks import code_lists, code_numbers, leaks, learner_leaks, text_lists, text_numbers, visible_checks_source
from psets_mutations import COMBINED, MUTATIONS, STYLES

from pagedkv_lib.course.instructor.intake.variant_keys import learner_key
from pagedkv_lib.course.learner.variants import for_set

pytestmark = [pytest.mark.xdist_group("psets-kernel")]

SETS = sorted(MUTATIONS)
FULL_MARKS = [pytest.param(n, marks=pytest.mark.skipif(n == "ps3_code" and NO_TRITON is not None, reason=str(NO_TRITON)))
              for n in SETS]
"""The sets, ps3 skipped where its bonus cannot run."""
# Sets whose graded answers include values (numbers a learner could copy). ps3_code grades functions
# and a class on random inputs, so what could leak there is a hidden case's expected result, or a
# reference's output shown by a visible cell: its own test below.
VALUE_SETS = [name for name in SETS if name != "ps3_code"]


#: A learner's variant key, made as the instructor's keys are, for the tests that run each set on its
#: practice numbers and on two learners' own ("" is the practice variant).
KEYS = ["", learner_key(b"a test course secret", "ada"), learner_key(b"a test course secret", "bob")]
KEY_IDS = ["practice", "ada", "bob"]
# ps3's variants differ only in their hidden inputs, and a run of it takes seconds: two keys are enough.
# `make test` runs each set on its practice numbers; the learners' keys are `make test-long` (CI runs both).
SET_KEYS = [pytest.param(n, k, id=f"{n}-{i}", marks=[*p.marks, *([pytest.mark.long] if k else [])])
            for p in FULL_MARKS for n in p.values for k, i in zip(KEYS, KEY_IDS) if not (n == "ps3_code" and i == "bob")]
# ps3's slips take two minutes on one key (each reruns its question's cells): all of them are `make test-long`.
MUTATION_KEYS = [pytest.param(*p.values, id=p.id, marks=[*p.marks, *([pytest.mark.long] if p.values[0] == "ps3_code" else [])])
                 for p in SET_KEYS]


@pytest.fixture(scope="module")
def kernel():
    k = LiveKernel(REPO)
    yield k
    k.close()


def _cells(name, folder="solutions"):
    return load(REPO / folder / name / f"{name}.ipynb")


@pytest.mark.slow
@pytest.mark.parametrize("name, key", SET_KEYS)
def test_correct_answers_in_every_style_keep_full_marks(kernel, name, key):
    cells = _cells(name)
    full = sum(points(cells).values())
    good = solutions(cells)
    assert kernel.score(cells, good, key=key) == full
    for answer_id, *change in STYLES[name]:
        source = good[answer_id].replace(*change) if len(change) == 2 else change[0]
        assert len(change) == 1 or change[0] in good[answer_id], f"{name}: the style's text is not in {answer_id}"
        verdicts = kernel.grade(cells, {**good, answer_id: source}, key=key)
        failed = {g: m for g, (ok, m) in verdicts.items() if not ok}
        assert not failed, f"{name}: a correct {answer_id} in another style lost points: {failed}"


@pytest.mark.slow
@pytest.mark.parametrize("name, key", MUTATION_KEYS)
def test_every_mutation_loses_its_points_and_each_message_is_one_line(kernel, name, key):
    cells = _cells(name)
    good = solutions(cells)
    caught = seen = 0
    for answer_id, tests, *change in MUTATIONS[name]:
        if len(change) == 2:  # (old, new) applied to the reference answer
            assert change[0] in good[answer_id], f"{name}: the mutation's text is not in {answer_id}: {change[0]!r}"
        source = good[answer_id].replace(*change) if len(change) == 2 else change[0]
        tests = {tests} if isinstance(tests, str) else set(tests)
        verdicts = kernel.grade(cells, {**good, answer_id: source}, key=key)
        failed = {g for g, (passed, _) in verdicts.items() if not passed}
        assert tests <= failed, f"{name}: this wrong {answer_id} passed {tests - failed}:\n{source}"
        for test_id in tests:
            message = verdicts[test_id][1]
            assert message.count("\n") <= 1 and "Traceback" not in message, message
        assert failed <= tests, f"{name}: a slip in {answer_id} also cost {failed - tests} (graded twice)"
        caught += 1
        if not key:   # the visible checks' catch rate, a figure (not asserted): once per set, on the practice numbers
            visible = kernel.grade(cells, {**good, answer_id: source}, hidden=False, key=key)
            seen += any(not visible[t][0] for t in tests)
    total = len(MUTATIONS[name])
    shown = "" if key else f"; {seen}/{total} are caught by visible checks"
    print(f"\n{name} ({key or 'practice'}): {caught}/{total} mutations lose points{shown}")
    assert caught == total


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS, ids=KEY_IDS)
@pytest.mark.parametrize("name", VALUE_SETS)
def test_no_visible_cell_gives_a_hidden_value_away(kernel, name, key):
    """Neither the released notebook nor the learner's printed numbers hold a hidden expected value
    (or one a factor away: ``psets_leaks``); ``test_variants_fairness`` checks 50 learners' own."""
    cells = _cells(name)
    good = solutions(cells)
    every = kernel.expected_values(cells, good, hidden=True, key=key, answers_only=bool(key))
    visible_expected = kernel.expected_values(cells, good, hidden=False, key=key)

    def scalars(values):
        out = set()
        for v in values:
            out.update(scalars(v) if isinstance(v, (list, tuple)) else
                       scalars(v.values()) if isinstance(v, dict) else [v] if isinstance(v, (int, float)) else [])
        return out

    hidden = scalars(every) - scalars(visible_expected)
    assert hidden, f"{name}: the hidden tests should check values the visible ones do not"
    released = json.loads((REPO / "exercises" / name / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
    shown = set()
    for cell in released:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        shown |= code_numbers(source) if cell["cell_type"] == "code" else text_numbers(source)
    shown |= code_numbers(visible_checks_source(name))
    printed = text_numbers(repr(for_set(name, key)))  # "your numbers", as the set-up cell shows them
    if not key:  # the released text is written against the practice numbers: no hidden value near it
        found = leaks(shown | printed, hidden)
    else:  # a learner's own: their answers, against their printed numbers (test_variants_fairness: 50 more)
        found = learner_leaks(shown, printed, hidden)
    assert not found, f"{name}: visible numbers give hidden values away: {found}"


def _released(name):
    return _cells(name, folder="exercises")


@pytest.mark.slow
def test_no_visible_cell_of_ps3_holds_a_hidden_result_or_shows_a_reference_output(kernel):
    """ps3 grades behaviours. Its hidden cases' expected results (slot lists) appear in no visible cell,
    and its visible test cells, run on correct and on stub answers, show nothing but their one-line
    verdicts: the references they drive (BlockManager, paged_decode_reference) never print a result."""
    cells = _cells("ps3_code")
    good = solutions(cells)

    def lists(values):
        return {tuple(v) for v in values if isinstance(v, list) and len(v) >= 2
                and all(isinstance(x, int) for x in v)}

    hidden = (lists(kernel.expected_values(cells, good, hidden=True, sweeps=True))
              - lists(kernel.expected_values(cells, good, hidden=False, sweeps=True)))
    assert len(hidden) >= 50, "the hidden slot-mapping cases should be recorded"
    shown = set()
    for cell in _released("ps3_code"):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        shown |= code_lists(source) if cell["cell_type"] == "code" else text_lists(source)
    shown |= code_lists(visible_checks_source("ps3_code"))
    assert (28, 31, 8, 37) in shown, "the worked example's answer is given in the question"
    assert not shown & hidden, f"visible cells hold hidden expected results: {sorted(shown & hidden)[:5]}"

    stubs = {}  # the released answer cells as they are: stubs
    for answers in (good, stubs):
        verdicts = kernel.grade(_released("ps3_code"), answers, hidden=False)
        for test_id, (passed, message) in verdicts.items():
            assert not kernel.printed[test_id].strip(), f"{test_id} shows more than its verdict: {kernel.printed[test_id]!r}"
            assert passed or message.startswith("CheckFailed: ") and "\n" not in message, message


@pytest.mark.slow
@pytest.mark.skipif(NO_TRITON is not None, reason=str(NO_TRITON))
def test_without_triton_the_bonus_is_skipped_in_one_line_and_nothing_else_changes(kernel):
    cells = _cells("ps3_code")
    good = solutions(cells)
    kernel.run("import sys\nsys.modules['_pagedkv_triton'] = sys.modules.pop('triton', None)\nsys.modules['triton'] = None")
    try:
        verdicts = kernel.grade(cells, good)
        kernel.run(good["bonus_answer"])
        printed = kernel.stdout
    finally:
        kernel.run("import sys\n_t = sys.modules.pop('_pagedkv_triton')\n"
                   "if _t is None: del sys.modules['triton']\nelse: sys.modules['triton'] = _t")  # as it was
    assert printed.strip() == "Bonus skipped: triton is not installed here (this costs you no points)."
    failed = {g: m for g, (ok, m) in verdicts.items() if not ok}
    assert list(failed) == ["bonus_tests"], failed
    assert failed["bonus_tests"] == ("CheckFailed: Bonus skipped: triton is not installed here, so the bonus scores 0; "
                                     "this costs you nothing (the set is graded out of 26 points).")
    assert kernel.score(cells, good) == sum(points(cells).values()), "triton is back for the other tests"


@pytest.mark.slow
def test_a_learners_own_error_is_one_line_naming_the_line_of_their_cell(kernel):
    cells = _cells("ps2_math")
    answer = "def blocks_needed(num_tokens, block_size):\n    block_size -= block_size\n    return num_tokens // block_size\n"
    verdicts = kernel.grade(cells, {**solutions(cells), "q2_answer": answer}, hidden=False)
    assert verdicts["q2_tests"] == (False, "CheckFailed: blocks_needed(15, 4) raised ZeroDivisionError: integer division "
                                    "or modulo by zero (line 3: return num_tokens // block_size)")


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS[:2], ids=KEY_IDS[:2])
@pytest.mark.parametrize("name, answer_id, test_id, changes, named, blamed",
                         [pytest.param(*c, marks=pytest.mark.skipif(NO_TRITON is not None and c[1] == "bonus_answer",
                                                                   reason=str(NO_TRITON))) for c in COMBINED])
def test_two_slips_at_once_are_both_named_and_no_right_part_is_blamed(kernel, key, name, answer_id, test_id, changes,
                                                                      named, blamed):
    """Graded as autograde grades (hidden tests on the variant's own inputs), on two variants."""
    cells = _cells(name)
    good = solutions(cells)
    source = good[answer_id]
    for old, new in changes:
        assert old in source, f"{name}: the slip's text is not in {answer_id}: {old!r}"
        source = source.replace(old, new)
    verdicts = kernel.grade(cells, {**good, answer_id: source}, key=key)
    failed = {g: m for g, (ok, m) in verdicts.items() if not ok}
    assert list(failed) == [test_id], failed
    message = failed[test_id]
    assert "\n" not in message and all(text in message for text in named), message
    assert not any(text in message for text in blamed), message


def _validated(tmp_path, name: str, answers: dict[str, str]) -> list[dict]:
    """What JupyterLab's Validate button shows for set ``name``'s released copy with ``answers`` in their
    cells: nbgrader's ``Validator.validate`` results, one ``{"source", "raw_error"}`` per failing cell."""
    from nbgrader.validator import Validator
    from traitlets.config import Config

    from notebook_runs import UnixSocketKernel
    from pagedkv_lib import course
    root = tmp_path / "course"
    shutil.copytree(REPO / course.RELEASE / name, root / course.RELEASE / name)
    path = root / course.RELEASE / name / f"{name}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    path.write_text(json.dumps(nb), encoding="utf-8")
    on_unix_sockets = Config({"Execute": {"kernel_manager_class": UnixSocketKernel}})   # notebook_runs.py: why
    return Validator(config=on_unix_sockets).validate(str(path)).get("failed", [])


@pytest.mark.slow
@pytest.mark.parametrize("name", SETS)
def test_validate_shows_a_few_lines_of_each_failing_test_cell_and_its_one_line(tmp_path, name):
    """nbgrader's Validate prints a failing cell's source before its message: a test cell is the few lines
    that call the library's visible checks, not the checks themselves. On ps3, Q5 with two slips at once
    says both; the untouched stubs of the other questions say they are not written yet."""
    answers = {}
    if name == "ps3_code":
        good = solutions(_cells(name))
        answers["q5_answer"] = (good["q5_answer"].replace("repeat_interleave(H_q // H_kv, dim=1)", "repeat(1, H_q // H_kv, 1)")
                                .replace(" / math.sqrt(D)", ""))
    failed = _validated(tmp_path, name, answers)
    assert failed, f"{name}: the untouched stubs fail"
    for cell in failed:
        if cell["raw_error"] == "You did not provide a response.":  # a written answer left blank
            continue
        assert len(cell["source"].splitlines()) <= 6, cell["source"]
        assert cell["raw_error"].startswith("CheckFailed: ") and "\n" not in cell["raw_error"], cell["raw_error"]
    if name == "ps3_code":
        q5 = [c["raw_error"] for c in failed if "q5_tests" in c["source"]]
        assert q5 == ["CheckFailed: the worked example: two slips at once: (1) query head h must read KV head h // G "
                      "(consecutive query heads share a KV head), not h % H_kv; (2) scale the scores by 1 / sqrt(D) "
                      "before the softmax."], q5


def test_the_readme_states_each_sets_points():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in SETS:
        cells = _cells(name)
        auto_points = points(cells)
        bonus = sum(p for g, p in auto_points.items() if g.startswith("bonus"))
        auto = sum(auto_points.values()) - bonus
        manual = sum(c["metadata"]["nbgrader"]["points"] for c in cells
                     if c["metadata"].get("nbgrader", {}).get("grade") and c["metadata"]["nbgrader"]["solution"])
        row = re.search(rf"^\| `{name}` \|.*\| (\d+) \+ (\d+) = (\d+)(?:, \+ (\d+) bonus)? \|$", readme, re.M)
        assert row, f"README.md has no points row for {name}"
        assert [int(g or 0) for g in row.groups()] == [auto, manual, auto + manual, bonus], (name, row.group(0))
        assert 20 <= auto + manual <= 40, f"{name}: a set is worth 20 to 40 points"


def test_the_list_finder_reads_literals_and_prose():
    assert code_lists("want = [28, 31, 8, 37]\nx = (1, 2)\ny = [1]\nz = [a, 2]\n") == {(28, 31, 8, 37), (1, 2)}
    assert text_lists("positions `[0, 3, 4, 9]` map to slots `[28, 31, 8, 37]`; [5] is one") == \
        {(0, 3, 4, 9), (28, 31, 8, 37)}


def test_the_leak_finder_flags_a_hidden_value_and_values_one_factor_away():
    from psets_leaks import leaks as find
    hidden = {262_144, 5.5, 12}
    assert find({262_144}, hidden) == [(262_144, 262_144)]
    assert find({131_072, 2_097_152, 11.0}, hidden) == [(11.0, 5.5), (131_072, 262_144), (2_097_152, 262_144)]
    assert find({3072, 1.5, 12, 24}, hidden) == []  # other numbers, and small integers, identify nothing
    assert code_numbers("x = 40 * GiB // (2 * 80 * 8 * 128)\n") >= {40 * 2**30 // 163_840}
    assert text_numbers("tails of 262,144 and 6.74e9 and 1_000") >= {262_144, 6.74e9, 1000}
    # a learner's own answer: near a number printed for them, or written as it is in the static text
    assert learner_leaks({24_576}, {1173}, {2346, 196_608}) == [(1173, 2346)]
    assert learner_leaks({196_608}, set(), {196_608}) == [(196_608, 196_608)]


def test_checks_accept_exact_numbers_in_any_type_and_fail_in_one_line():
    from decimal import Decimal
    from fractions import Fraction

    from pagedkv_lib.course.learner import checks
    big = 10**18 + 1
    checks.check_value("n", Fraction(big), big)
    checks.check_value("n", Decimal(big), big)
    checks.check_value("x", Fraction(11, 2), 5.5)
    checks.check_value("x", Decimal("5.5"), 5.5)
    with pytest.raises(checks.CheckFailed, match="is not right"):
        checks.check_value("n", Fraction(big + 1), big)  # exact, where a float would round them together
    with pytest.raises(checks.CheckFailed, match="whole numbers"):
        checks.check_value("n", Fraction(7, 2), 3)
    with pytest.raises(checks.CheckFailed) as failure:
        checks.require(False, "R should be a multiple of S")
    assert failure.value._render_traceback_() == ["CheckFailed: R should be a multiple of S"]
    assert isinstance(failure.value, AssertionError)  # the autograder and the report read it as a failed check
