"""Each learner's numbers: drawn from their key alone, in sensible ranges, and keys only the instructor makes."""
from __future__ import annotations

import csv
import json
import stat

import pytest
from hypothesis import given, settings, strategies as st

from pagedkv_lib.course.instructor.intake import variant_keys as keys
from pagedkv_lib.course.instructor.intake.variant_keys import learner_key
from pagedkv_lib.course.learner import variants
from pagedkv_lib.course.learner.variants import KEY_ENV, SETS, for_set
from pagedkv_lib.errors import PagedKVError

SECRET = b"a test course secret"
KEYS = st.binary(min_size=16, max_size=16).map(bytes.hex)
GiB = 2**30


@pytest.fixture(autouse=True)
def no_hub_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(variants.KEY_FILE_ENV, raising=False)


def test_a_given_key_decides_even_when_empty_and_may_come_in_a_file(monkeypatch, tmp_path):
    """A course without keys grades everyone on the practice numbers: a pasted key must not change
    the kernel's numbers then, or the kernel and the judge would disagree."""
    pasted = learner_key(SECRET, "ada")
    monkeypatch.setenv(KEY_ENV, "")
    assert for_set("ps1_intuition", pasted).practice
    monkeypatch.delenv(KEY_ENV)
    (tmp_path / "key").write_text(pasted)
    monkeypatch.setenv(variants.KEY_FILE_ENV, str(tmp_path / "key"))
    assert for_set("ps1_intuition", "").key == pasted


def test_no_key_gives_the_practice_numbers_and_says_so():
    for name, (_, practice) in SETS.items():
        v = for_set(name)
        assert v.practice and v.numbers == practice
        assert repr(v).startswith("PRACTICE numbers: no variant key was given")


def test_a_key_gives_the_same_numbers_every_time_and_each_learner_their_own():
    class_keys = [learner_key(SECRET, f"s{i}") for i in range(200)]
    for name in ("ps1_intuition", "ps2_math", "ps4_demo"):
        drawn = [json.dumps(for_set(name, k).numbers, sort_keys=True) for k in class_keys]
        assert drawn == [json.dumps(for_set(name, k).numbers, sort_keys=True) for k in class_keys]
        assert len(set(drawn)) == len(drawn), f"{name}: two learners got the same numbers"
        assert json.dumps(SETS[name][1], sort_keys=True) not in drawn
    v = for_set("ps2_math", class_keys[0])
    assert repr(v).startswith(f"Your numbers for ps2_math (variant key {class_keys[0][:4]}...")
    assert f"V.q5_model" in repr(v) and v.q5_model in repr(v)


def test_hidden_inputs_follow_the_key_and_the_label():
    a, b = learner_key(SECRET, "ada"), learner_key(SECRET, "bob")
    draw = lambda key, label: [for_set("ps3_code", key).rng(label).random() for _ in range(3)]
    assert draw(a, "q1") == draw(a, "q1")
    assert draw(a, "q1") != draw(b, "q1") != draw("", "q1")
    assert draw(a, "q1") != draw(a, "q2")


def test_the_hubs_key_wins_over_a_pasted_one_and_the_notebook_says_so(monkeypatch):
    hub, pasted = learner_key(SECRET, "ada"), learner_key(SECRET, "bob")
    monkeypatch.setenv(KEY_ENV, hub)
    v = for_set("ps1_intuition", pasted)
    assert v.key == hub and v.numbers == for_set("ps1_intuition", "").numbers  # the env wins either way
    assert "the one pasted into VARIANT_KEY is ignored" in repr(v)
    assert "ignored" not in repr(for_set("ps1_intuition", hub))


@pytest.mark.parametrize("key, message", [
    ("12345", "is not a variant key: a key is 32 hex digits"),
    ("g" * 32, "is not a variant key"),
    (12345, "should be a string of 32 hex digits"),
    (None, "should be a string of 32 hex digits"),
])
def test_a_bad_key_is_refused_naming_it_and_what_a_key_is(key, message):
    with pytest.raises(PagedKVError, match=message) as err:
        for_set("ps2_math", key)
    assert "VARIANT_KEY" in str(err.value)


