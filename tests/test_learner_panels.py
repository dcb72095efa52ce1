"""The learner panels: the answer canvas's three checks, the saved record of each commit, the research
room's hand-off and draft, and the learning map. Driven from Python (no browser: read widget state)."""
import json
import socket
import sys
import types

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedkv_lib.lesson import canvas as C, gates as W, items as I, learning_map, record  # noqa: E402
from pagedkv_lib.lesson import lab_view as LV  # noqa: E402
from pagedkv_lib.lesson.room import COPY_BUTTON, research_room  # noqa: E402

KEYS = {"v", "gate", "notebook", "kind", "value", "right", "misconception", "time"}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    W.reset()
    yield
    W.reset()
    plt.close("all")


# ------------------------------------------------------------------ the canvas's three checks

@pytest.mark.parametrize("text", ["7", "It needs 7.", "two blocks", "the slack is the problem", "8e5 bytes"])
def test_claim_passes_on_a_number_or_a_named_quantity(text):
    assert C.claim(text).ok, C.claim(text)


@pytest.mark.parametrize("text", ["", "   ", "I am not sure", "because of the way it works", "A1"])
def test_claim_fails_without_a_number_or_a_quantity(text):
    result = C.claim(text)
    assert not result.ok and "looks for a number or a named quantity" in result.line()


@pytest.mark.parametrize("text", ["2 blocks because the prefix cache serves the full blocks",
                                  "It copies one block, since copy-on-write runs on the first write",
                                  "The ref count is 3, so the block is stored once"])
def test_mechanism_passes_on_a_causal_word_and_a_named_mechanism(text):
    assert C.mechanism(text).ok, C.mechanism(text)


@pytest.mark.parametrize("text", ["", "7",                     # empty; a number with no reason
                                  "7 because I worked it out",  # a reason word, no mechanism named
                                  "the block table and the ref count"])  # mechanisms, no reason given
def test_mechanism_fails_without_both_a_reason_and_a_mechanism(text):
    assert not C.mechanism(text).ok


@pytest.mark.parametrize("text", ["2 blocks, as the block map of section 1 shows", "like the lab at S = 4",
                                  "the paper measured it", "in prefill the prompt is computed once"])
def test_bridge_passes_on_a_link_to_another_part_or_a_neighbouring_idea(text):
    assert C.bridge(text).ok, C.bridge(text)


@pytest.mark.parametrize("text", ["", "7", "2 blocks because the block table maps the shared blocks"])
def test_bridge_fails_on_an_answer_with_no_link_even_with_a_reason(text):
    assert not C.bridge(text).ok
    assert C.bridge("it forks", extra=["forks"]).ok   # a practice's own neighbours count


def test_checks_refuse_a_non_text_answer():
    with pytest.raises(TypeError, match="an answer must be text, got int"):
        C.checks(7)


# ------------------------------------------------------------------ the saved record

def test_a_commit_is_saved_in_the_fixed_format_with_its_misconception():
    W.set_notebook("01_intuition")
    g = W.predict("q-c", "Which?", choices=["a", "b", "c"], answer="b", mistakes={"a": "a is the floor"})
    g.commit("a")
    e = g.saved
    assert set(e) == KEYS and e["v"] == 1 and e["gate"] == "q-c" and e["notebook"] == "01_intuition"
    assert (e["kind"], e["value"], e["right"], e["misconception"]) == ("choice", "a", False, "a is the floor")
    assert e["time"].endswith("+00:00")
    bundle = record.bundle(e)
    assert json.loads(json.dumps(bundle[record.MIME])) == e
    assert bundle["text/plain"].count("\n") == 0 and "q-c = a (wrong)" in bundle["text/plain"]
    n = W.predict("q-n", "How many?", number="blocks", answer=10, mistakes={20: "doubled"}, tolerance=0)
    n.commit("20")
    assert (n.saved["kind"], n.saved["value"], n.saved["right"], n.saved["misconception"]) == (
        "number", 20, False, "doubled")


def test_an_ungraded_prediction_is_recorded_with_its_question_and_never_judged():
    g = W.predict("ps1-p", "Which?", choices=["x", "y"], answer=None, about="q2_tests")
    assert "x" in g.text() and "recorded" not in g.text()
    g.commit("y")
    assert g.saved["right"] is None and g.saved["question"] == "q2_tests" and g.saved["misconception"] is None
    assert "recorded, not judged here" in g.verdict()
    with pytest.raises(ValueError, match="mistakes of 'p' must be keyed by its choices"):
        W.predict("p", "Q?", choices=["a", "b"], answer="a", mistakes={"z": "no"})


