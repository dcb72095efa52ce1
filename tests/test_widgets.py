"""The prediction gate, its record and the practice loop, driven from Python.

Without a browser, output printed inside ``with out:`` is not captured, so these tests read
state: the gate's flags, the Output widget's ``outputs`` list and the widgets' values.
"""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from pagedkv_lib.lesson import gates as W  # noqa: E402

CHOICES = ["about 80 KiB", "about 800 KiB", "about 8 MiB"]
EXPLAIN = "819,200 bytes = 800 KiB: 2 x 40 layers x 40 KV heads x 128 x 2 bytes"


@pytest.fixture(autouse=True)
def fresh_record():
    W.reset()
    yield
    W.reset()
    plt.close("all")


def ctok_gate(**kw):
    fig, ax = plt.subplots()
    ax.bar([0], [819_200])
    return W.predict("q-ctok", "How many bytes of KV cache per token?", choices=CHOICES,
                     answer="about 800 KiB", reveal=[fig, EXPLAIN], **kw)


def shown_text(gate) -> str:
    """Everything the gate's widgets hold: labels, inputs, and the output's display data."""
    view = gate.widget
    parts = [view.question.value, view.message.value, str(view.input.value), repr(gate)]
    for out in view.output.outputs:
        parts += [str(v) for v in out.get("data", {}).values()]
    return "\n".join(parts)


def test_nothing_is_revealed_before_a_commit_whatever_is_clicked_or_called():
    g = ctok_gate()
    view = g.widget
    view.button.click()                       # nothing chosen yet
    view.button.disabled = True
    view.button.click()                       # click() ignores disabled; the state decides
    assert g._reveal() is False               # the reveal callback, called directly
    assert not g.committed and not g.revealed and g.prediction is None
    assert view.output.outputs == ()
    text = shown_text(g)
    assert "819,200" not in text and "image/png" not in text
    assert W.record() == []


def test_the_text_form_says_how_to_commit_and_hides_the_answer():
    g = ctok_gate()
    text = g._repr_mimebundle_()["text/plain"]
    assert "commit('q-ctok'" in text and "(2) about 800 KiB" in text
    assert "819,200" not in text and "You predicted" not in text


def test_commit_by_button_reveals_the_verdict_the_figure_and_the_explanation():
    g = ctok_gate()
    view = g.widget
    view.input.value = "about 80 KiB"
    view.button.click()
    assert g.committed and g.revealed and g.outcome == "wrong"
    assert view.button.disabled and view.input.disabled
    kinds = [set(o["data"]) for o in view.output.outputs]
    assert "image/png" in kinds[1]
    text = shown_text(g)
    assert "You predicted about 80 KiB; it is about 800 KiB (wrong)" in text
    assert EXPLAIN in text


def test_a_commit_is_final_by_button_and_by_function(capsys):
    g = ctok_gate()
    W.commit("q-ctok", "about 800 KiB")
    printed = capsys.readouterr().out       # no kernel here: the text fallback prints the reveal
    assert "You predicted about 800 KiB; it is about 800 KiB (right)." in printed
    assert EXPLAIN in printed and "1 figure(s)" in printed
    view = g.widget
    view.input.value = "about 8 MiB"
    view.button.click()                       # disabled, but click() would fire: state refuses
    with pytest.raises(ValueError, match="already committed"):
        W.commit("q-ctok", "about 8 MiB")
    assert g.prediction == "about 800 KiB" and g.outcome == "right"
    assert [e["choice"] for e in W.record()] == ["about 800 KiB"]
    assert len(view.output.outputs) == 1 + 2  # verdict, figure, text: shown once


def test_a_bad_prediction_is_refused_and_changes_nothing():
    g = ctok_gate()
    with pytest.raises(ValueError, match=r"must be one of .*got 'about 800 kB'"):
        g.commit("about 800 kB")
    assert not g.committed and W.record() == []
    g.widget.input.value = None
    g.widget.button.click()
    assert "Choose or type" in g.widget.message.value and not g.committed


def test_running_the_cell_again_keeps_the_commit():
    ctok_gate().commit("about 8 MiB")
    again = ctok_gate()
    assert again.committed and again.prediction == "about 8 MiB"
    assert "You predicted about 8 MiB" in shown_text(again)


