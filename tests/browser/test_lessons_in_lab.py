"""The lessons opened in JupyterLab as a learner opens them: Run All, then read the page.

A screenshot of every window height of every lesson lands in artifacts/browser/ for a human look.
"""
from __future__ import annotations

import pytest


from .browser_server import REPO
from . import jlab
from .jlab import CUT_LINES_JS, error_outputs, open_notebook, run_all, screenshots, wait_idle
from .pages import expect
from .pages import check_gate, check_images, commit_first_choice, gate_boxes

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

LESSONS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("name", LESSONS)
def test_run_all_renders_every_output(lab, page, name):
    notebook = open_notebook(page, lab, f"notebooks/{name}")
    page.screenshot(path=str(page.shots / "00-opened.png"))
    run_all(page, notebook)
    shots = screenshots(page, "run-all")
    assert shots
    assert error_outputs(notebook) == []
    text = notebook.inner_text()
    assert "Error displaying widget" not in text
    assert "Traceback (most recent call last)" not in text
    check_images(notebook, jlab.OUTPUT)
    assert notebook.evaluate(CUT_LINES_JS) == [], "code lines cut off at the window edge"


@pytest.mark.parametrize("name", ["02_math.ipynb", "04_demo.ipynb"])
def test_gates_hide_the_reveal_until_the_commit_and_refuse_a_second(lab, page, name):
    notebook = open_notebook(page, lab, f"notebooks/{name}")
    run_all(page, notebook)
    gates = gate_boxes(notebook)
    assert gates.count() >= 1
    for k in range(gates.count()):
        check_gate(page, notebook, gates.nth(k), f"gate{k}", jlab.REVEAL, wait_idle)


def test_the_lab_rearms_when_the_block_size_moves(lab, page):
    notebook = open_notebook(page, lab, "notebooks/04_demo.ipynb")
    run_all(page, notebook)
    the_lab = notebook.locator(".widget-vbox:has(> .widget-dropdown):has(> .widget-text)").first
    the_lab.scroll_into_view_if_needed()
    gate = gate_boxes(the_lab)
    expect(gate).to_contain_text("S = 16")   # waits: under load the box may still be drawing
    commit_first_choice(gate)
    expect(gate.locator("button:text-is('Commit')")).to_be_disabled()
    wait_idle(page)
    page.screenshot(path=str(page.shots / "01-committed.png"))
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