def test_the_notebook_name_comes_from_the_lesson_else_from_jupyterlab(monkeypatch):
    assert record.notebook_name() is None
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/exercises/ps2_math/ps2_math.ipynb")
    assert record.notebook_name() == "ps2_math"
    W.set_notebook("02_math")
    assert record.notebook_name() == "02_math"
    with pytest.raises(ValueError, match="kind must be one of"):
        record.entry("g", "essay", "x", None)


def test_a_click_fills_the_gates_slot_and_a_second_click_changes_nothing():
    g = W.predict("q-s", "Which?", choices=["a", "b"], answer="b")
    g.slot = record.Slot()
    g.slot.shown = True            # as if its cell had shown it (no kernel here to display it)
    g.widget.input.value = "b"
    g.widget._on_commit()
    assert g.slot.data[record.MIME]["value"] == "b" and g.slot.data[record.MIME]["right"] is True
    g.widget._on_commit()
    assert g.slot.data[record.MIME]["value"] == "b"


def test_practice_saves_its_first_try_and_its_latest_canvas():
    p = W.practice("p-x", "Blocks?", answer=63, mistakes={62: "floor, not ceil"}, canvas=True)
    for slot in p.slots.values():
        slot.shown = True
    view = p.widget
    view.canvas.value = "63 blocks"
    assert "&#10003; <b>Claim</b>" in view.readiness.value and "&#9675; <b>Mechanism</b>" in view.readiness.value
    view.canvas.value = "63 blocks because ceil rounds up the last block, as in lesson 02"
    assert view.readiness.value.count("&#10003;") == 3
    view.input.value = "62"
    view.check_button.click()
    assert "floor, not ceil" in view.feedback.value
    first = p.slots["try"].data[record.MIME]
    assert (first["kind"], first["value"], first["right"], first["misconception"]) == ("number", 62, False,
                                                                                       "floor, not ceil")
    canvas = p.slots["canvas"].data[record.MIME]
    assert canvas["kind"] == "text" and canvas["checks"] == {"claim": True, "mechanism": True, "bridge": True}
    view.input.value = "63"
    view.canvas.value = "63"
    view.check_button.click()
    assert p.slots["try"].data[record.MIME]["value"] == 62                  # the first try stays
    assert p.slots["canvas"].data[record.MIME]["checks"]["mechanism"] is False  # the latest canvas
    with pytest.raises(ValueError, match="has no answer canvas"):
        W.practice("p-y", "Q?", answer=1).explain("text")


def test_the_canvas_text_fallback_prints_the_checks(capsys):
    W.practice("p-t", "Blocks?", answer=2, canvas=True, bridges=["A4"])
    assert W.explain("p-t", "2 blocks because the shared prompt blocks exist, as for A4") is True
    out = capsys.readouterr().out
    assert "Claim ready" in out and "Bridge ready (found: A4" in out
    assert "explain('p-t'" in repr(W.practice("p-t", "Blocks?", answer=2, canvas=True))


# ------------------------------------------------------------------ the research room

def secret_gate():
    return W.predict("q-blocks", "How many physical blocks does the batch use?", number="blocks",
                     answer=12345, tolerance=0, reveal=["SECRET-EXPLANATION of the blocks"])


def test_the_hand_off_holds_the_item_and_the_prediction_only_once_committed(tmp_path):
    room = research_room("01_intuition", "demo-blocks", folder=tmp_path)
    assert "I have not reached this prediction yet." in room.handoff()
    g = secret_gate()
    text = room.handoff()
    assert "S = 4, the 12-token prompt shared" in text and g.question in text
    assert "not committed my prediction yet" in text
    assert "12345" not in text and "12,345" not in text and "SECRET" not in text
    g.commit(7)
    text = room.handoff()
    assert "You predicted 7 blocks; it is 12,345 blocks (wrong)." in text and "SECRET" not in text


