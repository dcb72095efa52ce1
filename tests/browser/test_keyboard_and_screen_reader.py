"""Every kind of course control in JupyterLab 4, by the keyboard alone and as a screen reader hears it.

One small notebook holds one of each: a choice gate, a number gate, a practice with hints and an answer
canvas, the allocation lab and the research room. For each: its accessibility-tree roles and names,
its live regions, focus after each key, and the notebook's cells unchanged after every key (no
command-mode shortcut gets through). The lessons' own journeys run in test_lessons_in_lab.py (one gate,
one practice with a hint and one list per lesson, on the Run All page those tests share).
"""
from __future__ import annotations

import nbformat
import pytest

from .jlab import open_notebook, run_all, wait_idle
from .keyboard import SHORTCUTS, Learner, ax_node, gate_by_keyboard, list_by_keyboard, practice_by_keyboard, start_at
from .pages import expect, gate_boxes

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

CELLS = [
    "from pagedkv_lib.lesson import gates as W\n"
    "W.predict('kb-choice', 'Which block holds token 5 at block size 4?', choices=['block 0', 'block 1', 'block 2'],\n"
    "          answer='block 1', reveal=['Token 5 sits in block 5 // 4 = 1. Slots 4 to 7 are block 1.'])",
    "W.predict('kb-number', 'How many blocks does a 13-token sequence take at block size 4?', number='blocks',\n"
    "          answer=4, reveal=['It takes ceil(13 / 4) = 4 blocks. The last holds one token.'])",
    "W.practice('kb-practice', 'Slack of a 13-token sequence at block size 4?', answer=3, units='slots',\n"
    "           hints=['Reserved slots are blocks times 4.', 'Slack is reserved minus tokens.'], canvas=True)",
    "from pagedkv_lib.lesson.lab_view import AllocationLab\nthe_lab = AllocationLab()\nthe_lab",
    "the_lab.ask()",
]


