"""A released problem set as a learner meets it in ``make lab``, and the instructor's formgrader."""
from __future__ import annotations

import re

import pytest

from .browser_server import REPO, WAIT_MS
from .jlab import accept_dialog, only, open_notebook, prompt, run_cell, wait_ran
from .pages import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

# Every released set in exercises/.
PSETS = sorted(str(p.relative_to(REPO)) for p in (REPO / "exercises").glob("*/*.ipynb"))
WRONG_BLOCKS = ("def blocks_needed(num_tokens, block_size):\n"
                "    return num_tokens // block_size   # rounds down: the mistake\n")


def setup_cell(notebook):
    """The set-up cell of a problem set: the one cell that draws the learner's numbers ``V``."""
    return only(notebook.locator(".jp-CodeCell").filter(has_text="V = for_set("), "the set-up cell (V = for_set(...))")


def validate(page) -> str:
    """Press nbgrader's Validate button; return the text of the dialog it opens, and close it."""
    page.locator(".jp-NotebookPanel:visible .jp-Toolbar button:has-text('Validate'),"
                 ".jp-NotebookPanel:visible .jp-Toolbar :text-is('Validate')").first.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=WAIT_MS)
    page.wait_for_function("() => !document.querySelector('.jp-Dialog').innerText.includes('Validating')",
                           timeout=WAIT_MS)
    text = dialog.inner_text()
    page.screenshot(path=str(page.shots / "validate.png"))
    accept_dialog(page)
    return text


@pytest.mark.parametrize("path", PSETS, ids=lambda p: p.split("/")[1])
def test_validate_on_the_untouched_set_gives_short_messages(lab, page, path):
    open_notebook(page, lab, path)
    page.screenshot(path=str(page.shots / "00-opened.png"))
    text = validate(page)
    assert "Traceback (most recent call last)" not in text and 'File "' not in text, text[:2000]
    assert "NotImplementedError" in text or "failed" in text.lower(), text[:2000]


@pytest.mark.parametrize("path", [p for p in PSETS if "ps2_math" in p], ids=lambda p: p.split("/")[1])
def test_a_rounded_down_blocks_needed_is_named_in_one_or_two_lines(lab, page, path):
    notebook = open_notebook(page, lab, path)
    run_cell(page, setup_cell(notebook))
    answer = only(notebook.locator(".jp-CodeCell:has-text('def blocks_needed(num_tokens, block_size)')"),
                  "the answer cell of blocks_needed")
    tests = only(notebook.locator(".jp-CodeCell:has-text('begin(\"q2_tests\")')"), "the test cell of q2")
    answer.scroll_into_view_if_needed()
    answer.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(WRONG_BLOCKS)   # as typed, without the editor's auto-indent
    before = prompt(answer)
    page.keyboard.press("Shift+Enter")        # run the answer, move to its visible test cell
    wait_ran(page, answer, before)
    before = prompt(tests)
    page.keyboard.press("Shift+Enter")        # run the test cell
    wait_ran(page, tests, before)
    error = tests.locator(".jp-OutputArea-output").last
    assert tests.locator(".jp-OutputArea-output").count(), "the test cell ran and showed nothing"
    tests.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "01-wrong-answer.png"))
    message = error.inner_text().strip()
    assert "Rounding down" in message, message
    assert len(message.splitlines()) <= 2, message
    assert "in check_value(" not in message, "the traceback walks through the course's checking code"


def test_learners_do_not_get_the_instructor_tools(lab, page):
    open_notebook(page, lab, PSETS[0])
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "Nbgrader" not in menus, menus
    page.goto(lab.url("formgrader"))
    assert "Manage Assignments" not in page.inner_text("body")
    page.screenshot(path=str(page.shots / "formgrader-refused.png"))


def test_the_instructor_formgrader_lists_the_assignments(instructor, page):
    page.goto(instructor.url("formgrader"))
    page.wait_for_selector("text=ps2_math", timeout=WAIT_MS)
    page.screenshot(path=str(page.shots / "formgrader.png"))
    for path in PSETS:
        assert path.split("/")[1] in page.inner_text("body")


@pytest.mark.parametrize("path", [p for p in PSETS if "ps2_math" in p], ids=lambda p: p.split("/")[1])
def test_the_set_up_cell_prints_practice_numbers_and_then_the_pasted_keys_own(lab, page, path):
    from pagedkv_lib.course.instructor.intake.variant_keys import learner_key
    from pagedkv_lib.course.learner.variants import for_set
    key = learner_key(b"a browser test's course secret", "ada")
    notebook = open_notebook(page, lab, path)
    setup = setup_cell(notebook)
    run_cell(page, setup)
    shown = setup.locator(".jp-OutputArea-output").last
    assert setup.locator(".jp-OutputArea-output").count(), "the set-up cell ran and showed nothing"
    assert shown.inner_text().startswith("PRACTICE numbers: no variant key was given"), shown.inner_text()
    cell = only(notebook.locator(".jp-CodeCell:has-text('VARIANT_KEY = \"\"')"), "the variant key's cell")
    before = prompt(cell)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(f'VARIANT_KEY = "{key}"')
    # a locator is found again on each use: the cell is now the one holding the pasted key
    cell = only(notebook.locator(f".jp-CodeCell:has-text('VARIANT_KEY = \"{key}\"')"), "the variant key's cell, pasted")
    page.keyboard.press("Shift+Enter")
    wait_ran(page, cell, before)
    run_cell(page, setup)
    expect(shown).to_contain_text("Your numbers for ps2_math")   # the new output replaces the old
    setup.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "01-your-numbers.png"))
    text = shown.inner_text()
    mine = for_set("ps2_math", key)
    assert text.startswith("Your numbers for ps2_math (variant key") and "V.q5_model" in text, text
    assert repr(mine.q5_model) in text and re.search(rf"V\.q6_requests += {mine.q6_requests}\n", text), text
