"""Reflow (WCAG 1.4.10): what the course draws scrolls sideways or sticks out at 320 CSS px, as read in a page.

JupyterLab itself has no room for a notebook in a 320 px window (its side bar and prompts take it), so each
output of the lesson is narrowed to 320 CSS px, the width of a 1280 px window at 400% zoom, and read: an
element that scrolls sideways (content wider than its box, ``overflow-x`` auto or scroll) or sticks out
past the output's right edge fails, and so does a course control's label or button whose wrapped text
spills below its box (over the option under it). The one exception is the one WCAG makes, content that needs two
dimensions: a data table (or a preformatted table) scrolls in a region of its own (``access.SCROLL``),
which must be named and a Tab stop so the keyboard can scroll it; the text around it wraps. Every
"Data of this figure" is opened first. :mod:`test_lessons_in_lab` reads each lesson with it before its gates are
committed and after (the reveals), in the same Run All as its other checks; 04 also as a whole tab at 640 CSS px.
"""
from __future__ import annotations

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


def at_320(page, notebook, when: str) -> dict:
    """Read the notebook's outputs narrowed to 320 CSS px, with screenshots; fail on anything found; put the
    outputs back to their own width; return the reading."""
    reading = read(page, notebook, 320)
    shoot(page, notebook, f"320-{when}")
    read(page, notebook, None)
    assert reading["found"] == [], f"it does not reflow at 320 px {when}:\n" + "\n".join(reading["found"])
    return reading
