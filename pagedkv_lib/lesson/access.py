"""What a keyboard or a screen reader needs from the course's controls, which ipywidgets cannot say.

ipywidgets (7.7 and 8) has no way to set ARIA attributes, so the views mark their widgets with CSS
classes here (``add_class`` works in both), and a small browser script turns the classes into
attributes and behaviour:

* :func:`control`: the outer box of one course control (a gate, a practice, a lab, the research room).
  Keys typed inside it never reach the notebook's command mode: JupyterLab's Lumino skips an element
  with ``data-lm-suppress-shortcuts`` (lumino#15, jupyterlab#16066), and the classic notebook's
  keyboard manager is disabled while focus is inside. Its controls get a focus ring of 3 px in
  :data:`FOCUS_RING` (6.4:1 on white), and it reflows at 320 CSS px (long lines wrap, boxes shrink).
* :func:`name_by`: a radio group becomes ``role="radiogroup"`` named by its question; radios share a
  ``name``, so the group is one Tab stop and the arrow keys move within it (the browser's own radio
  group), and each says its place ("2 of 4"); where ipywidgets 7 redraws the radios on a choice, focus
  goes back to the chosen one. A text box, text area or list is named by the widgets given (``aria-labelledby``).
* :func:`announcer` and :func:`verdict`: polite live regions (``role="status"``); a verdict also
  takes the focus once, when its gate's commit is made from its own controls, and draws its ring inside
  itself (the row around it clips what lies outside).
* :func:`markdown` (and :func:`scroll_region` for HTML, :func:`code` for source): a table, fenced block or
  listing too wide for a narrow window scrolls sideways in a named region of its own, a Tab stop, while the
  text around it wraps (1.4.10, 2.1.1). A gate's option that wraps grows to hold its lines.

The script is carried by :func:`hook`, an HTML widget in each control: an image that fails to load
runs it (an HTML widget's ``<script>`` does not run). It decides nothing: the gates' rules stay in
Python (:mod:`.gates`); without it the controls work as before, only less accessibly.
"""
from __future__ import annotations

import html
import itertools

from ..figure_text import SCROLL, scroll_region   # figures' data tables scroll the same way

CONTROL = "pagedkv-control"
HOOK = "pagedkv-hook"
"""Class of the hook's image (a carrier of the script, not a figure)."""
LIVE = "pagedkv-live"
VERDICT = "pagedkv-verdict"
COMMITTED = "pagedkv-committed"
"""Class of a verdict whose gate is committed: the script moves focus to it when the class appears."""

FOCUS_RING = "#0b57d0"
"""Colour of the focus ring: 6.4:1 on white, so at least 3:1 against what a control sits on (WCAG 2.4.7, 2.4.13)."""

HIDDEN_TEXT = ("position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;"
               "clip:rect(0 0 0 0);white-space:nowrap;border:0")
"""Inline style of text read by a screen reader but not drawn (the usual "visually hidden" pattern)."""

_NAMES = itertools.count(1)

STYLE = f"""
.{CONTROL} button:focus-visible, .{CONTROL} input:focus-visible, .{CONTROL} select:focus-visible,
.{CONTROL} textarea:focus-visible, .{CONTROL} .{VERDICT}:focus {{
  outline: 3px solid {FOCUS_RING} !important; outline-offset: 2px !important; }}
.{CONTROL} .{VERDICT}:focus {{ outline-offset: -3px !important; }}
.{CONTROL} .{VERDICT} .widget-html-content {{ padding: 0 6px; }}
.{CONTROL} {{ max-width: 100%; }}
.{CONTROL} .widget-hbox, .{CONTROL} .widget-inline-hbox {{ flex-wrap: wrap; max-width: 100%; height: auto; }}
.{CONTROL} .widget-inline-hbox {{ max-width: calc(100% - 4px) !important; }}
:is(.jp-Notebook, #notebook):has(.{CONTROL}) :is(.jp-OutputArea-output, .output_subarea) code {{
  overflow-wrap: anywhere; }}
.{SCROLL}:focus-visible {{ outline: 3px solid {FOCUS_RING} !important; outline-offset: -3px !important; }}
.{CONTROL} .widget-inline-hbox > input, .{CONTROL} .widget-inline-hbox > textarea,
.{CONTROL} .widget-inline-hbox > select {{ min-width: 8em; max-width: 100%; }}
.{CONTROL} .widget-html, .{CONTROL} .widget-html-content {{ max-width: 100%; white-space: normal; }}
.{CONTROL} .widget-radio-box label {{ white-space: normal; height: auto; display: flex; align-items: flex-start; }}
.{CONTROL} .widget-radio-box label > input {{ order: -1; flex: none; }}
"""