def test_with_a_hub_key_a_garbled_pasted_one_is_ignored_not_fatal(monkeypatch):
    """While grading (and on a hub) the environment's key decides: a learner's typo in the key cell must
    not stop their notebook there, since their answers are judged on the filed student's numbers."""
    hub = learner_key(SECRET, "ada")
    monkeypatch.setenv(KEY_ENV, hub)
    v = for_set("ps2_math", "my key is here")
    assert v.key == hub and "ignored" in repr(v)


def test_big_numbers_print_as_python_reads_them():
    v = for_set("ps2_math")
    assert "V.q5_params      = 6.74e9" in repr(v) and float("6.74e9") == v.q5_params


def test_a_pasted_key_may_have_spaces_and_capitals():
    key = learner_key(SECRET, "ada")
    assert for_set("ps2_math", f"  {key.upper()} ").numbers == for_set("ps2_math", key).numbers


def test_a_bad_hub_key_and_an_unknown_set_name_what_is_wrong(monkeypatch):
    with pytest.raises(PagedKVError, match="has no numbers here; the problem sets are ps1_intuition"):
        for_set("ps9", "")
    monkeypatch.setenv(KEY_ENV, "not-a-key")
    with pytest.raises(PagedKVError, match=f"{KEY_ENV} = 'not-a-key' is not a variant key"):
        for_set("ps2_math", "")


