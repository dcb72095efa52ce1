"""Per-learner variants are fair: proven for a class, not hoped for.

For 50 learners per problem set, each with a key made as the instructor's are: the reference answers
get full marks on that learner's numbers, judged as autograde judges them, and neither the released
notebook nor the learner's printed numbers hold one of that learner's answers (or a value one
factor away). For a class of 200: no two learners share a full set of numeric answers, and no answer
is accepted for more than 5% of the class (each question's own tolerance decides "accepted"), in one
class whose answers the solutions compute, and in each of 300 random classes whose answers the library
computes from each learner's numbers (no notebook runs: a few seconds).
``test_psets`` runs every catalogued wrong answer on the practice numbers and on two learners' own;
``test_variants`` checks that no slip the grader names lands on the right answer in any variant.
"""
from __future__ import annotations

import bisect
import functools
import json
import random

import pytest

from conftest import REPO
from psets_kernel import NO_TRITON, LiveKernel, load, points, reference_values, solutions
from psets_leaks import code_numbers, learner_leaks, text_numbers, visible_checks_source

from pagedkv_lib.course.instructor.intake.variant_keys import learner_key
from pagedkv_lib.accounting import blocks_needed, bytes_per_token, expected_slack_per_request, kv_capacity
from pagedkv_lib.accounting import hybrid_blocks_per_request, hybrid_kv_capacity
from pagedkv_lib.course.learner.variants import for_set
from pagedkv_lib.lesson.lab import run_lab

SECRET = b"the fairness tests' course secret"
CLASS = [learner_key(SECRET, f"learner{i:03d}") for i in range(200)]
SETS = ["ps1_intuition", "ps2_math", "ps3_code", "ps4_demo"]
VALUE_SETS = ["ps1_intuition", "ps2_math", "ps4_demo"]

#: How each numeric answer is accepted, as its hidden test says: (kind, tolerance); others: exactly.
TOLERANCE = {"slack_estimate_slots": ("rel", 0.02), "capacity_tokens": ("abs", 16), "slack_share": ("abs", 1e-6),
             "sharing_saving": ("abs", 1e-6), "batch_gain_over_max": ("rel", 1e-6),
             "batch_gain_over_oracle": ("rel", 1e-6), "preempt_margin": ("rel", 1e-4)}
SHARE_BOUND = 0.05


def _cells(name, folder="solutions"):
    return load(REPO / folder / name / f"{name}.ipynb")


def _scalars(values) -> set:
    out = set()
    for v in values:
        out.update(_scalars(v) if isinstance(v, (list, tuple)) else _scalars(v.values()) if isinstance(v, dict)
                   else [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else [])
    return out


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.xdist_group(f"variants-{n}")]
                 + ([pytest.mark.skipif(NO_TRITON is not None, reason=str(NO_TRITON))] if n == "ps3_code" else []))
    for n in SETS])
def test_fifty_learners_each_get_full_marks_for_the_right_answers_on_their_own_numbers(name):
    cells, released = _cells(name), _cells(name, "exercises")
    good, full = solutions(cells), sum(points(cells).values())
    shown = set()
    for cell in released:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        shown |= code_numbers(source) if cell["cell_type"] == "code" else text_numbers(source)
    shown |= code_numbers(visible_checks_source(name))
    kernel = LiveKernel(REPO)
    try:
        visible = _scalars(kernel.expected_values(cells, good, hidden=False))  # the worked examples
        for key in CLASS[:50]:
            expected = kernel.expected_values(cells, good, hidden=True, key=key, answers_only=True)
            failed = {g: m for g, (ok, m) in kernel.verdicts.items() if not ok}
            assert not failed, f"{name}, learner key {key}: the reference answers lost points: {failed}"
            assert sum(points(cells)[g] for g in kernel.verdicts) == full
            if name in VALUE_SETS:
                hidden = _scalars(expected) - visible
                assert len(hidden) >= 3, f"{name}: the hidden tests check answers on this learner's own numbers"
                found = learner_leaks(shown, text_numbers(repr(for_set(name, key))), hidden)
                assert not found, f"{name}, key {key}: visible numbers give this learner's answers away: {found}"
    finally:
        kernel.close()


def _accepts(name: str, want, got) -> bool:
    kind, tol = TOLERANCE.get(name, ("abs", 0))
    return abs(got - want) <= (tol * abs(want) if kind == "rel" else tol)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"variants-share-{n}")) for n in VALUE_SETS])
