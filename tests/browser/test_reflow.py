"""Reflow (WCAG 1.4.10): nothing the course draws in lessons 01-04 scrolls sideways or sticks out at 320 CSS px.

JupyterLab itself has no room for a notebook in a 320 px window (its side bar and prompts take it), so each
output of the lesson is narrowed to 320 CSS px, the width of a 1280 px window at 400% zoom, and read: an
element that scrolls sideways (content wider than its box, ``overflow-x`` auto or scroll) or sticks out
past the output's right edge fails, and so does a course control's label or button whose wrapped text
spills below its box (over the option under it). The one exception is the one WCAG makes, content that needs two
dimensions: a data table (or a preformatted table) scrolls in a region of its own (``access.SCROLL``),
which must be named and a Tab stop so the keyboard can scroll it; the text around it wraps. Every
"Data of this figure" is opened first. Each lesson is read before its gates are committed and after (the
reveals); in 04 the research room and the answer canvas with it, then the whole tab at 640 CSS px, unnarrowed.
"""
from __future__ import annotations

import pytest

from .jlab import commit_every_gate, open_notebook, run_all
from .pages import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

OVERFLOW_JS = """([nb, width]) => {
  const tops = [...nb.querySelectorAll('.jp-OutputArea-output')]
    .filter((o) => o.offsetParent !== null && !o.parentElement.closest('.jp-OutputArea-output'));
  for (const o of tops) {
    o.style.width = o.style.maxWidth = width ? width + 'px' : '';
    o.querySelectorAll('details').forEach((d) => { d.open = true; });
  }
  const unseen = (el, out) => {   // inside a visually hidden box (read by a screen reader, not drawn)
    for (let a = el; a && a !== out; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.position === 'absolute' && s.clip !== 'auto') { return true; }
    }
    return false;
  };
  const found = [];
  let regions = 0;
  tops.forEach((out, k) => {
    const edge = out.getBoundingClientRect().right;
    for (const el of [out, ...out.querySelectorAll('*')]) {
      if (el !== out && (el.offsetParent === null || unseen(el, out))) { continue; }
      const style = getComputedStyle(el), box = el.getBoundingClientRect();
      if (box.width <= 1) { continue; }
      const what = `output ${k} ${el.tagName.toLowerCase()}.${[...el.classList].join('.')}`
        + ` "${(el.innerText || '').trim().slice(0, 40)}"`;
      const region = el.closest('.pagedkv-scroll');
      if (region && region !== el && out.contains(region)) { continue; }  // clipped by its own region
      if (['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
        if (el.classList.contains('pagedkv-scroll')) {
          regions += 1;
          if (el.getAttribute('role') !== 'region' || el.tabIndex !== 0 || !el.getAttribute('aria-label')) {
            found.push(`${what}: scrolls sideways but is not a named region with tabindex 0`);
          }
        } else {
          found.push(`${what}: scrolls sideways by ${el.scrollWidth - el.clientWidth} px`);
        }
      } else if (box.right > edge + 3) {                                     // ipywidgets' 2 px margins
        found.push(`${what}: sticks out ${Math.round(box.right - edge)} px past the output`);
      } else if (el.matches('.pagedkv-control :is(label, .widget-label, button)') && style.overflowY === 'visible'
                 && el.scrollHeight > el.clientHeight + 2) {          // wrapped text in a box of one line's height
        found.push(`${what}: its text spills ${el.scrollHeight - el.clientHeight} px below its box, over what follows`);
      }
    }
  });
  return {outputs: tops.length, regions, found};
}"""
"""Narrow every top-level output of the notebook to ``width`` px (none: as laid out); return how many outputs
were read, how many table regions scroll on their own, and what scrolls sideways or sticks out."""


def read(page, notebook, width: int | None) -> dict:
    return page.evaluate(OVERFLOW_JS, [notebook.element_handle(), width])


def shoot(page, notebook, name: str) -> None:
    """Screenshots of the room, the canvas's practice and the labs as they are laid out now."""
    for k, box in enumerate(notebook.locator(".pagedkv-control, .pagedkv-scroll").all()):
        box.scroll_into_view_if_needed()
        box.screenshot(path=str(page.shots / f"{name}-{k:02d}.png"))


LESSONS = ["01_intuition", "02_math", "03_code"]
"""Lessons read at 320 px only (04 has its own test, with the 640 px window and the room)."""


def read_at_320(page, lab, name: str):
    """Open and run lesson ``name``; read it at 320 px before its commits and after; return the notebook
    and both readings."""
    notebook = open_notebook(page, lab, f"notebooks/{name}.ipynb")
    run_all(page, notebook)
    before = read(page, notebook, 320)
    shoot(page, notebook, "320-before")
    # first: an option whose text covers the radio beside it cannot be clicked, and the commits would wait
    assert before["found"] == [], f"{name} does not reflow at 320 px before the commits:\n" + "\n".join(before["found"])
    commit_every_gate(page, notebook)
    after = read(page, notebook, 320)
    shoot(page, notebook, "320-after")
    assert after["found"] == [], f"{name} does not reflow at 320 px after the commits:\n" + "\n".join(after["found"])
    return notebook, before, after


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_reflows_at_320_css_px_before_and_after_its_commits(lab, every_cell_drawn, page, name):
    notebook, before, after = read_at_320(page, lab, name)
    assert before["outputs"] >= 5 and after["outputs"] > before["outputs"], (before, after)


def test_lesson_04_reflows_at_320_css_px_before_and_after_its_commits_and_at_a_640_px_window(
        lab, every_cell_drawn, page):
    notebook, before, after = read_at_320(page, lab, "04_demo")
    expect(notebook.locator(".pagedkv-room")).to_have_count(1)
    read(page, notebook, None)
    page.set_viewport_size({"width": 640, "height": 800})
    window = read(page, notebook, None)
    page.screenshot(path=str(page.shots / "640-window.png"))
    assert before["outputs"] >= 15 and after["outputs"] > before["outputs"], (before, after)
    assert window["found"] == [], "lesson 04 does not reflow at 640 px:\n" + "\n".join(window["found"])
    assert after["regions"] >= 3, f"the reveals' tables no longer scroll in their own regions: {after}"