def test_a_number_a_set_does_not_have_names_those_it_has():
    with pytest.raises(AttributeError, match="have no 'q9_model'; they are q1_block_size"):
        for_set("ps1_intuition").q9_model


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_ps1_numbers_need_the_same_steps_as_the_practice_ones(key):
    v = for_set("ps1_intuition", key)
    S, table, p, T = v.q1_block_size, v.q1_block_table, v.q1_position, v.q1_tokens
    assert S in (4, 8, 16) and len(set(table)) == len(table) >= 4 and all(1 <= b < variants.Q1_POOL_BLOCKS for b in table)
    assert -(-T // S) == len(table), "the table holds exactly the request's blocks"
    assert 1 <= p // S <= len(table) - 2, "neither the first nor the last block: those are the slips"
    S, P, m, k = v.q3_block_size, v.q3_prompt_tokens, v.q3_own_tokens, v.q3_continuations
    assert P > 3 * S and P % S, "at least 4 prompt blocks, the last one partly filled"
    assert 2 <= k <= 16 and (m <= S // 2 or S < m <= S + S // 2)
    assert 50 <= v.q5_requests <= 100_000 and v.q5_block_size in (8, 12, 16, 24, 32)


def test_no_slip_the_grader_names_in_ps1_q3_or_q4_lands_on_the_answer_in_any_variant():
    """Every (S, prompt, own tokens, continuations) the draw can give: a wrong method never scores by luck."""
    tried = 0
    for S in variants.Q3_BLOCK_SIZES:
        up = lambda t: -(-t // S)
        for P in variants.Q3_PROMPTS[S]:
            for m in variants.Q3_OWN[S]:
                for k in range(2, 17):
                    blocks = up(P) + k * up(m)
                    assert blocks not in {k * up(P + m), P // S + k * up(m), up(P + k * m), k * up(m)}, (S, P, m, k)
                    assert k * (P + m) not in {P + k * m, k * P, blocks * S}, (S, P, m, k)
                    tried += 1
    assert tried > 100_000


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_ps2_numbers_leave_room_for_the_cache_and_name_real_models(key):
    from pagedkv_lib.accounting import get_model
    v = for_set("ps2_math", key)
    model = get_model(v.q5_model)
    assert v.q5_shape == (model.num_layers, model.num_kv_heads, model.head_dim)
    usable = int(v.q5_utilization * v.q5_gpu_gib * GiB)
    assert usable - int(v.q5_params * 2) >= usable / 4, "at least a quarter of the usable memory is KV cache"
    gqa = get_model(v.q7_model)
    assert v.q7_shape == (gqa.num_layers, gqa.num_kv_heads, gqa.head_dim) and v.q7_query_heads > gqa.num_kv_heads
    assert 10 <= v.q7_gib <= 160 and 2 <= v.q6_requests <= 400 and v.q6_block_size >= 6


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_ps4_numbers_are_valid_simulator_and_lab_arguments(key):
    from pagedkv_lib.accounting import kv_capacity
    v = for_set("ps4_demo", key)
    assert v.q1_block_size in (16, 32, 64, 128) and 2 <= v.q2_samples <= 6 and 2 <= v.q5_samples <= 16
    assert kv_capacity(v.q3_model, v.q3_gpu_gib * GiB, utilization=v.q3_utilization).tokens > 0
    assert v.q5_block_size in variants.Q5_LAB_BLOCK_SIZES and max(variants.Q5_LAB_BLOCK_SIZES) <= 20, \
        "the lab's 20-token prompt fills a block, so sharing saves some"
    assert v.q5_model in variants.Q5_LAB_MODELS and v.q5_dtype in ("fp16", "fp8", "fp32")


def _q7_totals(v, link, flops):
    """ps4 Q7's totals over the learner's trace (seconds): swap over ``link``, recompute at ``flops``."""
    from pagedkv_lib.accounting import get_model
    from pagedkv_lib.sim import multi_turn_conversations, preemption_cost as pc
    context = get_model(v.q7_model).max_context
    lengths = [len(p) for p in multi_turn_conversations(v.q7_conversations, turns=(8, 24), max_context=context,
                                                           seed=v.q7_seed).prompts]
    assert max(lengths) <= context, "every request fits the model's context window"
    return (sum(pc.swap_seconds(T, v.q7_model, link_bytes_per_s=link) for T in lengths),
            sum(pc.recompute_seconds(T, v.q7_model, flops_per_s=flops) for T in lengths), lengths)


@settings(max_examples=40, deadline=None)
@given(KEYS)
def test_no_slip_the_grader_names_in_ps4_q7_passes_as_the_answer(key):
    """Each slip in the cost model that ps4 Q7's grader names gives another (winner, margin) than the answer
    on the learner's own numbers: a margin outside the 0.01% tolerance, or the other winner (then the winner's
    check names it). Seconds saved for the ratio is left out: seconds can equal a ratio by chance."""
    from pagedkv_lib.accounting import get_model
    from pagedkv_lib.course.learner.pset_checks.ps4_demo import q7_mistakes, q7_outcome
    from pagedkv_lib.sim import preemption_cost as pc
    from pagedkv_lib.sim.timed_serving import decode_step_seconds
    v = for_set("ps4_demo", key)
    assert get_model(v.q7_model).num_params and v.q7_link in variants.Q7_LINKS and 0.3 <= v.q7_mfu <= 0.7
    assert 20 <= v.q7_conversations <= 60
    link, flops = getattr(pc, v.q7_link), pc.H100_SXM_BF16_DENSE_FLOPS * v.q7_mfu
    swap, recompute, lengths = _q7_totals(v, link, flops)
    other = pc.PCIE4_X16_BYTES_PER_S if link == pc.PCIE5_X16_BYTES_PER_S else pc.PCIE5_X16_BYTES_PER_S
    slips = q7_mistakes(swap, recompute,
                        linear_s=sum(lengths) * pc.weights_seconds_per_token(get_model(v.q7_model), None, flops),
                        decode_s=sum(lengths) * decode_step_seconds(v.q7_model), other_link_swap_s=_q7_totals(v, other, flops)[0],
                        default_mfu_recompute_s=_q7_totals(v, link, pc.DEFAULT_FLOPS_PER_S)[1])
    winner, margin = q7_outcome(swap, recompute)
    assert margin >= 1
    for (w, m), why in slips:
        if "seconds saved" in why:
            continue
        assert w != winner or abs(m - margin) > 1e-4 * margin, (key, why)


def test_no_slip_the_grader_names_in_ps4_q5_lands_on_the_answer_in_any_variant():
    """Every (block size, samples, model, dtype) the draw can give: each named slip's value differs from
    the answer (so the message names the slip the learner made), and sharing saves something."""
    from pagedkv_lib.accounting import bytes_per_token
    from pagedkv_lib.lesson.lab import run_lab
    tried = 0
    for S in variants.Q5_LAB_BLOCK_SIZES:
        for n in range(2, 17):
            fx = run_lab("parallel sampling", S, n=n).effects
            saved = fx["prefix-sharing savings"]
            for model in variants.Q5_LAB_MODELS:
                for dtype in variants.Q5_LAB_DTYPES:
                    C = bytes_per_token(model, dtype)
                    slips = [fx["tail slack"] * C, fx["reservation waste (contiguous)"] * C, saved, saved // S * C,
                             *([saved * bytes_per_token(model)] if dtype != "fp16" else [])]
                    assert saved > 0 and saved * C not in slips, (S, n, model, dtype)
                    tried += 1
    assert tried == len(variants.Q5_LAB_BLOCK_SIZES) * 15 * len(variants.Q5_LAB_MODELS) * 3


def test_the_secret_is_made_once_private_and_keys_come_from_it(tmp_path):
    assert keys.secret(tmp_path) is None and keys.key_for(tmp_path, "ada") == ""
    path = keys.write_keys(tmp_path, ["ada", "bob"])
    secret_file = tmp_path / keys.SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and stat.S_IMODE(path.stat().st_mode) == 0o600
    value = keys.secret(tmp_path)
    rows = list(csv.DictReader(path.open()))
    assert rows == [{"student": s, "key": learner_key(value, s)} for s in ("ada", "bob")]
    keys.write_keys(tmp_path, ["ada"])
    assert keys.secret(tmp_path) == value, "making keys again keeps the secret (every key depends on it)"
    assert len(keys.key_for(tmp_path, "ada")) == 32 and keys.key_for(tmp_path, "ada") != keys.key_for(tmp_path, "bob")


def test_a_damaged_secret_is_refused_naming_the_file(tmp_path):
    (tmp_path / keys.SECRET_FILE).write_text("not hex\n")
    with pytest.raises(PagedKVError, match="should hold the course secret as at least 32 hex digits"):
        keys.key_for(tmp_path, "ada")


def test_a_key_is_one_way_nobody_turns_one_into_anothers():
    """The key is an HMAC of the learner's id under the secret: from ada's key and id, bob's key is as
    hard to find as the secret. Here: it is no simple function of ada's (same length, no shared bits beyond chance)."""
    a, b = learner_key(SECRET, "ada"), learner_key(SECRET, "bob")
    same_bits = 128 - bin(int(a, 16) ^ int(b, 16)).count("1")
    assert 30 < same_bits < 98 and learner_key(b"another secret", "ada") != a


def test_rosters_give_student_ids(tmp_path):
    hub = tmp_path / "roster.csv"
    hub.write_text("id,role,name\nteach,instructor,T\nAda Lee,learner,Ada\nbob,learner,Bob\nbob,learner,Bob\n")
    assert keys.roster_students(hub) == ["ada_lee", "bob"]
    plain = tmp_path / "ids.txt"
    plain.write_text("ada\n\nBob\n")
    assert keys.roster_students(plain) == ["ada", "bob"]
    (tmp_path / "empty.csv").write_text("id,role,name\n")
    with pytest.raises(PagedKVError, match="names no student"):
        keys.roster_students(tmp_path / "empty.csv")


def _nb(key):
    return {"cells": [{"cell_type": "code", "source": "# paste it\nVARIANT_KEY = " + json.dumps(key), "metadata": {}}]}


def test_a_notebook_holding_another_learners_key_is_flagged_with_whose(tmp_path):
    keys.write_keys(tmp_path, ["ada", "bob"])
    ada, bob = keys.key_for(tmp_path, "ada"), keys.key_for(tmp_path, "bob")
    assert keys.pasted_key(_nb(f" {ada.upper()} ")) == ada
    assert keys.key_problem(tmp_path, "ada", _nb(ada)) is None
    assert keys.key_problem(tmp_path, "ada", _nb("")) is None  # practice run, or a hub: graded on ada's own
    assert keys.key_problem(tmp_path, "ada", _nb(bob)) == "variant key mismatch: the notebook holds bob's key, not ada's"
    assert keys.key_problem(tmp_path, "ada", _nb("0" * 32)).endswith("00000000... is no student's in this class")
    assert keys.key_problem(tmp_path / "nowhere", "ada", _nb(bob)) is None  # a course with no keys
    for garbled in ("é", "\u200b" + ada, ada[:-1] + "g"):  # a character compare_digest refuses; a stray one
        assert "is not a key" in keys.key_problem(tmp_path, "ada", _nb(garbled))


def test_the_keys_command_writes_one_key_per_learner_of_a_canvas_roster(tmp_path, capsys):
    from pagedkv_lib.course.__main__ import main
    roster = tmp_path / "canvas.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,PS2 (123)\n"
                      "    Points Possible,,,,,24\n\"Lee, Ada\",101,S1,ada,Sec 1,\n")
    assert main(["keys", "--course-dir", str(tmp_path), "--roster", str(roster)]) == 0
    rows = list(csv.DictReader((tmp_path / keys.KEYS_FILE).open()))
    assert [r["student"] for r in rows] == ["ada"] and "1 variant keys written" in capsys.readouterr().out
    assert main(["keys", "--course-dir", str(tmp_path)]) == 1
    assert "keys needs the class" in capsys.readouterr().err


def test_no_slip_the_grader_names_in_ps2_q5_to_q7_lands_on_the_answer_in_any_variant():
    """Every model, GPU, utilization and block size ps2's draw can give, for the slips its tests name."""
    tried = 0
    for name, L, H, d, H_q, params in variants._MODELS:
        C = 2 * L * H * d * 2
        for gib in variants._GPU_GIB:
            for u in variants._UTILIZATION:
                usable, weights = int(u * gib * GiB), int(params * 2)
                if weights > 0.75 * usable:
                    continue
                for S in (8, 16, 32):
                    want = (usable - weights) // (S * C)
                    slips = {usable // (S * C), (int(u * gib * 1e9) - weights) // (S * C),
                             -(-(usable - weights) // (S * C)), 2 * (usable - weights) // (S * C),
                             (usable - weights) // C}
                    assert want > 0 and want not in slips, (name, gib, u, S)
                    tried += 1
        if H_q > H:
            for gib in range(10, 81):
                b, pt = gib * GiB, C // 2
                want = b // pt
                assert want not in {b // (2 * pt), b // (2 * L * H_q * d), b // (8 * pt), b // (pt // 2),
                                    int(gib * 1e9) // pt}, (name, gib)
    for n in range(2, 401):
        for S in (6, 8, 10, 12, 16, 20, 24, 32):
            assert n * (S - 1) / 2 not in {n * (S + 1) / 2, n * S / 2, (S - 1) / 2}
    assert tried > 300


def _with_setup_output(numbers_text: str) -> dict:
    """A notebook whose set-up cell showed ``numbers_text`` (as ``V`` prints itself)."""
    return {"cells": [{"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "setup"}}, "source": "V",
                       "outputs": [{"output_type": "execute_result", "data": {"text/plain": numbers_text}}]}]}


def test_a_learner_graded_on_other_numbers_than_their_notebook_showed_is_told_in_one_line(tmp_path):
    from pagedkv_lib.course.instructor.reporting import learner_feedback
    ada, bob = (learner_key(b"a test course secret", s) for s in ("ada", "bob"))
    own = _with_setup_output(repr(for_set("ps2_math", ada)))
    for shown in (repr(for_set("ps2_math", "")), repr(for_set("ps2_math", bob))):  # no key pasted; bob's key
        assert learner_feedback.numbers_note(_with_setup_output(shown), own) == learner_feedback.OTHER_NUMBERS
    assert learner_feedback.numbers_note(own, own) is None
    assert learner_feedback.numbers_note({"cells": []}, own) is None, "a notebook that showed no numbers: no note"
    assert "\n" not in learner_feedback.OTHER_NUMBERS and "bob" not in learner_feedback.OTHER_NUMBERS

    # on the feedback page: under its title, once, for the learner who showed other numbers only
    for student, shown in (("ada", _with_setup_output(repr(for_set("ps2_math", bob)))), ("cy", own)):
        for folder, nb in (("submitted", shown), ("autograded", own)):
            path = tmp_path / folder / student / "ps2_math" / "ps2_math.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(nb), encoding="utf-8")
        page = tmp_path / "feedback" / student / "ps2_math" / "ps2_math.html"
        page.parent.mkdir(parents=True)
        page.write_text("<html><head></head><body><h4>ps2_math (Score: 3 / 27)</h4></body></html>", encoding="utf-8")
    learner_feedback.polish_all(tmp_path / "feedback", {}, tmp_path)
    ada_page = (tmp_path / "feedback" / "ada" / "ps2_math" / "ps2_math.html").read_text(encoding="utf-8")
    cy_page = (tmp_path / "feedback" / "cy" / "ps2_math" / "ps2_math.html").read_text(encoding="utf-8")
    assert ada_page.count("showed other numbers") == 1 and "bob" not in ada_page
    assert "showed other numbers" not in cy_page