def test_in_a_class_of_200_no_answer_serves_more_than_5_percent_and_no_two_share_them_all(name):
    answers = [{n: v for n, v in reference_values(_cells(name), key).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)} for key in CLASS]
    assert len(answers[0]) >= 3, answers[0]
    shares = {}
    for q in answers[0]:
        # for each learner, how many others would their check accept: the most, over the class
        worst = max(sum(_accepts(q, mine[q], other[q]) for j, other in enumerate(answers) if j != i)
                    for i, mine in enumerate(answers))
        shares[q] = worst / (len(CLASS) - 1)
    alike = [(i, j) for i in range(len(answers)) for j in range(i + 1, len(answers))
             if all(_accepts(q, answers[i][q], answers[j][q]) for q in answers[i])]
    print(f"\n{name}: most of the class one learner's answer serves, per question: "
          + ", ".join(f"{q} {s:.1%}" for q, s in shares.items()))
    assert not alike, f"{name}: learners {alike[:3]} could hand in the same answers to every question"
    assert all(s <= SHARE_BOUND for s in shares.values()), shares
    ranges = {q: (min(a[q] for a in answers), max(a[q] for a in answers)) for q in answers[0]}
    assert all(lo > 0 for lo, _ in ranges.values()), f"{name}: every answer is a positive quantity: {ranges}"
    print(f"{name}: ranges " + json.dumps({q: [round(lo, 4), round(hi, 4)] for q, (lo, hi) in ranges.items()}))


GiB = 2**30


@functools.lru_cache(maxsize=None)
def _lab_saved_slots(block_size: int, samples: int) -> int:
    return run_lab("parallel sampling", block_size, n=samples).effects["prefix-sharing savings"]


@functools.lru_cache(maxsize=None)
def _capacity_tokens(model: str, gib: int, utilization: float) -> int:
    return kv_capacity(model, gib * GiB, utilization=utilization, block_size=16).tokens


