"""Fixtures of the browser tests: ``make lab``, ``make instructor``, the classic notebook, chromium, and a 1280 x 800 tab.

Servers are started and stopped by :mod:`browser_server`; see it for how and why.
"""
from __future__ import annotations

import shutil

import pytest

from . import classic as _classic
from .browser_server import ARTIFACTS, CHROMIUM, WAIT_MS, WINDOW, clean_copy, require_browser, start, stop


def _serve(target, tmp_path_factory, begin=None):
    """Serve a clean copy with ``make <target>`` (or ``begin(root, log)``); stop it at the end."""
    require_browser()
    root = clean_copy(tmp_path_factory.mktemp(f"course-{target}"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if begin is None:
        server = start(target, root, ARTIFACTS / f"make-{target}.log")
    else:
        server = begin(root, ARTIFACTS / f"{target}.log")
    try:
        yield server
    finally:
        stop(server)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """``make lab`` (the learner's server) on a clean copy of the repository."""
    yield from _serve("lab", tmp_path_factory)


@pytest.fixture(scope="session")
def instructor(tmp_path_factory):
    """``make instructor`` (formgrader on) on its own clean copy."""
    yield from _serve("instructor", tmp_path_factory)


@pytest.fixture(scope="session")
def classic_server(tmp_path_factory):
    """The classic notebook 6.5 server of this environment on its own clean copy (see :mod:`classic`)."""
    _classic.require_classic()
    yield from _serve("classic", tmp_path_factory, _classic.start)


@pytest.fixture(scope="session")
def browser():
    require_browser()
    from playwright.sync_api import expect, sync_playwright
    # expect() has its own ceiling (5 s), apart from the tab's: a kernel's first import of the library
    # took longer than that on a loaded CI runner, so the assertions share the tab's ceiling.
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, request):
    """A fresh 1280 x 800 tab; its screenshots go to artifacts/browser/<test name>/."""
    context = browser.new_context(viewport=WINDOW)
    tab = context.new_page()
    # Every wait of the browser tests waits on a state (a selector, a text, the kernel's status); this is
    # only the ceiling of each, generous because a loaded machine (a CI runner, a laptop) is slow.
    tab.set_default_timeout(WAIT_MS)
    tab.shots = ARTIFACTS / request.node.name.replace("[", "-").replace("]", "")
    shutil.rmtree(tab.shots, ignore_errors=True)
    tab.shots.mkdir(parents=True)
    try:
        yield tab
    finally:
        tab.screenshot(path=str(tab.shots / "zz-last.png"))   # what the page showed at the end, pass or fail
        context.close()


NOTEBOOK_SETTINGS = "lab/api/settings/@jupyterlab/notebook-extension:tracker"


def _put_settings(server, raw: str) -> None:
    import json
    import urllib.request
    req = urllib.request.Request(server.url(NOTEBOOK_SETTINGS), method="PUT", data=json.dumps({"raw": raw}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).close()


@pytest.fixture
def every_cell_drawn(lab):
    """JupyterLab draws only the cells near the window (``windowingMode``); axe skips what is not drawn,
    and the render checks read only what is drawn, so for these tests every cell is drawn ("none"). The
    learner's setting is put back after."""
    before = lab.api(NOTEBOOK_SETTINGS).get("raw") or "{}"
    _put_settings(lab, '{"windowingMode": "none"}')
    try:
        yield
    finally:
        _put_settings(lab, before)
