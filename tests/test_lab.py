"""The allocation lab and the simulator lab, driven from Python (no browser: read widget state)."""
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from pagedkv_lib.lesson import lab, lab_view as LV, gates as W  # noqa: E402
from pagedkv_lib.blocks.manager import BlockManager  # noqa: E402


@pytest.fixture(autouse=True)
def fresh():
    W.reset()
    yield
    W.reset()
    plt.close("all")


def visible(the_lab) -> str:
    """All text the lab's widgets hold, the gate's output included."""
    g = the_lab.gate.widget
    parts = [the_lab.about.value, g.question.value, g.message.value, str(g.input.value), repr(the_lab)]
    parts += [str(v) for o in g.output.outputs for v in o["data"].values()]
    return "\n".join(parts)


def shown_ledger(the_lab) -> dict:
    """The ledger row of the markdown table the lab revealed."""
    for o in the_lab.gate.widget.output.outputs:
        lines = o["data"].get("text/markdown", "").splitlines()   # the table sits in a sideways-scrolling region
        for k, line in enumerate(lines):
            if not line.startswith("| logical | unique | reserved | slack |"):
                continue
            row = lines[k + 2]
            values = [int(v) for v in row.strip("| ").split(" | ")]
            return dict(zip(("logical", "unique", "reserved", "slack"), values))
    raise AssertionError("no ledger table in the lab's output")


@pytest.mark.parametrize("trace", lab.TRACES)
def test_before_a_commit_no_block_id_or_slot_count_is_shown(trace):
    the_lab = LV.AllocationLab(trace=trace, block_size=8)
    assert the_lab.gate.widget.output.outputs == ()
    text = visible(the_lab)
    assert "reserved" not in text and "slack =" not in text and "block table" not in text
    numbers = {int(x) for x in re.findall(r"\d+", text)}
    assert numbers <= {1, 2, 3, 4, 8, 20}, f"only S=8, n=4, trace names and choice numbers may show: {numbers}"


def test_after_a_commit_the_ledger_shown_is_the_block_managers_for_the_page_batch():
    the_lab = LV.AllocationLab(trace="A1-A3 batch", block_size=8)
    the_lab.commit("tail slack")
    # by hand: A1 prefills the 12-token prompt, A2 and A3 fork it, then each appends its tail
    bm = BlockManager(16, 8)
    bm.add_request("A1", list(range(12)))
    bm.fork("A1", "A2")
    bm.fork("A1", "A3")
    for rid, tail in (("A1", 3), ("A2", 5), ("A3", 2)):
        for t in range(tail):
            bm.append_tokens(rid, [1000 * len(rid + str(tail)) + 100 * tail + t])
    assert shown_ledger(the_lab) == bm.stats().summary() == {"logical": 46, "unique": 30, "reserved": 40,
                                                             "slack": 10}
    assert "You predicted tail slack; it is reservation waste (contiguous) (wrong)." in visible(the_lab)
    figures = [o["data"] for o in the_lab.gate.widget.output.outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 2  # the block map and the contiguous comparison
    assert all('alt="' in f["text/html"] for f in figures), "each figure carries its text alternative"


@pytest.mark.parametrize("trace", lab.TRACES)
@pytest.mark.parametrize("S,sharing", [(1, True), (5, False)])
def test_the_ledger_shown_equals_stats_summary_for_every_trace(trace, S, sharing):
    the_lab = LV.AllocationLab(trace=trace, block_size=S, sharing=sharing)
    the_lab.commit(lab.EFFECTS[2])
    the_lab.run.manager.check_invariants()
    assert shown_ledger(the_lab) == the_lab.run.manager.stats().summary()


def test_moving_the_slider_re_arms_the_gate():
    the_lab = LV.AllocationLab(trace="parallel sampling", block_size=4)
    first = the_lab.gate
    the_lab.commit("prefix-sharing savings")
    assert first.revealed
    the_lab.block_size.value = 32          # what dragging the slider does
    assert the_lab.gate is not first and not the_lab.gate.committed
    assert the_lab.gate.widget.output.outputs == ()
    assert "S = 32" in the_lab.gate.question
    the_lab.sharing.value = False
    assert not the_lab.gate.committed
    the_lab.gate.widget.input.value = "tail slack"
    the_lab.gate.widget.button.click()
    assert [e["choice"] for e in W.record()] == ["prefix-sharing savings", "tail slack"]
    assert first.prediction == "prefix-sharing savings"  # the old commit is kept, not changed


def test_the_lab_checks_its_controls():
    the_lab = LV.AllocationLab()
    with pytest.raises(TypeError, match="unknown control 'size'"):
        the_lab.set(size=4)
    with pytest.raises(ValueError, match="block_size"):
        the_lab.set(trace="beam search", block_size=0)   # a slider would clamp 0 to 1 silently
    assert (the_lab.trace.value, the_lab.block_size.value) == ("A1-A3 batch", 16)  # nothing moved
    with pytest.raises(ValueError, match="trace"):
        the_lab.set(trace="Alpaca")
    with pytest.raises(ValueError, match="trace"):
        lab.run_lab("Alpaca", 4)
    with pytest.raises(ValueError, match="block_size"):
        lab.run_lab("A1-A3 batch", 0)
    assert "commit('lab-effect'" in the_lab._repr_mimebundle_()["text/plain"]
    W.commit("lab-effect", "tail slack")     # the text fallback reaches the lab's current gate
    assert the_lab.gate.committed


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(lab.TRACES), st.integers(1, 64), st.booleans(), st.integers(2, 8))
def test_effects_obey_the_ledger_identities(trace, S, sharing, n):
    run = lab.run_lab(trace, S, sharing, n)
    led, fx = run.ledger, run.effects
    assert led["slack"] == led["reserved"] - led["unique"] == fx["tail slack"] >= 0
    assert fx["prefix-sharing savings"] >= 0 and (sharing or fx["prefix-sharing savings"] == 0)
    arenas = run.contiguous
    assert arenas["oracle"].categories()["token_states"] == led["logical"]
    assert sum(arenas["max"].categories().values()) == arenas["max"].num_slots
    assert fx["reservation waste (contiguous)"] == arenas["max"].num_slots - led["logical"]
    best = max(fx.values())
    top = run.dominant if isinstance(run.dominant, tuple) else (run.dominant,)
    assert {e for e in lab.EFFECTS if fx[e] == best} == set(top)