#: Each numeric answer as the library computes it from a learner's numbers ``V`` (the reference answers
#: in ``solutions/`` compute the same: ``test_the_librarys_answers_are_the_solutions_answers``).
LIBRARY_ANSWERS = {
    "ps1_intuition": {
        "block_of_position": lambda V: V.q1_block_table[V.q1_position // V.q1_block_size],
        "shared_blocks_used": lambda V: blocks_needed(V.q3_prompt_tokens, V.q3_block_size)
        + V.q3_continuations * blocks_needed(V.q3_own_tokens, V.q3_block_size),
        "token_states_read": lambda V: V.q3_continuations * (V.q3_prompt_tokens + V.q3_own_tokens),
        "slack_estimate_slots": lambda V: V.q5_requests * expected_slack_per_request(V.q5_block_size)},
    "ps2_math": {
        "gpu_blocks": lambda V: kv_capacity(V.q5_model, V.q5_gpu_gib * GiB, weight_bytes=int(V.q5_params * 2),
                                            utilization=V.q5_utilization, block_size=V.q5_block_size).blocks,
        "expected_slack_slots": lambda V: V.q6_requests * expected_slack_per_request(V.q6_block_size),
        "fp8_tokens": lambda V: V.q7_gib * GiB // bytes_per_token(V.q7_model, "fp8"),
        "hybrid_blocks": lambda V: hybrid_blocks_per_request(V.q9_model, V.q9_tokens, V.q9_block_size),
        "hybrid_requests": lambda V: hybrid_kv_capacity(V.q9_model, V.q9_kv_gib * GiB, V.q9_tokens, weight_bytes=0,
                                                        utilization=1.0, block_size=V.q9_block_size).requests},
    "ps4_demo": {
        "capacity_tokens": lambda V: _capacity_tokens(V.q3_model, V.q3_gpu_gib, V.q3_utilization),
        "lab_sharing_saved_bytes": lambda V: _lab_saved_slots(V.q5_block_size, V.q5_samples)
        * bytes_per_token(V.q5_model, V.q5_dtype)},
}
#: Answers that come out of a seeded simulation, and the numbers that decide them: learners who share those
#: numbers share the answer. Running the simulations for every learner of 300 classes would take many
#: minutes; the class of 200 above runs them, and there no two learners' different numbers give answers
#: its check accepts for both.
SIMULATED = {"ps4_demo": {"slack_share": ("q1_seed", "q1_block_size"), "sharing_saving": ("q2_seed", "q2_samples"),
                          "batch_gain_over_max": ("q4_seed",), "batch_gain_over_oracle": ("q4_seed",),
                          "preempt_margin": ("q7_model", "q7_link", "q7_mfu", "q7_conversations", "q7_seed")}}
RANDOM_CLASSES = 300


def _most_served(question: str, answers: list) -> float:
    """The largest share of the rest of the class whose answer one learner's check accepts."""
    kind, tol = TOLERANCE.get(question, ("abs", 0))
    ordered, most = sorted(answers), 0
    for want in ordered:
        width = tol * abs(want) if kind == "rel" else tol
        lo, hi = bisect.bisect_left(ordered, want - width), bisect.bisect_right(ordered, want + width)
        most = max(most, sum(_accepts(question, want, got) for got in ordered[lo:hi]) - 1)
    return most / (len(answers) - 1)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_librarys_answers_are_the_solutions_answers(name):
    """The library's answers below are the reference answers', on the practice numbers and two learners'."""
    numeric = {n for n, v in reference_values(_cells(name), "").items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric == set(LIBRARY_ANSWERS[name]) | set(SIMULATED.get(name, {})), "every numeric answer is measured"
    for key in ["", *CLASS[:2]]:
        solved, V = reference_values(_cells(name), key), for_set(name, key)
        for question, answer in LIBRARY_ANSWERS[name].items():
            assert _accepts(question, solved[question], answer(V)), (name, key, question)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_in_each_of_300_random_classes_no_answer_serves_more_than_5_percent(name):
    """Classes of 200 with random keys (seeded): for each question, the most of a class one answer serves."""
    worst: dict[str, float] = {}
    for c in range(RANDOM_CLASSES):
        rng = random.Random(f"fairness class {c}")
        numbers = [for_set(name, f"{rng.getrandbits(128):032x}") for _ in range(200)]
        for question, answer in LIBRARY_ANSWERS[name].items():
            share = _most_served(question, [answer(V) for V in numbers])
            worst[question] = max(worst.get(question, 0.0), share)
        for question, decided_by in SIMULATED.get(name, {}).items():
            same = _most_served("", [hash(tuple(getattr(V, n) for n in decided_by)) for V in numbers])
            worst[question] = max(worst.get(question, 0.0), same)
    print(f"\n{name}, the most of a class one answer serves over {RANDOM_CLASSES} random classes of 200: "
          + ", ".join(f"{q} {s:.1%}" for q, s in worst.items()))
    assert all(s <= SHARE_BOUND for s in worst.values()), worst


def _ps2_q9_slips(V) -> tuple[int, int, dict, dict]:
    """ps2 Q9's answers and the values of the slips its mutations make (``psets_mutations``), from ``V``."""
    (L, H, d), L_sw, W, T, S = V.q9_shape, V.q9_sw_layers, V.q9_window, V.q9_tokens, V.q9_block_size
    L_full = L - L_sw
    g = min(L_full, L_sw)
    fg, sg, up, freed = -(-L_full // g), -(-L_sw // g), -(-T // S), max(0, T - W + 1) // S
    kv, layer = V.q9_kv_gib * GiB, 2 * H * d * 2
    blocks, page = fg * up + sg * (up - freed), S * g * layer
    requests = kv // page // blocks
    block_slips = {"no window": (fg + sg) * up, "per layer": L_full * up + L_sw * (up - freed),
                   "window's first block freed": fg * up + sg * (up - -(-max(0, T - W + 1) // S)),
                   "W / S blocks": fg * up + sg * -(-W // S), "partial block dropped": fg * (T // S) + sg * (T // S - freed)}
    request_slips = {"one layer": kv // (S * layer) // blocks, "all layers": kv // (S * L * layer) // blocks,
                     "no K and V": kv // (page // 2) // blocks, "GB": int(V.q9_kv_gib * 1e9) // page // blocks,
                     "rounded up": -(-(kv // page) // blocks), "all full attention": kv // (S * L * layer) // up}
    return blocks, requests, block_slips, request_slips


def test_no_slip_ps2_q9s_mutations_make_lands_on_the_answer_for_any_learner():
    """For 20,000 random keys: each slip ``psets_mutations`` makes in Q9 gives a wrong value (so it loses its
    points and its message names it, for any key the mutation tests might use), and the answers are the
    library's. Rounding the request count up is the exception: right when the blocks divide the pool (about
    one learner in a hundred)."""
    rng = random.Random("ps2 q9 slips")
    models = set()
    for _ in range(20_000):
        V = for_set("ps2_math", f"{rng.getrandbits(128):032x}")
        blocks, requests, block_slips, request_slips = _ps2_q9_slips(V)
        assert (blocks, requests) == (LIBRARY_ANSWERS["ps2_math"]["hybrid_blocks"](V),
                                      LIBRARY_ANSWERS["ps2_math"]["hybrid_requests"](V))
        assert blocks not in block_slips.values(), (V.numbers, block_slips)
        landed = [k for k, v in request_slips.items() if v == requests and k != "rounded up"]
        assert not landed, (V.numbers, landed)
        models.add(V.q9_model)
    assert len(models) >= 3
