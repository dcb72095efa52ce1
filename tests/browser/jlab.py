"""What a learner does in JupyterLab 4, as Playwright steps, and what the tests read off the page."""
from __future__ import annotations

import re
import time
import uuid

from .browser_server import WAIT_MS, WAIT_S
from .pages import commit_first_choice, expect, gate_boxes, page_screenshots, wait_all_ran, wait_until_idle


OUTPUT = ".jp-OutputArea-output"
"""One output of a cell, or of an Output widget, in JupyterLab's page."""
REVEAL = ".widget-output .jp-OutputArea-output"
"""One output of an Output widget (a gate's reveal)."""

# Code cells whose longest line is wider than the editor shows (CodeMirror does not wrap by default).
CUT_LINES_JS = """(root) => [...root.querySelectorAll('.jp-CodeCell:not(.jp-mod-collapsed) .cm-scroller')]
  .filter((s) => s.offsetParent !== null && s.scrollWidth > s.clientWidth + 2)
  .map((s) => s.querySelector('.cm-content').innerText.split('\\n')[0].slice(0, 70))"""


def open_notebook(page, server, path: str):
    """Open ``path`` in JupyterLab and wait until its kernel is started, connected to the page, and idle."""
    server.close_sessions()  # a fresh kernel: nothing left from an earlier test
    # a workspace of its own: no tabs left open by an earlier test, no restored layout
    page.goto(server.url(f"lab/workspaces/t{uuid.uuid4().hex[:12]}/tree/{path}"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=WAIT_MS)
    wait_kernel_ready(page, server, path)
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook")


def wait_kernel_ready(page, server, path: str, timeout: float = WAIT_S) -> None:
    """Wait until the server holds a session for ``path`` whose kernel is idle with the page connected to it,
    and the page's indicator says idle.

    The page's indicator alone cannot tell: JupyterLab draws it "idle" as soon as the notebook opens, before
    any kernel exists (its initial state), and a Shift+Enter pressed then is dropped: JupyterLab finds no
    kernel, clears the cell and runs nothing (its prompt stays "[ ]:").
    """
    deadline, sessions = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        sessions = server.sessions()
        if any(s["path"] == path and (s.get("kernel") or {}).get("connections", 0) >= 1
               and s["kernel"].get("execution_state") == "idle" for s in sessions):
            wait_idle(page, max(1.0, deadline - time.monotonic()))
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"no idle kernel connected to {path} after {timeout:.0f} s; the server's sessions: "
                         f"{[(s['path'], s.get('kernel')) for s in sessions]}")


def prompt(cell) -> str:
    """The input prompt of one code cell: "[ ]:" never run, "[*]:" running, "[3]:" the third execution."""
    return cell.locator(".jp-InputPrompt").first.inner_text().strip()


def wait_ran(page, cell, before: str, timeout: float = WAIT_S) -> None:
    """Wait until ``cell`` has run since its prompt read ``before`` (a new execution count) and the kernel is idle."""
    deadline = time.monotonic() + timeout
    while True:
        now = prompt(cell)
        if re.fullmatch(r"\[\d+\]:", now) and now != before and kernel_status(page) == "idle":
            return
        if time.monotonic() > deadline:
            first = cell.locator(".cm-line").first.inner_text()
            raise AssertionError(f"the cell starting {first!r} did not run within {timeout:.0f} s: its prompt is "
                                 f"{now!r} (it was {before!r} before the run), the kernel is {kernel_status(page)!r}")
        page.wait_for_timeout(250)


def run_cell(page, cell, timeout: float = WAIT_S) -> None:
    """Select ``cell`` by its prompt (command mode) and run it with Shift+Enter, as a learner does; wait until
    it has run (a new execution count in its prompt) and the kernel is idle."""
    before = prompt(cell)
    cell.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Shift+Enter")
    wait_ran(page, cell, before, timeout)


def only(locator, what: str):
    """``locator``, asserting it matches exactly one element (``what`` names it in the failure)."""
    locator.first.wait_for(state="attached")   # the notebook may still be drawing its cells
    count = locator.count()
    assert count == 1, f"{count} elements match {what}, expected exactly one"
    return locator.first


def kernel_status(page) -> str:
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator").first.get_attribute(
        "data-status") or ""


def wait_idle(page, timeout: float = WAIT_S) -> None:
    wait_until_idle(page, kernel_status, timeout)


def accept_dialog(page) -> str:
    """Accept a dialog if one is open (JupyterLab sometimes asks which kernel); return its title."""
    dialog = page.locator(".jp-Dialog")
    if not dialog.count():
        return ""
    title = dialog.locator(".jp-Dialog-header").inner_text()
    dialog.locator(".jp-mod-accept").click()
    return title


def menu(page, top: str, item: str, tries: int = 20) -> None:
    """Click ``top`` > ``item`` in the menu bar, accepting a dialog that pops up in between."""
    for _ in range(tries):
        accept_dialog(page)
        try:
            page.locator(f".lm-MenuBar-itemLabel:text-is('{top}')").click(timeout=3000)
            page.locator(f".lm-Menu-itemLabel:text-is('{item}')").click(timeout=3000)
            return
        except Exception as err:  # playwright's TimeoutError: a dialog was in the way
            last = err
    raise AssertionError(f"could not reach {top} > {item}: {last}")


def prompts(notebook) -> list[str]:
    """Input prompts of the code cells ("[3]:", "[*]:", "[ ]:"); a cell whose source is hidden has none."""
    return [t.strip() for t in notebook.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents()]


def run_all(page, notebook, timeout: float = 2 * WAIT_S) -> None:
    """Run > Run All Cells, and wait until every code cell has run and the kernel is idle.

    Every output is cleared first: a notebook saved with its outputs (an earlier test's File > Save)
    shows numbered prompts, and a Run All that never started would look finished. Under load
    JupyterLab sometimes runs only part of the notebook (a click before the kernel is connected);
    when the kernel has been idle for 10 s with cells still unrun, Run All again (twice at most).
    """
    menu(page, "Edit", "Clear Outputs of All Cells")
    menu(page, "Run", "Run All Cells")
    wait_all_ran(page, notebook, prompts, kernel_status, "[ ]:", timeout,
                 rerun=lambda: menu(page, "Run", "Run All Cells"), retries=2)


def scroller(page):
    return page.locator(".jp-NotebookPanel:visible .jp-WindowedPanel-outer").first


def screenshots(page, name: str, step: int = 650) -> list:
    """Screenshots of the whole notebook, one window height at a time, from the top."""
    return page_screenshots(page, scroller(page), name, step)


def error_outputs(notebook) -> list[str]:
    """Text of every error output (a traceback) in the notebook."""
    return notebook.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error'],"
                            ".jp-OutputArea-output.jp-mod-error").all_inner_texts()


def commit_every_gate(page, notebook) -> int:
    """Commit the first choice (or 1) at every gate that is still open; return how many gates there are."""
    gates = gate_boxes(notebook)
    for k in range(gates.count()):
        box = gates.nth(k)
        button = box.locator("button:text-is('Commit')")
        if button.is_disabled():
            continue
        box.scroll_into_view_if_needed()
        commit_first_choice(box)
        expect(button).to_be_disabled()
        wait_idle(page)
    return gates.count()