def test_a_number_gate_is_right_within_its_tolerance():
    g = W.predict("q-num", "KiB per token of OPT-13B?", number="KiB", answer=800, tolerance=0.1)
    assert "<a number, KiB>" in repr(g)
    g.widget.input.value = "750"
    g.widget.button.click()
    assert g.outcome == "right" and g.verdict() == "You predicted 750 KiB; it is 800 KiB (right)."
    h = W.predict("q-num2", "Same, tighter", number="KiB", answer=800, tolerance=0.01)
    h.commit(750)
    assert h.outcome == "wrong"
    ratio = W.predict("q-num4", "A share", number="%", answer=100 * 0.903476239458196, tolerance=0.1)
    ratio.commit(85.5)
    assert ratio.verdict() == "You predicted 85.5 %; it is 90.35 % (right)."
    bad = W.predict("q-num3", "A number", number="KiB", answer=1)
    bad.widget.input.value = "lots"
    bad.widget.button.click()
    assert "must be a number" in bad.widget.message.value and not bad.committed


def test_the_record_holds_each_commit_and_saves_to_json(tmp_path):
    ctok_gate().commit("about 800 KiB")
    W.predict("q-num", "KiB?", number="KiB", answer=800).commit("8e2")
    rec = W.record()
    assert [(e["id"], e["choice"], e["value"], e["outcome"]) for e in rec] == [
        ("q-ctok", "about 800 KiB", None, "right"), ("q-num", None, 800.0, "right")]
    assert all(e["time"].endswith("+00:00") for e in rec)
    rec[0]["outcome"] = "edited"
    assert W.record()[0]["outcome"] == "right"  # the record hands out copies
    path = W.save_record(tmp_path / "predictions.json")
    assert json.loads(open(path, encoding="utf-8").read()) == W.record()


def test_gate_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one of choices"):
        W.predict("q", "Q?", answer=1)
    with pytest.raises(ValueError, match="must be one of its choices"):
        W.predict("q", "Q?", choices=["a", "b"], answer="c")
    with pytest.raises(TypeError, match="question id"):
        W.predict("", "Q?", choices=["a", "b"], answer="a")
    with pytest.raises(ValueError, match="tolerance"):
        W.predict("q", "Q?", number="x", answer=1, tolerance=2)
    with pytest.raises(KeyError, match="no prediction with id 'nope'"):
        W.commit("nope", 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["click", "reveal", "disable", "pick0", "pick1", "commit0", "commit2"]),
                max_size=12))
def test_reveal_follows_exactly_the_first_commit(actions):
    """Whatever is clicked or called, the output is empty until the first commit, and that
    commit never changes afterwards."""
    W.reset()
    g = W.predict("q-p", "Which?", choices=["a", "b", "c"], answer="b", reveal=["why: b"])
    view, first = g.widget, None
    for act in actions:
        if act == "click":
            view.button.click()
        elif act == "reveal":
            g._reveal()
        elif act == "disable":
            view.button.disabled = True
        elif act.startswith("pick") and not view.input.disabled:
            view.input.value = "ab"[int(act[-1])]
        elif act.startswith("commit"):
            try:
                g.commit("abc"[int(act[-1])])
            except ValueError:
                pass
        first = first or g.prediction
        assert bool(view.output.outputs) == g.committed == (first is not None)
        assert g.prediction == first
    assert len(W.record()) == int(g.committed)


# ------------------------------------------------------------------ practice loop

def blocks_practice():
    return W.practice("p-blocks", "Blocks for 1,000 tokens at S=16?", answer=63, units="blocks",
                      hints=["N = ceil(T / S).", "1000 / 16 = 62.5.", "Round up."],
                      mistakes={62: "floor instead of ceil: the last, partly filled block counts too"})


def test_practice_hints_come_after_a_first_try_one_at_a_time():
    p = blocks_practice()
    assert "first guess" in p.hint() and p.hints_shown == 0
    right, _ = p.check(60)
    assert not right
    assert [p.hint() for _ in range(4)] == ["Hint 1/3: N = ceil(T / S).", "Hint 2/3: 1000 / 16 = 62.5.",
                                            "Hint 3/3: Round up.",
                                            "No more hints: check your working against the last one."]


