"""What a learner does in JupyterLab 4, as Playwright steps, and what the tests read off the page."""
from __future__ import annotations

import uuid
from .browser_server import WAIT_MS, WAIT_S
from .pages import page_screenshots, wait_all_ran, wait_until_idle


OUTPUT = ".jp-OutputArea-output"
"""One output of a cell, or of an Output widget, in JupyterLab's page."""
REVEAL = ".widget-output .jp-OutputArea-output"
"""One output of an Output widget (a gate's reveal)."""

# Code cells whose longest line is wider than the editor shows (CodeMirror does not wrap by default).
CUT_LINES_JS = """(root) => [...root.querySelectorAll('.jp-CodeCell:not(.jp-mod-collapsed) .cm-scroller')]
  .filter((s) => s.offsetParent !== null && s.scrollWidth > s.clientWidth + 2)
  .map((s) => s.querySelector('.cm-content').innerText.split('\\n')[0].slice(0, 70))"""


def open_notebook(page, server, path: str):
    """Open ``path`` in JupyterLab and wait for its kernel to be idle."""
    server.close_sessions()  # a fresh kernel: nothing left from an earlier test
    # a workspace of its own: no tabs left open by an earlier test, no restored layout
    page.goto(server.url(f"lab/workspaces/t{uuid.uuid4().hex[:12]}/tree/{path}"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=WAIT_MS)
    wait_idle(page)
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook")


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