SCRIPT = """(function () {
if (window.pagedkvAccess) { window.pagedkvAccess.pass(); return; }
var uid = 0, pending = false;
function idOf(el) { if (!el.id) { el.id = 'pagedkv-a11y-' + (++uid); } return el.id; }
function keyboardManager() { return window.Jupyter && window.Jupyter.keyboard_manager; }
var lastGroup = null;   // the radio group focus was in: ipywidgets 7 redraws its radios on a choice
function focusIn(e) {
  var km = keyboardManager();
  if (km) { km.disable(); }
  if (e.target.type === 'radio') { lastGroup = e.target.closest('.widget-radio-box'); }
}
function focusOut(e) {
  var km = keyboardManager();
  if (km && !(e.relatedTarget && this.contains(e.relatedTarget))) { km.enable(); }
  if (e.relatedTarget && lastGroup && !lastGroup.contains(e.relatedTarget)) { lastGroup = null; }
}
function keepFocus() {
  var now = document.activeElement;
  if (lastGroup && lastGroup.isConnected && (!now || now === document.body)) {
    var chosen = lastGroup.querySelector('input[type=radio]:checked');
    if (chosen) { chosen.focus(); }
  }
}
function byNumber(el) {
  for (var i = 0; i < el.classList.length; i++) {
    var m = /^pagedkv-by-([0-9]+)$/.exec(el.classList[i]);
    if (m) { return m[1]; }
  }
  return null;
}
function name(el) {
  var k = byNumber(el), box = el.closest('.CONTROL') || document;
  var ids = Array.prototype.map.call(box.querySelectorAll('.pagedkv-name-' + k), idOf);
  var own = el.querySelector(':scope > .widget-label');
  if (own && own.textContent.trim()) { ids.push(idOf(own)); }
  var group = el.querySelector('.widget-radio-box');
  if (group) {
    group.setAttribute('role', 'radiogroup');
    group.setAttribute('aria-labelledby', ids.join(' '));
    var radios = group.querySelectorAll('input[type=radio]');
    radios.forEach(function (r, i) {
      r.name = 'pagedkv-group-' + k + '-' + idOf(group);
      r.setAttribute('aria-posinset', i + 1);
      r.setAttribute('aria-setsize', radios.length);
    });
    return;
  }
  var field = el.querySelector(':scope > input, :scope > textarea, :scope > select');
  if (field) { field.setAttribute('aria-labelledby', ids.join(' ')); }
}
function verdict(el) {
  el.setAttribute('tabindex', '-1');
  var done = el.classList.contains('COMMITTED');
  if (el.pagedkvWasDone === undefined || !done) { el.pagedkvWasDone = done; return; }
  if (el.pagedkvWasDone) { return; }
  el.pagedkvWasDone = true;
  var box = el.closest('.CONTROL'), now = document.activeElement;
  if (!now || now === document.body || (box && box.contains(now))) { el.focus(); }
}
function pass() {
  pending = false;
  if (!document.getElementById('pagedkv-access-style')) {
    var style = document.createElement('style');
    style.id = 'pagedkv-access-style';
    style.textContent = STYLE_TEXT;
    document.head.appendChild(style);
  }
  document.querySelectorAll('.CONTROL').forEach(function (box) {
    box.setAttribute('data-lm-suppress-shortcuts', 'true');
    box.querySelectorAll('input, select, textarea, button, .VERDICT').forEach(function (c) {
      c.setAttribute('data-lm-suppress-shortcuts', 'true');
    });
    if (!box.pagedkvListening) {
      box.pagedkvListening = true;
      box.addEventListener('focusin', focusIn);
      box.addEventListener('focusout', focusOut);
    }
  });
  document.querySelectorAll('[class*="pagedkv-by-"]').forEach(name);
  document.querySelectorAll('.LIVE').forEach(function (el) {
    el.setAttribute('role', 'status');
    el.setAttribute('aria-live', 'polite');
    el.setAttribute('aria-atomic', 'true');
  });
  document.querySelectorAll('.VERDICT').forEach(verdict);
  keepFocus();
}
function later() { if (!pending) { pending = true; setTimeout(pass, 0); } }
// a pointer press elsewhere means the learner left the group: never pull focus back to it after that
document.addEventListener('pointerdown', function (e) {
  if (lastGroup && !lastGroup.contains(e.target)) { lastGroup = null; }
}, true);
new MutationObserver(later).observe(document.body, {childList: true, subtree: true, attributes: true,
                                                    attributeFilter: ['class']});
window.pagedkvAccess = {pass: pass};
pass();
})();"""
"""The browser side; run once per page (or output frame), then again at every change of the page."""