def test_practice_names_a_known_mistake_then_accepts_the_answer():
    p = blocks_practice()
    right, message = p.check("62")
    assert not right and "floor instead of ceil" in message
    right, message = p.check(63.0)
    assert not right and "whole numbers" in message  # check_value refuses a float for an int
    assert p.check("63") == (True, "Right: 63 blocks.")
    assert [(e["value"], e["outcome"]) for e in W.record()] == [(62, "wrong"), (63.0, "wrong"), (63, "right")]


def test_practice_widgets_and_text_fallback(capsys):
    p = blocks_practice()
    view = p.widget
    view.hint_button.click()
    assert "first guess" in view.hint_list.value
    view.input.value = "62"
    view.check_button.click()
    assert "floor instead of ceil" in view.feedback.value
    view.hint_button.click()
    assert "N = ceil(T / S)." in view.hint_list.value and "62.5" not in view.hint_list.value
    assert W.check("p-blocks", 63) is True
    assert "Right: 63 blocks." in capsys.readouterr().out
    assert "check('p-blocks'" in p._repr_mimebundle_()["text/plain"]


def test_practice_arguments_are_checked():
    with pytest.raises(ValueError, match="at most 3"):
        W.practice("p", "Q?", answer=1, hints=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="answer 1 itself"):
        W.practice("p", "Q?", answer=1, mistakes={1: "no"})
    with pytest.raises(ValueError, match="must be a number"):
        blocks_practice().check("sixty")


def test_tied_choices_each_count_as_right_and_callable_reveals_draw_at_reveal_time():
    drawn = []

    def figure():
        drawn.append(1)
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        return fig

    g = W.predict("q-tie", "Which is largest?", choices=["a", "b", "c"], answer=("a", "c"), reveal=[figure])
    g.widget.button.click()
    assert drawn == []
    g.commit("c")
    assert g.outcome == "right" and drawn == [1]
    assert g.verdict() == "You predicted c; it is a and c, tied (right)."
    assert "image/png" in g.widget.output.outputs[1]["data"]
    h = W.predict("q-tie2", "Which?", choices=["a", "b", "c"], answer=("a", "c"))
    assert h.commit("b")["outcome"] == "wrong"
    with pytest.raises(ValueError, match="tuple of tied choices"):
        W.predict("q-tie3", "Which?", choices=["a", "b"], answer=("a", "z"))


@pytest.mark.slow
def test_in_a_kernel_the_gate_is_a_widget_and_commit_shows_the_reveal_under_its_cell(tmp_path):
    import nbformat
    from notebook_runs import notebook_client
    from pagedkv_lib.lesson.record import MIME

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        "import matplotlib.pyplot as plt\nfrom pagedkv_lib.lesson import gates as W\n"
        "W.set_notebook('t')\nfig, ax = plt.subplots()\nax.plot([0, 1])\n"
        "W.predict('q', 'Which?', choices=['a', 'b'], answer='b', reveal=[fig, 'why: b'])",
        "W.commit('q', 'a')",
        "W.predict('q2', 'Which?', choices=['a', 'b'], answer='b', mistakes={'a': 'the a mistake'})",
        "v = W.gate('q2').widget\nv.input.value = 'a'\nv._on_commit()   # what a click runs",
        "W.practice('p', 'Blocks?', answer=2, canvas=True)",
        "v = W._practice_module.PRACTICES['p'].widget\nv.canvas.value = '2 blocks because of tail slack, see lesson 02'\n"
        "v.input.value = '3'\nv._on_check()\nv.input.value = '2'\nv._on_check()")]
    notebook_client(nb, tmp_path / "t.ipynb", timeout=120).execute()
    outs = [c.outputs for c in nb.cells]
    gate_out = [o for o in outs[0] if o.get("data")]
    assert len(gate_out) == 1, "the figure handed to the reveal must not show at the end of the cell"
    assert "application/vnd.jupyter.widget-view+json" in gate_out[0]["data"]
    assert "why: b" not in str(outs[0]) and "image/png" not in str(outs[0])
    saved = [o["data"][MIME] for o in outs[1] if MIME in o.get("data", {})]
    assert [(e["gate"], e["value"], e["right"], e["notebook"]) for e in saved] == [("q", "a", False, "t")]
    kinds = [next(iter(set(o["data"]) - {"text/plain"})) for o in outs[1] if MIME not in o["data"]]
    assert kinds == ["text/markdown", "image/png", "text/markdown"]
    reveal = [o for o in outs[1] if "text/markdown" in o["data"]][0]
    assert "You predicted a; it is b (wrong)." in reveal["data"]["text/markdown"]
    # a click's commit is saved in the cell that shows the gate (its slot), not where the click ran
    clicked = [o["data"][MIME] for o in outs[2] if MIME in o.get("data", {})]
    assert [(e["gate"], e["value"], e["misconception"]) for e in clicked] == [("q2", "a", "the a mistake")]
    assert not any(MIME in o.get("data", {}) for o in outs[3])
    practice = {o["data"][MIME]["kind"]: o["data"][MIME] for o in outs[4] if MIME in o.get("data", {})}
    assert practice["number"]["value"] == 3 and practice["number"]["right"] is False   # the first try
    assert practice["text"]["checks"] == {"claim": True, "mechanism": True, "bridge": True}
    assert not any(MIME in o.get("data", {}) for o in outs[5])