def test_the_hand_off_carries_an_equations_latex_and_a_code_cells_function_source(tmp_path):
    eq = research_room("02_math", "eq-ctok", folder=tmp_path).handoff()
    assert r"C_{\mathrm{tok}} = 2 \cdot L \cdot H_{kv}" in eq
    code = research_room("03_code", "code-slots", folder=tmp_path).handoff()
    assert "def table_slots(" in code and "pagedkv_lib.blocks.slot_mapping:table_slots" in code


def test_the_hand_off_has_the_question_evidence_choices_and_the_request(tmp_path):
    room = research_room("01_intuition", "claim", folder=tmp_path)
    text = room.handoff()
    assert 'What is the smallest example that makes "The central claim" clear' in text
    assert "lesson 01_intuition" in text and I.COURSE in text and I.CLAIM in text
    for line in room.item.evidence:
        assert f"- {line}" in text
    room.set(goal="prepare for the problem set", comfort="some background", style="code first",
             stuck="the notation", question="Why does slack stay?")
    text = room.handoff()
    assert "My goal: prepare for the problem set" in text and "What I am stuck on: the notation" in text
    assert "My question: Why does slack stay?" in text
    for ask in ("stay with the sources", "apart from what you assume", "name the mathematical objects",
                "end with one next action"):
        assert ask in text
    with pytest.raises(ValueError, match=r"style must be one of \('picture first'"):
        room.set(style="interpretive dance")
    assert room.choices["style"] == "code first"
    with pytest.raises(TypeError, match="unknown field 'mood'"):
        room.set(mood="calm")


def test_the_labs_state_goes_to_the_room_without_its_outcome_until_the_commit(tmp_path):
    the_lab = LV.AllocationLab(trace="parallel sampling", block_size=8)
    room = the_lab.ask(folder=tmp_path)
    text = room.handoff()
    assert "trace = parallel sampling, block size S = 8, sharing = on, n = 4" in text
    assert "not committed my prediction yet" in text
    assert str(the_lab.run.ledger["reserved"]) not in text.split("My question")[0].split("Demo state")[1]
    the_lab.commit("tail slack")
    assert "You predicted tail slack; it is" in room.handoff()


def test_the_default_hand_off_carries_every_committed_prediction_and_no_uncommitted_answer(tmp_path):
    """Lesson 01 says the hand-off carries your committed predictions: the claim item (the default) too."""
    room = research_room("01_intuition", "claim", folder=tmp_path)
    assert "My committed predictions in this lesson" in room.handoff() and "- none committed yet" in room.handoff()
    lens = learning_map.lens("01_intuition")
    g = secret_gate()
    lens.commit(lens.choices[0])
    text = room.handoff()
    assert f"- {lens.question} I predicted {lens.choices[0]}; it is {lens.answer} (wrong)." in text
    assert "12345" not in text and "12,345" not in text and "SECRET" not in text   # q-blocks: not committed
    g.commit(12345)
    assert "How many physical blocks does the batch use? I predicted 12345; it is 12345 (right)." in room.handoff()
    assert "SECRET" not in room.handoff()   # the reveal's explanation stays on the page


def test_the_room_widget_picks_up_a_commit_and_a_lab_control_moved_after_it_was_drawn(tmp_path):
    the_lab = LV.AllocationLab(trace="A1-A3 batch", block_size=16)
    view = research_room("04_demo", "claim", lab=the_lab, folder=tmp_path).widget
    assert "The lab's state now: trace = A1-A3 batch, block size S = 16, sharing = on" in view.handoff.value
    assert "- none committed yet" in view.handoff.value
    the_lab.gate.widget.input.value = "tail slack"
    the_lab.gate.widget._on_commit()   # what a click runs
    assert f"- {the_lab.gate.question} I predicted tail slack; it is" in view.handoff.value
    the_lab.block_size.value = 8   # the slider, as a learner drags it
    assert "block size S = 8" in view.handoff.value and "block size S = 16," not in view.handoff.value
    assert "S = 16, sharing on. Which effect" in view.handoff.value   # the earlier commit stays listed