def test_the_page_batch_outcome_depends_on_the_block_size():
    assert lab.run_lab("A1-A3 batch", 4).dominant == "reservation waste (contiguous)"
    assert lab.run_lab("A1-A3 batch", 64).dominant == "tail slack"
    assert lab.run_lab("beam search", 8).dominant == "prefix-sharing savings"


def test_simulator_lab_gates_the_batch_ratio_and_shows_the_figure():
    sim = LV.SimulatorLab()
    results = sim.results
    assert [r.policy for r in results] == list(LV.POLICIES)
    ratio = LV.batch_ratio(results)
    assert sim.gate.answer == round(ratio, 1) and ratio > 2
    assert sim.gate.widget.output.outputs == ()
    paged = next(r for r in results if r.policy == "paged").summary
    assert 0.5 <= paged["preemptions"] / paged["requests"] <= 2  # the lesson says: about once per request
    sim.commit(1)
    assert sim.gate.outcome == "wrong"
    with pytest.raises(ValueError, match="trace"):
        LV.SimulatorLab("ShareGPT")
    kinds = [set(o["data"]) for o in sim.gate.widget.output.outputs]
    assert any("image/png" in k for k in kinds)


def test_the_demo_lesson_hides_its_practice_text_and_fits_a_1280_pixel_window():
    import nbformat
    from conftest import REPO

    cells = nbformat.read(REPO / "notebooks" / "04_demo.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells)
    assert "subject page" not in text.lower() and "the three requests A1-A3 from the Intuition" in text
    assert "about once per request" in text and "ps4_demo" in text
    for i, c in enumerate(cells):
        if c.cell_type == "code" and "colab-setup" not in c.metadata.get("tags", []):
            assert max(map(len, c.source.splitlines()), default=0) <= 88, f"cell {i} is too wide"
        if "W.practice(" in c.source:
            hidden = cells[i - 1]
            assert "hints=[" not in c.source and "def reveal_text" in hidden.source
            assert hidden.metadata["jupyter"]["source_hidden"] is True
            assert hidden.metadata["cellView"] == "form" and hidden.source.startswith("# @title")