# ------------------------------------------------------------------ clicks that waited behind running cells

def test_a_clicks_wait_is_measured_with_the_clock_difference_removed():
    from datetime import datetime, timedelta, timezone
    from pagedkv_lib.lesson import click_delay as CD
    CD._OFFSET.clear()
    now = datetime(2026, 12, 3, 14, 0, tzinfo=timezone.utc)
    assert CD.wait_of(now, now) is None                       # no cell seen yet: unknown, never refused
    behind = timedelta(hours=1)                                # the browser's clock is an hour slow
    CD.note_cell_start(now - behind - timedelta(seconds=4), now - timedelta(seconds=3.7))  # queued cell
    CD.note_cell_start(now - behind - timedelta(seconds=2), now - timedelta(seconds=1.9))  # a prompt one
    assert CD._OFFSET == [pytest.approx(3600.1)]
    assert CD.wait_of(now - behind - timedelta(seconds=0.1), now) == pytest.approx(0.0)   # handled at once
    assert CD.wait_of(now - behind - timedelta(seconds=9.1), now) == pytest.approx(9.0)   # waited 9 s
    assert CD.stamp({"header": {"date": "2026-12-03T13:00:00.5Z"}}) == datetime(
        2026, 12, 3, 13, 0, 0, 500000, tzinfo=timezone.utc)
    assert CD.stamp({"header": {"date": "yesterday"}}) is None and CD.stamp({}) is None
    CD._OFFSET.clear()


def test_a_commit_or_check_clicked_while_cells_ran_is_refused_visibly_and_changes_nothing(monkeypatch):
    from pagedkv_lib.lesson import click_delay as CD
    g = ctok_gate()
    view = g.widget
    view.input.value = "about 800 KiB"
    monkeypatch.setattr(CD, "click_wait", lambda: 12.4)        # the click waited 12 s behind Run All
    view._on_commit()
    assert not g.committed and W.record() == [] and view.output.outputs == ()
    assert view.message.value == "Not done: the kernel was busy for 12 s after your click. Commit again now."
    assert not view.button.disabled
    p = W.practice("p-b", "Blocks?", answer=63, hints=["h"])
    p.widget.input.value = "63"
    p.widget._on_check()
    assert p.tries == [] and "Check again now." in p.widget.feedback.value
    monkeypatch.setattr(CD, "click_wait", lambda: 0.4)         # handled at once: committed and saved
    view._on_commit()
    assert g.committed and view.message.value.startswith("Committed.") and g.saved["value"] == "about 800 KiB"
    p.widget._on_check()
    assert p.solved and len(p.tries) == 1


@pytest.mark.parametrize("value, shown", [(800, "800"), (1_234_567, "1,234,567"), (5.333333, "5.333"),
                                          (90.3476239458196, "90.35"), (12345.678, "12,346"), (0.04932, "0.04932"),
                                          (8.6e-60, "8.600e-60"), (2.5e16, "2.500e+16"), (800.0, "800.0"), (0.0, "0.0")])
