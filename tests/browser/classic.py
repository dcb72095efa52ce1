"""The classic notebook (6.5, ipywidgets 7 through widgetsnbextension 3.6): its server and a learner's steps.

It is the front end closest to Colab's that runs here (Colab ships notebook 6.5 and ipywidgets 7.7.1,
but draws widgets with its own front end). The server is the running interpreter's own
``python -m notebook``, so it is the environment ``make test-colab`` builds (``.venv-colab``); in an
environment without notebook 6 (``.venv`` has Notebook 7) the test skips and says where it runs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .browser_server import WAIT_MS, WAIT_S, Server, launch
from .pages import page_screenshots, wait_all_ran, wait_until_idle

OUTPUT = ".output_subarea"
"""One output of a cell, or of an Output widget, in the classic notebook's page."""
REVEAL = ".jupyter-widgets-output-area .output_subarea"
"""One output of an Output widget (a gate's reveal): ipywidgets 7 draws it in the notebook's own output area."""

WHERE = ("`make test-colab` runs it in .venv-colab (notebook 6.5.7, widgetsnbextension 3.6.6, "
         "ipywidgets 7.7.1), with PAGEDKV_CLASSIC=1 so that it cannot skip there")


def require_classic() -> None:
    """Skip without the classic notebook 6 here; fail instead when ``PAGEDKV_CLASSIC`` is set."""
    try:
        import notebook
        version = notebook.__version__
    except ImportError:
        version = None
    if version and version.startswith("6."):
        return
    why = f"the classic notebook 6 is not in this environment (notebook {version or 'not installed'})"
    if os.environ.get("PAGEDKV_CLASSIC"):
        pytest.fail(f"PAGEDKV_CLASSIC is set but {why}", pytrace=False)
    pytest.skip(f"{why}; {WHERE}")


def start(root: Path, log: Path) -> Server:
    """``jupyter notebook`` (classic) on a free loopback port with a fresh token, serving ``root``."""
    root_ok = ["--allow-root"] if os.getuid() == 0 else []
    return launch(lambda port: [sys.executable, "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
                                f"--port={port}", "--NotebookApp.port_retries=0",
                                "--NotebookApp.show_banner=False",   # no "migrate to Notebook 7" banner
                                f"--NotebookApp.notebook_dir={root}", *root_ok], root, log)


def kernel_status(page) -> str:
    """"idle", "busy", ... from the kernel indicator's class (``kernel_idle_icon``)."""
    name = page.locator("#kernel_indicator_icon").get_attribute("class") or ""
    return next((c[len("kernel_"):-len("_icon")] for c in name.split() if c.startswith("kernel_")), "")


def wait_idle(page, timeout: float = WAIT_S) -> None:
    wait_until_idle(page, kernel_status, timeout)


def open_notebook(page, server: Server, path: str):
    """Open ``path`` in a fresh kernel; wait until it is idle and the widget manager is loaded."""
    server.close_sessions()
    page.goto(server.url(f"notebooks/{path}"))
    page.wait_for_selector("#notebook .cell", timeout=WAIT_MS)
    wait_idle(page)
    page.wait_for_function("() => (Jupyter.WidgetManager?._managers || []).length > 0", timeout=WAIT_MS)
    return page.locator("#notebook-container")


def prompts(notebook) -> list[str]:
    """Input prompts of the code cells ("In [3]:", "In [*]:", "In [ ]:")."""
    return [" ".join(t.split()) for t in notebook.locator(".code_cell .input_prompt").all_inner_texts()]


def run_all(page, notebook, timeout: float = 2 * WAIT_S) -> None:
    """Cell > Run All from the menu bar; wait until every code cell has run and the kernel is idle."""
    page.locator("#menus a.dropdown-toggle:text-is('Cell')").click()
    page.locator("#run_all_cells > a").click()
    wait_all_ran(page, notebook, prompts, kernel_status, "In [ ]:", timeout)


def screenshots(page, name: str, step: int = 600) -> list:
    """Screenshots of the whole notebook, one window height at a time (the page scrolls in ``#site``)."""
    return page_screenshots(page, page.locator("#site"), name, step)


def error_outputs(notebook) -> list[str]:
    """Text of every error output (a traceback) and every stderr stream in the notebook."""
    return notebook.locator(".output_subarea.output_error, .output_subarea.output_stderr").all_inner_texts()
