"""The lessons opened in JupyterLab as a learner opens them: Run All, then read the page.

A screenshot of every window height of every lesson lands in artifacts/browser/ for a human look.
"""
from __future__ import annotations

import pytest


from .jlab import REPO, CUT_LINES_JS, IMAGES_JS, error_outputs, expect, open_notebook, run_all, screenshots, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

LESSONS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


def gate_boxes(notebook):
    """Each gate's widget box: the one holding a Commit button."""
    return notebook.locator(".widget-vbox:has(> .widget-hbox > button:text-is('Commit'))")


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
    images = notebook.evaluate(IMAGES_JS)
    for img in images:
        assert img["width"] > 50 and img["height"] > 50, f"a figure did not render: {img}"
        assert img["distinct"] > 2, f"a figure is blank: {img}"
        assert not img["clipped"], f"a figure is clipped at a 1280 x 800 window: {img}"
    assert notebook.evaluate(CUT_LINES_JS) == [], "code lines cut off at the window edge"


@pytest.mark.parametrize("name", ["02_math.ipynb", "04_demo.ipynb"])
def test_gates_hide_the_reveal_until_the_commit_and_refuse_a_second(lab, page, name):
    notebook = open_notebook(page, lab, f"notebooks/{name}")
    run_all(page, notebook)
    gates = gate_boxes(notebook)
    assert gates.count() >= 1
    for k in range(gates.count()):
        box = gates.nth(k)
        box.scroll_into_view_if_needed()
        before = notebook.inner_text()
        assert box.locator(".jp-OutputArea-output").count() == 0, "a reveal shows before the commit"
        page.screenshot(path=str(page.shots / f"gate{k}-before.png"))
        commit_first_choice(box)
        out = box.locator(".widget-output .jp-OutputArea-output")
        expect(box.locator("button:text-is('Commit')")).to_be_disabled()   # the whole reveal is drawn
        wait_idle(page)
        box.scroll_into_view_if_needed()
        page.screenshot(path=str(page.shots / f"gate{k}-after.png"))
        revealed = out.all_inner_texts()
        assert revealed[0].startswith("You predicted"), revealed[0]
        answer = revealed[0].split("; it is ", 1)[1].rsplit(" (", 1)[0]
        if box.locator("input[type='text']").count():   # a number: the answer itself is the secret
            assert answer not in before, f"the answer {answer!r} was on the page before the commit"
        for line in "\n".join(revealed[1:]).splitlines():
            if len(line.strip()) >= 30:
                assert line.strip() not in before, f"reveal text on the page before the commit: {line!r}"
        for img in box.evaluate(IMAGES_JS):
            assert img["distinct"] > 2 and not img["clipped"], img
        # a second commit is refused: controls disabled, and forcing a click changes nothing
        button = box.locator("button:text-is('Commit')")
        shown = out.count()
        button.click(force=True)
        page.wait_for_timeout(500)
        assert out.count() == shown


def commit_first_choice(box) -> None:
    """Pick the first choice (or type 1) and press Commit."""
    radios = box.locator("input[type='radio']")
    if radios.count():
        radios.first.check()
    else:
        box.locator("input[type='text']").fill("1")
        box.locator("input[type='text']").press("Enter")
    box.locator("button:text-is('Commit')").click()


def test_the_lab_rearms_when_the_block_size_moves(lab, page):
    notebook = open_notebook(page, lab, "notebooks/04_demo.ipynb")
    run_all(page, notebook)
    the_lab = notebook.locator(".widget-vbox:has(> .widget-dropdown):has(.widget-slider)").first
    the_lab.scroll_into_view_if_needed()
    gate = the_lab.locator(".widget-vbox:has(> .widget-hbox > button:text-is('Commit'))")
    assert "S = 16" in gate.inner_text()
    commit_first_choice(gate)
    expect(gate.locator("button:text-is('Commit')")).to_be_disabled()
    wait_idle(page)
    page.screenshot(path=str(page.shots / "01-committed.png"))
    readout = the_lab.locator(".widget-slider:has-text('block size') .widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("8")
    page.keyboard.press("Enter")
    expect(the_lab).to_contain_text("S = 8, sharing on")   # the gate box is rebuilt: find it again
    gate = the_lab.locator(".widget-vbox:has(> .widget-hbox > button:text-is('Commit'))")
    the_lab.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "02-slider-moved.png"))
    assert gate.locator(".jp-OutputArea-output").count() == 0, "the old reveal still shows"
    assert not gate.locator("button:text-is('Commit')").is_disabled(), "the gate did not re-arm"
    assert "You predicted" not in the_lab.inner_text()
