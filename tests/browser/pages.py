"""Checks that read a rendered notebook the same way in every front end (JupyterLab 4, classic 6.5).

Only the selector of one output differs: ``.jp-OutputArea-output`` in JupyterLab, ``.output_subarea``
in the classic notebook, and so does an Output widget's (``.widget-output`` in ipywidgets 8,
``.jupyter-widgets-output-area`` in the classic notebook's ipywidgets 7). Boxes and buttons carry the
same classes in both (``.widget-vbox``, ``.widget-hbox``, ``button``).
"""
from __future__ import annotations

import json
import time


def images_js(output: str) -> str:
    """JS for ``root.evaluate``: is every <img> of an output decoded, not blank (pixels vary), not clipped?
    (The course controls' script carrier, ``img.pagedkv-hook``, is no figure.)"""
    return """(root) => [...root.querySelectorAll('OUT img:not(.pagedkv-hook)')].map((img) => {
  const c = document.createElement('canvas');
  const w = Math.min(img.naturalWidth, 400), h = Math.min(img.naturalHeight, 400);
  c.width = w; c.height = h;
  let distinct = 0;
  if (w && h) {
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0, w, h);
    const d = g.getImageData(0, 0, w, h).data, seen = new Set();
    for (let i = 0; i < d.length && seen.size < 20; i += 4 * 7) seen.add(d[i] << 16 | d[i+1] << 8 | d[i+2]);
    distinct = seen.size;
  }
  const box = img.getBoundingClientRect(), area = img.closest('OUT').getBoundingClientRect();
  return {width: img.naturalWidth, height: img.naturalHeight, distinct,
          shown: box.width, clipped: box.right > area.right + 1 || box.width < 0.5 * Math.min(img.naturalWidth, area.width)};
})""".replace("OUT", output)


def check_images(root, output: str) -> int:
    """Assert every figure under ``root`` rendered, is not blank and is not clipped; return how many."""
    images = root.evaluate(images_js(output))
    for img in images:
        assert img["width"] > 50 and img["height"] > 50, f"a figure did not render: {img}"
        assert img["distinct"] > 2, f"a figure is blank: {img}"
        assert not img["clipped"], f"a figure is clipped at a 1280 x 800 window: {img}"
    return len(images)


def gate_boxes(notebook):
    """Each gate's widget box: the one holding a Commit button."""
    return notebook.locator(".widget-vbox:has(> .widget-hbox > button:text-is('Commit'))")


def commit_first_choice(box) -> None:
    """Pick the first choice (or type 1) and press Commit."""
    radios = box.locator("input[type='radio']")
    if radios.count():
        radios.first.check()
    else:
        box.locator("input[type='text']").fill("1")
        box.locator("input[type='text']").press("Enter")
    box.locator("button:text-is('Commit')").click()


def expect(locator):
    """Playwright's ``expect``, imported on first use: collecting the tests must not need Playwright."""
    from playwright.sync_api import expect as _expect
    return _expect(locator)


def check_gate(page, notebook, box, name: str, reveal: str, wait_idle) -> list[str]:
    """The gate journey on ``box``: no reveal before the commit; commit; the reveal; a second commit refused.

    ``reveal`` selects one output of the gate's Output widget (each front end draws it its own way).
    Screenshots ``<name>-before.png`` and ``<name>-after.png``; ``wait_idle(page)`` waits for the
    kernel. Returns the revealed texts (the verdict first).
    """
    box.scroll_into_view_if_needed()
    before = notebook.inner_text()
    out = box.locator(reveal)
    assert out.count() == 0, "a reveal shows before the commit"
    page.screenshot(path=str(page.shots / f"{name}-before.png"))
    commit_first_choice(box)
    expect(box.locator("button:text-is('Commit')")).to_be_disabled()   # the whole reveal is drawn
    wait_idle(page)
    expect(out.first).to_contain_text("You predicted")
    box.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / f"{name}-after.png"))
    revealed = out.all_inner_texts()
    assert revealed[0].startswith("You predicted"), revealed[0]
    answer = revealed[0].split("; it is ", 1)[1].rsplit(" (", 1)[0]
    if box.locator("input[type='text']").count():   # a number: the answer itself is the secret
        assert answer not in before, f"the answer {answer!r} was on the page before the commit"
    chrome = {t.strip() for t in box.locator(f"{reveal} summary").all_inner_texts()}   # "Data of this figure..."
    for line in "\n".join(revealed[1:]).splitlines():
        if len(line.strip()) >= 30 and line.strip() not in chrome:
            assert line.strip() not in before, f"reveal text on the page before the commit: {line!r}"
    for img in box.evaluate(images_js(reveal)):
        assert img["distinct"] > 2 and not img["clipped"], img
    # a second commit is refused: controls disabled, and forcing a click changes nothing
    shown = out.count()
    box.locator("button:text-is('Commit')").click(force=True)
    wait_idle(page)   # whatever the click asked of the kernel is done
    assert out.count() == shown, "a second commit changed the reveal"
    return revealed


def page_screenshots(page, outer, name: str, step: int) -> list:
    """Screenshots of a notebook that scrolls inside the element ``outer``, ``step`` pixels at a time, from the top."""
    outer.evaluate("(e) => e.scrollTo(0, 0)")
    paths, top = [], 0
    while True:
        page.wait_for_timeout(150)
        path = page.shots / f"{name}-{len(paths):02d}.png"
        page.screenshot(path=str(path))
        paths.append(path)
        top += step
        if top >= outer.evaluate("(e) => e.scrollHeight - e.clientHeight") + step:
            break
        outer.evaluate(f"(e) => e.scrollTo(0, {top})")
    return paths


def wait_until_idle(page, kernel_status, timeout: float) -> None:
    """Poll ``kernel_status(page)`` (the front end's reading of the kernel indicator) until it says idle."""
    deadline = time.monotonic() + timeout
    while kernel_status(page) != "idle":
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel is still {kernel_status(page)!r} after {timeout:.0f} s")
        page.wait_for_timeout(250)


def wait_all_ran(page, notebook, prompts, kernel_status, blank: str, timeout: float, rerun=None,
                 retries: int = 0) -> None:
    """Wait until no code cell's prompt (``prompts(notebook)``) is running (``*``) or ``blank``, and the kernel is idle.

    ``rerun()``, at most ``retries`` times: what to do when the kernel has been idle for 10 s with
    cells still unrun (JupyterLab under load sometimes runs only part of a notebook).
    """
    deadline, idle_since = time.monotonic() + timeout, None
    while True:
        left = [p for p in prompts(notebook) if "*" in p or p == blank]
        idle = kernel_status(page) == "idle"
        if not left and idle:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"Run All did not finish in {timeout:.0f} s: prompts {prompts(notebook)}")
        idle_since = (idle_since or time.monotonic()) if idle and not any("*" in p for p in left) else None
        if rerun and retries and idle_since and time.monotonic() - idle_since > 10:
            retries, idle_since = retries - 1, None
            rerun()
        page.wait_for_timeout(500)


PREDICTION_MIME = "application/vnd.pagedkv.prediction+json"  # the saved commit's wire format, as a test states it


def saved_records(path, timeout: float = 300, min_count: int = 1) -> list[dict]:
    """The prediction records in the notebook file at ``path``, once the save has written ``min_count``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            nb = json.loads(path.read_text())
        except json.JSONDecodeError:  # read while the server was writing it: read again
            nb = {"cells": []}
        found = [o["data"][PREDICTION_MIME] for c in nb["cells"] for o in c.get("outputs", [])
                 if PREDICTION_MIME in o.get("data", {})]
        if len(found) >= min_count or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