def test_the_room_widgets_rebuild_the_hand_off_live(tmp_path):
    room = research_room("03_code", "claim", folder=tmp_path)
    view = room.widget
    assert "Evidence to inspect" in view.about.value and I.CLAIM[:40] in view.handoff.value
    view.item.value = "code-append"
    assert room.item.id == "code-append" and "def append_tokens(" in view.handoff.value
    assert "BlockManager.append_tokens" in view.question.value and "(src, dst) pair" in view.about.value
    view.question.value = "When does append copy?"
    view.companion["style"].value = "a worked example"
    assert "My question: When does append copy?" in view.handoff.value
    assert "Preferred explanation style: a worked example" in view.handoff.value
    assert "pagedkv-room" in view.box._dom_classes and "pagedkv-handoff" in view.handoff._dom_classes
    assert "pagedkv-copy" in view.copy.value and "navigator.clipboard" in COPY_BUTTON and "select()" in COPY_BUTTON


def test_the_draft_round_trips_through_its_file(tmp_path):
    room = research_room("02_math", "eq-slack", folder=tmp_path)
    assert room.message == "No draft saved yet."
    room.widget.note.value = "slack is at most S - 1 per request"
    room.widget.next_action.value = "rerun section 6 with S = 12"
    room.widget.save.click()
    path = tmp_path / "02_math.research.json"
    assert json.loads(path.read_text())["items"]["eq-slack"]["note"] == "slack is at most S - 1 per request"
    assert "beside the notebook" in room.widget.message.value
    again = research_room("02_math", "eq-slack", folder=tmp_path)
    assert (again.note, again.next_action) == ("slack is at most S - 1 per request", "rerun section 6 with S = 12")
    assert again.message == "Draft restored from 02_math.research.json."
    assert "My planned next action: rerun section 6 with S = 12" in again.handoff()
    other = research_room("02_math", "eq-ctok", folder=tmp_path)
    assert other.note == "" and other.set(item="eq-slack").note.startswith("slack is")


@pytest.mark.parametrize("content", ["{not json", '{"v": 1, "items": []}', '{"v": 7, "items": {}}', "[1, 2]",
                                     '{"v": 1, "items": {"claim": {"note": 5}}}'])
def test_a_corrupt_draft_file_gives_a_clear_message_and_an_empty_draft(tmp_path, content):
    path = tmp_path / "04_demo.research.json"
    path.write_text(content)
    room = research_room("04_demo", "claim", folder=tmp_path)
    assert "could not be read" in room.message and "empty draft" in room.message
    assert (room.note, room.next_action) == ("", "")
    assert "The central claim" in room.handoff()          # the room keeps working
    room.set(note="n1").save_draft()
    assert json.loads(path.read_text())["items"]["claim"]["note"] == "n1"


def test_on_colab_the_room_says_the_draft_lives_in_the_session_and_is_forgotten(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    message = research_room("01_intuition", folder=tmp_path).save_draft()
    assert "Colab session's files" in message and "deletes them when the runtime ends" in message


def test_the_room_never_opens_a_network_connection(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network call: {args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for name, lesson in I.LESSONS.items():
        for item in lesson.items:
            room = research_room(name, item.id, folder=tmp_path)
            room.widget.question.value = "why?"
            room.widget.save.click()
            assert room.handoff()


def test_bad_room_arguments_are_named():
    with pytest.raises(KeyError, match="no lesson '05_x'"):
        research_room("05_x")
    with pytest.raises(KeyError, match="has no item 'nope'; its items"):
        research_room("01_intuition", "nope")


# ------------------------------------------------------------------ the learning map and the lenses

@pytest.mark.parametrize("name", sorted(I.LESSONS))
def test_each_lesson_has_a_map_a_lens_and_items_of_the_known_kinds(name):
    text = learning_map.map_markdown(name)
    for part in ("**Before**", "**Now**", "**Try**", "**Next**", "Cost and Latency Observability",
                 "Intuition → Math → Code → Demo".replace(I.lesson(name).section, f"**{I.lesson(name).section}**")):
        assert part in text, part
    gate = learning_map.lens(name)
    lens = I.lesson(name).lens
    assert lens.reveal not in gate.text() and not gate.committed
    wrong = next(c for c in lens.choices if c != lens.answer)
    gate.commit(wrong)
    assert gate.saved["misconception"] == lens.mistakes[wrong]
    kinds = {i.kind for i in I.lesson(name).items}
    assert {"concept", "claim", "demo"} <= kinds <= set(I.KINDS)
    for item in I.lesson(name).items:
        assert len(item.evidence) >= 2 and len(item.resolve) >= 2
        if item.gate and item.id != "lab":
            assert item.kind == "demo"
