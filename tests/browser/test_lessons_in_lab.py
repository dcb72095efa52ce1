"""The lessons opened in JupyterLab as a learner opens them: Run All, then read the page.

A screenshot of every window height of every lesson lands in artifacts/browser/ for a human look.
"""
from __future__ import annotations

import re

import nbformat
import pytest


from .browser_server import REPO
from . import axe_check, jlab, reflow
from .jlab import (CUT_LINES_JS, commit_every_gate, error_outputs, menu, open_notebook, prompts, run_all, screenshots,
                   wait_idle)
from .pages import expect
from .keyboard import Learner, gate_by_keyboard, list_by_keyboard, practice_by_keyboard
from .pages import check_gate, check_images, commit_first_choice, gate_boxes, saved_records

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

LESSONS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


GATE_JOURNEYS = ("02_math.ipynb", "04_demo.ipynb")
"""Lessons whose every gate goes through :func:`pages.check_gate` (the others' gates are committed plainly)."""


@pytest.mark.parametrize("name", LESSONS)
def test_each_lesson_after_one_run_all_renders_its_gates_hide_their_reveals_and_axe_passes(
        lab, every_cell_drawn, page, name):
    """One Run All per lesson, every cell drawn, serves four checks in turn on the same page: every output
    renders; one gate, one practice (with a hint) and one list work by keyboard alone, no key reaching the
    notebook (:mod:`keyboard`); each gate hides its reveal until the commit and refuses a second (02, 04);
    with every gate committed, axe-core finds no serious or critical WCAG 2.1 AA violation in what the
    course draws, colour contrast included; and every output reflows at 320 CSS px (:mod:`reflow`) before
    the commits and after, 04 also in a 640 px window."""
    notebook = open_notebook(page, lab, f"notebooks/{name}")
    page.screenshot(path=str(page.shots / "00-opened.png"))
    run_all(page, notebook)

    # every output renders
    shots = screenshots(page, "run-all")
    assert shots
    assert error_outputs(notebook) == []
    text = notebook.inner_text()
    assert "Error displaying widget" not in text
    assert "Traceback (most recent call last)" not in text
    check_images(notebook, jlab.OUTPUT)
    assert notebook.evaluate(CUT_LINES_JS) == [], "code lines cut off at the window edge"

    # reflow before any commit: an option whose text covers the radio beside it cannot be clicked
    before = reflow.at_320(page, notebook, "before the commits")

    # the keyboard alone: one gate, one practice with a hint, one list; the cells unchanged after every key
    learner = Learner(page, notebook)
    choice_gates = gate_boxes(notebook).filter(has=page.locator("input[type='radio']"))
    if choice_gates.count():
        gate_by_keyboard(page, learner, choice_gates.first)
    practice_by_keyboard(page, learner, notebook.locator(".pagedkv-control:has(button:text-is('Check'))").first)
    list_by_keyboard(page, learner, notebook.locator(".pagedkv-control:has(> .widget-dropdown)").first)
    wait_idle(page)
    page.screenshot(path=str(page.shots / "keyboard-journey.png"))

    # the gates: no reveal before the commit, the reveal after it, a second commit refused
    gates = gate_boxes(notebook)
    assert gates.count() >= 1 or name == "03_code.ipynb"
    if name in GATE_JOURNEYS:
        assert gates.count() >= 1
        for k in range(gates.count()):
            if not gates.nth(k).locator("button:text-is('Commit')").is_disabled():   # not the keyboard's
                check_gate(page, notebook, gates.nth(k), f"gate{k}", jlab.REVEAL, wait_idle)

    # WCAG 2.1 AA with every gate committed
    commit_every_gate(page, notebook)
    assert jlab.error_outputs(notebook) == []
    assert page.locator(".jp-WindowedPanel-viewport.jp-content-visibility-mode").count() == 0, "cells left undrawn"
    jlab.screenshots(page, "committed")
    after = reflow.at_320(page, notebook, "after the commits")
    assert before["outputs"] >= 5 and after["outputs"] > before["outputs"], (before, after)
    axe_check.assert_no_violations(page, name.removesuffix(".ipynb"))

    if name == "04_demo.ipynb":   # the room and the canvas, then the whole tab in a 640 px window
        expect(notebook.locator(".pagedkv-room")).to_have_count(1)
        assert before["outputs"] >= 15 and after["regions"] >= 3, f"the reveals' tables lost their regions: {after}"
        page.set_viewport_size({"width": 640, "height": 800})
        window = reflow.read(page, notebook, None)
        page.screenshot(path=str(page.shots / "640-window.png"))
        assert window["found"] == [], "lesson 04 does not reflow at 640 px:\n" + "\n".join(window["found"])