def test_a_number_in_a_verdict_reads_to_four_significant_figures(value, shown):
    assert W.readable(value) == shown


def test_the_verdict_beside_commit_is_a_live_region_that_says_the_verdict_and_the_reveals_first_sentence():
    """The classes :mod:`pagedkv_lib.lesson.access` turns into ARIA in the browser: the gate is one control,
    its choices are named by its question, and its message is a verdict, marked committed only after the
    commit (the browser moves focus to it then), that reads the verdict and the first sentence of the reveal."""
    from pagedkv_lib.lesson import access
    g = ctok_gate()
    view = g.widget
    assert access.CONTROL in view.box._dom_classes
    named = [c for c in view.input._dom_classes if c.startswith("pagedkv-by-")]
    assert len(named) == 1 and f"pagedkv-name-{named[0].split('-')[-1]}" in view.question._dom_classes
    assert {access.LIVE, access.VERDICT} <= set(view.message._dom_classes)
    assert access.COMMITTED not in view.message._dom_classes and view.message.value == ""
    view.input.value = "about 80 KiB"
    view._on_commit()
    assert access.COMMITTED in view.message._dom_classes
    assert view.message.value.startswith("Committed. You predicted about 80 KiB; it is about 800 KiB (wrong).")
    assert f">{EXPLAIN}</span>" in view.message.value    # the first sentence, for a screen reader only


def test_a_practice_and_a_lab_announce_each_check_hint_and_rebuild_in_their_live_region():
    from pagedkv_lib.lesson import access
    from pagedkv_lib.lesson.lab_view import AllocationLab
    p = W.practice("p-live", "Blocks?", answer=63, hints=["Divide by the block size."])
    view = p.widget
    assert access.LIVE in view.status._dom_classes and view.status.value == ""
    view.input.value = "62"
    view._on_check()
    assert "62" in view.status.value
    view._on_hint()
    assert "Hint 1/1: Divide by the block size." in view.status.value
    view._on_hint()
    view._on_hint()     # the same note twice: the region still changes, so it is read again
    assert view.status.value.endswith("(again)</span>")
    lab = AllocationLab()
    assert lab.status.value == ""                       # nothing said when it is first drawn
    lab.set(block_size=8)
    assert "Rebuilt for trace A1-A3 batch, block size S 8, sharing on." in lab.status.value


def test_a_revealed_table_and_fenced_block_each_scroll_in_a_named_region_and_the_text_is_left_alone():
    from pagedkv_lib.lesson import access
    text = "Intro, **bold**.\n| a | b |\n|---|---|\n| 1 | 2 |\nAfter.\n```\nx  y\n| not a table |\n```\nEnd."
    out = access.scrolling(text)
    regions = out.split('<div class="pagedkv-scroll"')[1:]
    assert len(regions) == 2, out
    assert 'aria-label="Table: a, b"' in regions[0] and "\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n</div>\n" in regions[0]
    assert 'aria-label="Preformatted text"' in regions[1] and "```\nx  y\n| not a table |\n```" in regions[1]
    assert all('role="region" tabindex="0"' in r for r in regions)
    assert out.startswith("Intro, **bold**.\n") and "\nAfter.\n" in out and out.endswith("\nEnd.")
    assert access.scrolling("No table here.\n\nNone.") == "No table here.\n\nNone."


def test_the_focus_ring_is_the_contrast_its_docstring_and_the_readme_state():
    import re
    from pathlib import Path
    from pagedkv_lib.lesson import access
    from pagedkv_lib.palette import contrast
    ratio = f"{contrast(access.FOCUS_RING, '#FFFFFF'):.1f}:1"
    stated = set(re.findall(r"(\d+\.\d):1 on white", Path(access.__file__).read_text(encoding="utf-8")))
    readme = Path(__file__).resolve().parents[1] / "README.md"
    stated |= set(re.findall(r"focus ring of 3 px at\s+(\d+\.\d):1", readme.read_text(encoding="utf-8")))
    assert stated == {ratio.removesuffix(":1")}, (stated, ratio)
    assert contrast(access.FOCUS_RING, "#F5F5F5") >= 3   # JupyterLab's grey behind a cell's code still meets 2.4.13