def script() -> str:
    """The browser script with this module's class names and style filled in."""
    import json
    return (SCRIPT.replace("STYLE_TEXT", json.dumps(STYLE)).replace("CONTROL", CONTROL).replace("VERDICT", VERDICT)
            .replace("COMMITTED", COMMITTED).replace("LIVE", LIVE))


def hook():
    """An HTML widget that runs :func:`script` where it is drawn (it draws nothing itself)."""
    import ipywidgets as w
    source = html.escape(script(), quote=True)
    return w.HTML(f'<img class="{HOOK}" src="data:," alt="" onerror="{source}">', layout=w.Layout(display="none"))


def control(box):
    """Mark ``box`` (an ipywidgets box) as one course control, and put the hook into it; return ``box``."""
    box.add_class(CONTROL)
    box.children = (*box.children, hook())
    return box


def name_by(field, *labels) -> None:
    """Name ``field`` (radio buttons, a text box or area, a dropdown) by the text of the widgets ``labels``,
    in order (its own description, if any, comes last)."""
    k = next(_NAMES)
    field.add_class(f"pagedkv-by-{k}")
    for label in labels:
        label.add_class(f"pagedkv-name-{k}")


def announcer():
    """A polite live region drawn as nothing: what :func:`announce` puts there is read, not shown."""
    import ipywidgets as w
    region = w.HTML("", layout=w.Layout(height="0px", margin="0px", overflow="hidden"))
    region.add_class(LIVE)
    return region


def announce(region, text: str) -> None:
    """Have a screen reader read ``text`` from ``region`` (an :func:`announcer`), even if it was read last."""
    value = f"<span style='{HIDDEN_TEXT}'>{html.escape(text)}</span>"
    if value == region.value:   # the same words again: the region must change to be read again
        value = f"<span style='{HIDDEN_TEXT}'>{html.escape(text)} (again)</span>"
    region.value = value


def verdict(widget):
    """Make ``widget`` (an HTML widget) the verdict of a gate: a polite live region that takes the focus
    when :func:`committed` is called on it; return it."""
    widget.add_class(LIVE)
    widget.add_class(VERDICT)
    return widget


def committed(widget) -> None:
    """Mark a :func:`verdict` committed: the script then moves focus to it (once)."""
    widget.add_class(COMMITTED)


def hidden_text(text: str) -> str:
    """HTML of ``text`` read by a screen reader but not drawn."""
    return f"<span style='{HIDDEN_TEXT}'>{html.escape(text)}</span>"


def scrolling(markdown: str) -> str:
    """``markdown`` with each table and fenced block put in a region of its own that scrolls sideways when the
    window is too narrow for it (WCAG 1.4.10 lets a data table keep its two dimensions, not the text around
    it): named, and a Tab stop, so the keyboard can scroll it (2.1.1). The rest of the text wraps as before."""
    out, block, fenced = [], [], False

    def close() -> None:
        if block:
            first = block[0].strip()
            what = ("Table: " + ", ".join(c.strip() for c in first.strip("|").split("|"))
                    if first.startswith("|") else "Preformatted text")
            out.append(scroll_region("\n\n" + "\n".join(block) + "\n\n", what) + "\n")
            block.clear()

    for line in markdown.split("\n"):
        if fenced or line.lstrip().startswith("```"):
            if not fenced:
                close()
            block.append(line)
            fenced = fenced != line.lstrip().startswith("```")
            if not fenced and len(block) > 1:
                close()
        elif line.lstrip().startswith("|"):
            block.append(line)
        else:
            close()
            out.append(line)
    close()
    return "\n".join(out)


def code(text: str, name: str):
    """IPython's ``HTML`` of the Python source ``text``, highlighted as ``IPython.display.Code`` draws it, in a
    region named ``name`` (:func:`scroll_region`): its lines keep their indentation and a docstring's diagrams,
    and scroll sideways on their own when the window is too narrow, instead of wrapping into each other."""
    from IPython.display import HTML, Code
    # The region scrolls, not the pre inside it: axe asks that whatever scrolls be a Tab stop, and the region is.
    pre = '<pre style="white-space: pre; overflow: visible">'
    inner = Code(text, language="python")._repr_html_().replace("<pre>", pre, 1)
    return HTML(scroll_region(inner, name))


def markdown(text: str):
    """IPython's ``Markdown`` of ``text``, its tables and fenced blocks each in a sideways-scrolling region
    (:func:`scrolling`)."""
    from IPython.display import Markdown
    return Markdown(scrolling(text))
