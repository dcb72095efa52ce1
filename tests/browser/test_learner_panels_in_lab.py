"""The learner panels in JupyterLab, as a learner meets them: a commit saved in the .ipynb, the answer
canvas's checks, and the research room opened, filled, saved and copied (then restored on reopening).

Screenshots land in artifacts/browser/<test name>/ (room-filled.png is the one to look at).
"""
from __future__ import annotations

import json
import re

import pytest

from .jlab import menu, open_notebook, run_all, wait_idle
from .pages import commit_first_choice, expect, gate_boxes, saved_records

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

LESSON = "notebooks/01_intuition.ipynb"
REPLAY = "code: replay.play_paged: the batch on the real block manager"   # an item of the room's list


def room_of(notebook):
    room = notebook.locator(".pagedkv-room").first
    room.scroll_into_view_if_needed()
    return room


def test_a_clicked_commit_is_saved_in_the_notebook_file(lab, page):
    notebook = open_notebook(page, lab, LESSON)
    run_all(page, notebook)
    lens = gate_boxes(notebook).filter(has_text="Before any figure").first
    lens.scroll_into_view_if_needed()
    commit_first_choice(lens)
    expect(lens.locator("button:text-is('Commit')")).to_be_disabled()
    wait_idle(page)
    expect(notebook).to_contain_text("Saved in this notebook for your instructor: lens-01")
    page.screenshot(path=str(page.shots / "01-lens-committed.png"))
    menu(page, "File", "Save Notebook")
    records = saved_records(lab.root / LESSON)
    assert [(r["gate"], r["notebook"], r["kind"]) for r in records] == [("lens-01", "01_intuition", "choice")]
    assert records[0]["right"] is False and records[0]["misconception"]


def test_the_canvas_checks_light_up_as_the_learner_types(lab, page):
    notebook = open_notebook(page, lab, LESSON)
    run_all(page, notebook)
    practice = notebook.locator(".widget-vbox:has(> .widget-textarea):has(button:text-is('Hint'))").first
    practice.scroll_into_view_if_needed()
    checks = practice.locator(".widget-html").filter(has_text="Claim").first   # the checks, after the canvas's label
    assert checks.inner_text().count("✓") == 0
    practice.locator("textarea").fill("A4 needs 2 new blocks")
    expect(checks).to_contain_text("✓ Claim")
    practice.locator("textarea").fill("A4 needs 2 new blocks because the shared prompt blocks are mapped, "
                                      "as in section 2")
    expect(checks).not_to_contain_text("○")
    page.screenshot(path=str(page.shots / "canvas-ready.png"))


def test_the_research_room_is_opened_filled_copied_and_its_draft_restored(lab, page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.url("").split("/?")[0])
    notebook = open_notebook(page, lab, LESSON)
    run_all(page, notebook)
    room = room_of(notebook)
    handoff = room.locator(".pagedkv-handoff textarea")
    expect(handoff).to_have_value(re.compile(r"Selected item \(claim\): The central claim"))  # once it is drawn
    room.locator(".widget-dropdown:has(label:text-is('attach to')) select").select_option(label=REPLAY)
    expect(room).to_contain_text("What play_paged does at admission")
    question = room.locator(".widget-textarea:has(label:text-is('your question')) textarea")
    question.fill("Why does A1's fourth block land in block 9?")
    room.locator(".widget-dropdown:has(label:text-is('Preferred explanation style')) select").select_option(
        "code first")
    room.locator(".widget-text:has(label:text-is('draft: one note')) input").fill("blocks go where one is free")
    room.locator(".widget-text:has(label:text-is('draft: next action')) input").fill("replay with S = 8")
    room.locator(".widget-text:has(label:text-is('draft: next action')) input").press("Enter")
    wait_idle(page)
    page.wait_for_function("""() => { const t = document.querySelector('.pagedkv-handoff textarea');
        return t && t.value.includes('replay with S = 8') && t.value.includes('code first'); }""")
    text = handoff.input_value()
    assert "def play_paged(" in text and "My question: Why does A1's fourth block land in block 9?" in text
    room.locator("button:text-is('Save draft')").click()
    expect(room).to_contain_text("saved beside the notebook")
    draft = json.loads((lab.root / "notebooks" / "01_intuition.research.json").read_text())
    assert draft["items"]["code-replay"]["next_action"] == "replay with S = 8"
    room.locator("button.pagedkv-copy").click()
    expect(room.locator(".pagedkv-copy-status")).to_contain_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == handoff.input_value()
    room.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "room-filled.png"), full_page=False)
    # without a clipboard, the copy button selects the text instead
    page.evaluate("Object.defineProperty(navigator, 'clipboard', {value: undefined, configurable: true})")
    room.locator("button.pagedkv-copy").click()
    expect(room.locator(".pagedkv-copy-status")).to_contain_text("selected")
    assert page.evaluate("""() => { const t = document.querySelector('.pagedkv-handoff textarea');
        return t.selectionStart === 0 && t.selectionEnd === t.value.length; }""")
    page.screenshot(path=str(page.shots / "room-selected.png"))
    # reopened (a fresh kernel), the room finds the draft again
    again = open_notebook(page, lab, LESSON)
    run_all(page, again)
    room = room_of(again)
    room.locator(".widget-dropdown:has(label:text-is('attach to')) select").select_option(label=REPLAY)
    expect(room.locator(".widget-text:has(label:text-is('draft: next action')) input")).to_have_value(
        "replay with S = 8")
    expect(room).to_contain_text("Draft restored")
    page.screenshot(path=str(page.shots / "room-restored.png"))
