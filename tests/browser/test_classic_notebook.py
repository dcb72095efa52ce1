"""04_demo in the classic notebook 6.5 with ipywidgets 7.7.1: the stack closest to Colab's that runs here.

A learner opens the lesson, runs every cell from the menu, reads the page, and commits the lab's
prediction (and the simulator's, and the four of today's engines' part). It runs in ``make test-colab`` (see :mod:`classic`); a
screenshot of each step lands in artifacts/browser/<test name>/.
"""
from __future__ import annotations


import pytest

from . import classic
from .keyboard import Learner, gate_by_keyboard, list_by_keyboard, practice_by_keyboard
from .pages import check_gate, check_images, expect, gate_boxes, saved_records

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

# What the page shows when a widget fails: ipywidgets 7's own messages, and the text form of a gate
# (it shows only where no widget view could be drawn).
BROKEN = ("Error displaying widget", "Error rendering Jupyter widget", "Could not create",
          "No widgets here?", "Traceback (most recent call last)")


def watch_errors(page) -> list[str]:
    """Errors the page throws or the widget manager logs from now on (for failure messages)."""
    problems = []
    page.on("pageerror", lambda err: problems.append(str(err)))

    def console(msg):
        if msg.type == "error" and "widget" in msg.text.lower():
            problems.append(msg.text)
    page.on("console", console)
    return problems


def test_the_demo_lesson_gates_in_the_classic_notebook(classic_server, page):
    problems = watch_errors(page)
    notebook = classic.open_notebook(page, classic_server, "notebooks/04_demo.ipynb")
    page.screenshot(path=str(page.shots / "00-opened.png"))
    classic.run_all(page, notebook)
    classic.screenshots(page, "01-run-all")
    assert classic.error_outputs(notebook) == []
    text = notebook.inner_text()
    assert not [b for b in BROKEN if b in text], f"a widget did not render; page errors: {problems[:5]}"
    check_images(notebook, classic.OUTPUT)
    gates = gate_boxes(notebook)
    assert gates.count() == 7, (f"expected the lens's, the lab's, the simulator's and today's engines' four gates; "
                                f"page errors: {problems[:5]}")
    expect(gates.nth(1)).to_contain_text("A1-A3 batch, S = 16")   # the lab's gate comes after the lens
    # the keyboard alone (ipywidgets 7.7.1): the lens's gate, the practice with a hint, the lab's list; the
    # notebook's cells unchanged after every key (the keyboard manager pauses inside a course control)
    learner = Learner(page, notebook)
    gate_by_keyboard(page, learner, gates.first)
    practice_by_keyboard(page, learner, notebook.locator(".pagedkv-control:has(button:text-is('Check'))").first)
    list_by_keyboard(page, learner, notebook.locator(".pagedkv-control:has(> .widget-dropdown)").first)
    classic.wait_idle(page)
    page.screenshot(path=str(page.shots / "01-keyboard-journey.png"))
    gates = gate_boxes(notebook)   # the lab's gate was rebuilt by the keys on its list
    for k in range(1, gates.count()):   # the first was committed by keyboard
        revealed = check_gate(page, notebook, gates.nth(k), f"{2 + k:02d}-gate{k}", classic.REVEAL,
                              classic.wait_idle)
        assert len(revealed) >= 2, f"gate {k} revealed only its verdict: {revealed}"
    # each click's commit is saved with the notebook (an output the click filled in the gate's cell)
    page.evaluate("Jupyter.notebook.save_notebook()")
    path = classic_server.root / "notebooks" / "04_demo.ipynb"
    saved = [r["gate"] for r in saved_records(path, min_count=8)]   # and the keyboard's practice's first try
    assert sorted(saved) == ["lab-effect", "lens-04", "p-fork-blocks", "q-chunking", "q-cpu-tier", "q-preempt",
                             "q-served-preempt", "sim-batch"], saved
