"""The accessibility script alone, on a plain page (no Jupyter): what it does with focus.

ipywidgets 7 redraws a gate's radios when an arrow key chooses, so the script puts focus back on the chosen
radio when it drops to the page. It must never do that once the learner has pointed somewhere else.
"""
from __future__ import annotations

import html

import pytest

from pagedkv_lib.lesson import access

pytestmark = [pytest.mark.browser]

PAGE = f"""<!doctype html><html lang="en"><body style="height: 600px">
<div class="{access.CONTROL}"><div class="widget-radio-box">
<label><input type="radio" value="a"> a</label><label><input type="radio" value="b" checked> b</label>
</div></div>
<p id="elsewhere">Some text of the notebook.</p>
<img src="data:," alt="" onerror="{html.escape(access.script(), quote=True)}">
</body></html>"""


def _focused(page) -> str:
    return page.evaluate("document.activeElement === document.body ? 'body' : document.activeElement.tagName")


def test_a_redrawn_radio_gets_focus_back_but_never_after_the_learner_pointed_elsewhere(page):
    page.set_content(PAGE)
    page.wait_for_function("window.pagedkvAccess !== undefined")
    page.focus("input[value=b]")
    # a redraw: the focused radio leaves the page, focus drops to the body, the script puts it back
    page.evaluate("""() => { const box = document.querySelector('.widget-radio-box');
                             box.innerHTML = box.innerHTML; }""")
    page.wait_for_function("document.activeElement && document.activeElement.type === 'radio'")
    # the learner clicks the notebook's text: focus goes to the body, and a later change must not steal it
    page.mouse.click(5, 580)
    assert _focused(page) == "body"
    page.evaluate("document.getElementById('elsewhere').className = 'changed'")
    page.evaluate("window.pagedkvAccess.pass()")   # what the script runs at every change of the page
    assert _focused(page) == "body"