@pytest.fixture
def controls(lab, every_cell_drawn, page):
    """The notebook of one control of each kind, opened and run; returns (notebook locator, Learner)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, str(lab.root / "notebooks" / "keyboard_controls.ipynb"))
    notebook = open_notebook(page, lab, "notebooks/keyboard_controls.ipynb")
    run_all(page, notebook)
    expect(notebook.locator(".pagedkv-room")).to_have_count(1)
    return notebook, Learner(page, notebook)


RING_JS = """(el) => {
  const s = getComputedStyle(el), r = el.getBoundingClientRect();
  const width = parseFloat(s.outlineWidth), grow = width + parseFloat(s.outlineOffset);
  const ring = {left: r.left - grow, top: r.top - grow, right: r.right + grow, bottom: r.bottom + grow};
  const cut = [];
  for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
    const as = getComputedStyle(a);
    if (as.overflowX !== 'visible' || as.overflowY !== 'visible') {
      const c = a.getBoundingClientRect(), left = c.left + a.clientLeft, top = c.top + a.clientTop;
      const clip = {left, top, right: left + a.clientWidth, bottom: top + a.clientHeight};   // its padding box
      const lost = ['left', 'top'].filter((k) => ring[k] < clip[k] - 0.5)
        .concat(['right', 'bottom'].filter((k) => ring[k] > clip[k] + 0.5));
      if (lost.length) { cut.push(`${a.className.split(' ').slice(-2).join('.')} cuts its ${lost.join(', ')}`); }
    }
    if (a.matches('.jp-OutputArea-output, .output_subarea')) { break; }
  }
  return {width, style: s.outlineStyle, color: s.outlineColor, cut};
}"""
"""The focused element's outline (width, style, colour) and each box between it and its output that clips it
(overflow other than visible) and cuts some side of the ring."""


def test_a_choice_gate_is_one_named_radio_group_and_its_verdict_takes_focus_and_is_read(controls, page):
    notebook, learner = controls
    gate = gate_boxes(notebook).filter(has_text="Which block holds token 5").first
    before = gate.aria_snapshot()
    page.screenshot(path=str(page.shots / "01-gate-before.png"))
    readings = gate_by_keyboard(page, learner, gate)
    gate.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "02-gate-after.png"))
    after = gate.aria_snapshot()
    assert '- radiogroup "Predict. Which block holds token 5' in before, before
    assert "- status" not in before.split("radiogroup", 1)[0]
    assert "Token 5 sits in block 5 // 4 = 1." in readings["said"]           # the reveal's first sentence
    assert "You predicted block 0; it is block 1 (wrong)." in readings["said"]  # ArrowDown, ArrowUp: block 0
    assert "- status: Committed. You predicted block 0" in after, after
    verdict = gate.locator(".pagedkv-verdict")
    expect(verdict).to_be_focused()
    verdict.locator("xpath=..").screenshot(path=str(page.shots / "03-verdict-focused.png"))   # its row, ring and all
    ring = verdict.evaluate(RING_JS)   # the whole 3 px ring in view: none of its sides cut by a box around it
    assert ring["width"] >= 3 and ring["style"] == "solid" and ring["color"] == "rgb(11, 87, 208)", ring
    assert ring["cut"] == [], f"the verdict's focus ring is cut: {ring}"


def test_a_number_gate_is_named_by_its_question_and_units(controls, page):
    notebook, learner = controls
    gate = gate_boxes(notebook).filter(has_text="13-token sequence take").first
    start_at(gate)
    field = learner.tab_to(gate, "input")
    assert field["name"].startswith("Predict. How many blocks") and field["name"].endswith("blocks"), field
    page.keyboard.type("4")
    learner.press("Enter", inside=gate)     # Enter in the box commits nothing and edits no cell
    commit = learner.tab_to(gate, "Commit")
    assert commit["tag"] == "button"
    learner.press("Enter")
    verdict = gate.locator(".pagedkv-verdict")
    expect(verdict).to_be_focused()
    expect(verdict).to_contain_text("Committed. You predicted 4 blocks; it is 4 blocks (right).")
    assert "It takes ceil(13 / 4) = 4 blocks." in verdict.text_content()


def test_a_practice_reads_its_check_and_each_hint_and_keeps_keys_from_the_notebook(controls, page):
    notebook, learner = controls
    practice = notebook.locator(".pagedkv-control:has(button:text-is('Check'))").first
    start_at(practice)
    canvas = learner.tab_to(practice, "textarea")
    assert canvas["name"].startswith("Your answer canvas"), canvas
    said = practice_by_keyboard(page, learner, practice)
    assert "Hint 1/2: Reserved slots are blocks times 4." in said
    learner.press("Enter", inside=practice)
    expect(practice.locator(":scope > .pagedkv-live")).to_contain_text("Hint 2/2: Slack is reserved minus tokens.")
    practice.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "practice-by-keyboard.png"))


def test_the_labs_controls_announce_each_rebuild_and_keep_keys_from_the_notebook(controls, page):
    notebook, learner = controls
    the_lab = notebook.locator(".pagedkv-control:has(> .widget-dropdown)").first
    select = list_by_keyboard(page, learner, the_lab)   # arrows and letters pick traces: each rebuilds the lab
    assert select["name"] == "trace", select
    wait_idle(page)
    status = the_lab.locator(":scope > .pagedkv-live")
    expect(status).to_contain_text("Rebuilt for trace")
    learner.tab_to(the_lab, "block size")
    learner.shortcuts(the_lab, ("ArrowUp", "Enter"))   # a number box steps with the arrows; Enter applies
    wait_idle(page)
    expect(status).to_contain_text("block size S 17")
    learner.tab_to(the_lab, "checkbox")
    learner.shortcuts(the_lab, [k for k in SHORTCUTS if k != "Enter"])
    learner.press("Space", inside=the_lab)
    wait_idle(page)
    expect(status).to_contain_text("sharing off")
    the_lab.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "lab-by-keyboard.png"))


NARROW_JS = """(box) => {
  const out = box.closest('.jp-OutputArea-output, .output_subarea');
  out.style.width = out.style.maxWidth = '320px';
  return [...box.querySelectorAll('input, select, textarea, button')]
    .filter((e) => e.offsetParent !== null && e.getBoundingClientRect().right > out.getBoundingClientRect().right + 3)   // ipywidgets' 2 px margin
    .map((e) => `${e.tagName.toLowerCase()} ${e.getAttribute('aria-labelledby') || e.id}: right edge at ${Math.round(e.getBoundingClientRect().right)} px, the output's at ${Math.round(out.getBoundingClientRect().right)} px`)
    .concat(out.scrollWidth > out.clientWidth + 1 ? ['the output scrolls sideways'] : []);
}"""
"""Narrow the output holding a control to 320 CSS px (WCAG 1.4.10's width; JupyterLab itself has no room for a
notebook in a 320 px window, so the output is narrowed, not the window) and list what sticks out."""


def test_the_research_room_names_its_hand_off_and_it_and_the_canvas_reflow_at_320_css_px(controls, page):
    notebook, learner = controls
    room = notebook.locator(".pagedkv-room").first
    list_by_keyboard(page, learner, room)
    handoff = room.locator(".pagedkv-handoff textarea")
    assert ax_node(page, handoff)["name"].startswith("Hand-off"), ax_node(page, handoff)
    practice = notebook.locator(".pagedkv-control:has(button:text-is('Check'))").first
    for name, box in (("room", room), ("practice", practice)):
        wide = box.evaluate(NARROW_JS)
        box.scroll_into_view_if_needed()
        page.screenshot(path=str(page.shots / f"{name}-at-320px.png"))
        assert wide == [], f"the {name} does not reflow at 320 CSS px: {wide}"