def test_the_default_hand_off_carries_the_committed_predictions_then_the_lab_rearms_when_the_block_size_moves(
        lab, page):
    """The research room's hand-off, as copied from the page, holds what lesson 01 promises: the
    learner's committed predictions (lens and lab, with what they were shown), and the lab's state. Then,
    on the same page, the lab's committed gate re-arms when the block size moves."""
    notebook = open_notebook(page, lab, "notebooks/04_demo.ipynb")
    run_all(page, notebook)
    lens = gate_boxes(notebook).filter(has_text="A server stops reserving").first
    lens.scroll_into_view_if_needed()
    commit_first_choice(lens)
    expect(lens).to_contain_text("You predicted")
    the_lab = notebook.locator(".widget-vbox:has(> .widget-dropdown):has(> .widget-text)").first
    lab_gate = gate_boxes(the_lab)
    expect(lab_gate).to_contain_text("S = 16")
    commit_first_choice(lab_gate)
    expect(lab_gate.locator("button:text-is('Commit')")).to_be_disabled()
    expect(lab_gate).to_contain_text("You predicted")
    wait_idle(page)
    page.screenshot(path=str(page.shots / "01-committed.png"))
    room = notebook.locator(".pagedkv-room").first
    room.scroll_into_view_if_needed()
    handoff = room.locator(".pagedkv-handoff textarea")
    expect(handoff).to_have_value(re.compile(r"S = 16, sharing on\. Which effect is largest.* I predicted "))
    text = handoff.input_value()
    page.screenshot(path=str(page.shots / "handoff.png"))
    assert "Selected item (claim): The central claim" in text
    assert "The lab's state now: trace = A1-A3 batch, block size S = 16, sharing = on" in text
    listed = text.split("My committed predictions in this lesson")[1].split("My question:")[0]
    lines = [line for line in listed.splitlines() if line.startswith("- ")]
    assert len(lines) == 2 and lines[0].startswith("- A server stops reserving"), lines
    assert all("I predicted " in line and "; it is " in line for line in lines), lines

    # the lab re-arms when the block size moves
    box = the_lab.locator(".widget-text:has-text('block size') input")
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("8")
    page.keyboard.press("Enter")
    expect(the_lab).to_contain_text("S = 8, sharing on")   # the gate box is rebuilt: find it again
    gate = gate_boxes(the_lab)
    the_lab.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "02-block-size-typed.png"))
    assert gate.locator(jlab.OUTPUT).count() == 0, "the old reveal still shows"
    assert not gate.locator("button:text-is('Commit')").is_disabled(), "the gate did not re-arm"
    assert "You predicted" not in the_lab.inner_text()


def busy_notebook(root):
    """A lesson's opening gate, then a cell that keeps the kernel busy for 20 s, then one more cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell('from pagedkv_lib.lesson import learning_map\n'
                                          'learning_map.show("01_intuition")\nlearning_map.lens("01_intuition")'),
                nbformat.v4.new_code_cell("import time\ntime.sleep(20)   # a long-running cell"),
                nbformat.v4.new_code_cell('print("the last cell ran")')]
    nbformat.write(nb, str(root / "notebooks" / "busy_commit.ipynb"))
    return "notebooks/busy_commit.ipynb"


def test_a_commit_clicked_while_run_all_is_busy_is_refused_visibly_never_shown_committed_unsaved(lab, page):
    """The learner clicks Commit while Run All is still in a long cell, and saves at once. What the page
    then shows must match the saved file: committed and saved, or refused with a message (then saved
    on the next click)."""
    path = busy_notebook(lab.root)
    notebook = open_notebook(page, lab, path)
    lens = gate_boxes(notebook).first
    # open_notebook waited for a kernel connected to the page: a Run All sent now is not dropped
    menu(page, "Run", "Run All Cells")
    expect(lens).to_be_visible()
    lens.scroll_into_view_if_needed()
    lens.locator("input[type='radio']").first.check(force=True)
    lens.locator("button:text-is('Commit')").click(force=True)
    assert "[*]:" in prompts(notebook), "the long cell is not running: the click did not meet a busy kernel"
    menu(page, "File", "Save Notebook")   # the learner saves at once, while the kernel is still busy
    wait_idle(page)
    expect(notebook).to_contain_text("the last cell ran")
    page.wait_for_timeout(1000)
    message = lens.locator(".pagedkv-verdict")
    expect(message).not_to_have_text("")
    page.screenshot(path=str(page.shots / "01-after-run-all.png"))
    saved = saved_records(lab.root / path, timeout=5)
    shown = message.inner_text()
    if shown.startswith("Committed."):   # committed late: then it must be in the file the learner saved
        assert [r["gate"] for r in saved] == ["lens-01"], "the page shows a commit the saved file lacks"
    assert "the kernel was busy for" in shown and "Commit again now" in shown, shown
    assert saved == [] and not lens.locator("button:text-is('Commit')").is_disabled()
    assert "You predicted" not in lens.inner_text()
    lens.locator("button:text-is('Commit')").click()   # again, with the kernel free
    expect(message).to_contain_text("Committed. You predicted")
    expect(notebook).to_contain_text("Saved in this notebook for your instructor: lens-01")
    page.screenshot(path=str(page.shots / "02-committed.png"))
    menu(page, "File", "Save Notebook")
    records = saved_records(lab.root / path)
    assert [(r["gate"], r["notebook"]) for r in records] == [("lens-01", "01_intuition")]
