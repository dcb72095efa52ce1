"""axe-core (Deque's accessibility engine, through axe-playwright-python) on a page, against WCAG 2.1 A and AA.

:func:`course_violations` runs axe with every rule of those levels on, leaving out only the parts
JupyterLab (or JupyterHub) draws that are listed in :data:`UPSTREAM`, each with the reason and its
upstream issue. :func:`upstream_violations` lists what the whole page has beyond the course's, for the report.
Results are written to ``artifacts/browser/axe/<name>.json`` for a human look.
"""
from __future__ import annotations

import json

from .browser_server import ARTIFACTS

WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
"""axe's tags for the success criteria of WCAG 2.0 and 2.1, levels A and AA."""

SERIOUS = ("serious", "critical")

UPSTREAM = {
    ".jp-InputArea-editor": "CodeMirror 6 as JupyterLab sets it up: the editor's role=textbox has no accessible "
                            "name (aria-input-field-name; jupyterlab/jupyterlab#16890, codemirror/dev#1127)",
    "jp-button.jp-ToolbarButtonComponent": "JupyterLab's toolbar buttons carry aria-pressed on a role that "
                                           "forbids it (aria-allowed-attr; jupyterlab/jupyterlab#16891)",
    ".jp-InputPrompt": "JupyterLab's light theme draws a cell's prompt (\"[ ]:\") in grey below 4.5:1 "
                       "(color-contrast; JupyterLab's theme, found once the rule ran on notebooks)",
}
"""Selector of a part JupyterLab draws inside the page -> why it is excluded, and its upstream issue.

One more, by scope rather than selector: JupyterLab's notebook viewport ``.jp-WindowedPanel-viewport``
has role=feed, whose children must be articles, and JupyterLab's cells are not (aria-required-children;
jupyterlab/jupyterlab#14765). The viewport element itself is left out; every cell in it is checked."""

VIEWPORT = ".jp-WindowedPanel-viewport"
SCROLLER = ".jp-WindowedPanel-outer"

CONTRAST = "color-contrast"

LAY_OUT_JS = """() => { if (document.body.getBoundingClientRect().height < 1) {
  document.body.style.height = window.innerHeight + 'px'; } }"""
"""JupyterLab's page body is 0 px tall (its panels are placed absolutely), and axe takes text outside the body
for off-screen and skips color-contrast on it without a word: give the body the window's height."""


def _contexts(page, upstream) -> list:
    """axe contexts that together cover the page but the upstream parts: on a notebook, its cells, then the rest."""
    exclude = [[s] for s in upstream]
    if page.locator(VIEWPORT).count():
        return [{"include": [[f"{VIEWPORT} > *"]], "exclude": exclude},
                {"exclude": [[VIEWPORT]] + exclude}]
    return [{"exclude": exclude}] if exclude else [None]


def run_axe(page, context=None, rules=None) -> dict:
    """axe's result for ``page`` (``context``: axe's include/exclude object, or None for the whole page;
    ``rules``: only these rule ids, else every WCAG 2.1 A and AA rule)."""
    from axe_playwright_python.sync_playwright import Axe
    page.evaluate(LAY_OUT_JS)
    only = {"type": "rule", "values": rules} if rules else {"type": "tag", "values": WCAG_21_AA}
    options = {"runOnly": only, "resultTypes": ["violations", "incomplete"]}
    return Axe().run(page, context=context, options=options).response


def ran(result: dict, rule: str) -> bool:
    """Whether axe checked ``rule`` on at least one element (it is in passes or violations, not inapplicable)."""
    return any(r["id"] == rule for r in result["passes"] + result["violations"])


def contrast_windows(page, context) -> list[dict]:
    """color-contrast on a notebook one window at a time: axe judges only the text in view, and the notebook
    scrolls inside its panel. Returns each window's result (the first is the top)."""
    scroller = page.locator(SCROLLER).first
    results, top = [], 0
    height = scroller.evaluate("(s) => s.clientHeight")
    while True:
        scroller.evaluate(f"(s) => s.scrollTo(0, {top})")
        page.wait_for_timeout(100)
        results.append(run_axe(page, context, [CONTRAST]))
        top += height
        if top >= scroller.evaluate("(s) => s.scrollHeight"):
            return results


def _nodes(result: dict, impacts=SERIOUS) -> list[dict]:
    """One entry per violating node: rule, impact, target, a snippet, and axe's message."""
    out = []
    for v in result["violations"]:
        for node in v["nodes"]:
            if (node.get("impact") or v["impact"]) in impacts:
                out.append({"rule": v["id"], "impact": node.get("impact") or v["impact"], "help": v["help"],
                            "target": node["target"], "html": node["html"][:300],
                            "why": node.get("failureSummary", "")[:400]})
    return out


def _save(name: str, payload) -> None:
    folder = ARTIFACTS / "axe"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")


def course_violations(page, name: str, upstream=UPSTREAM) -> list[dict]:
    """Serious and critical violations on ``page`` outside the documented upstream parts."""
    found, minor, incomplete = [], [], []
    contexts = _contexts(page, upstream)
    results = [run_axe(page, context) for context in contexts]
    if page.locator(SCROLLER).count():   # the rest of the notebook, window by window, for contrast
        results += contrast_windows(page, contexts[0])
    for result in results:
        found += _nodes(result)
        minor += _nodes(result, ("minor", "moderate"))
        incomplete += [{"rule": v["id"], "nodes": len(v["nodes"])} for v in result["incomplete"]]
    # on a notebook, the rule must have run on its cells (JupyterLab's own bars are always in view)
    contrast = any(ran(r, CONTRAST) for r in (results[len(contexts):] or results))
    _save(name, {"violations": found, "minor_or_moderate": minor, "incomplete": incomplete,
                 "color_contrast_ran": contrast})
    assert contrast, f"axe's {CONTRAST} rule checked no element of {name}: the page is laid out so that it skips"
    return found


def upstream_violations(page, name: str, course: list[dict]) -> list[dict]:
    """Serious and critical violations of the whole page that are not the course's (``course``): JupyterLab's
    or JupyterHub's own. Written to ``artifacts/browser/axe/<name>-upstream.json``; not failed on."""
    ours = {(v["rule"], tuple(v["target"])) for v in course}
    found = [v for v in _nodes(run_axe(page)) if (v["rule"], tuple(v["target"])) not in ours]
    _save(f"{name}-upstream", found)
    return found


def summary(found: list[dict]) -> str:
    """One line per violation, for an assertion message."""
    return "\n".join(f"{v['impact']} {v['rule']} at {v['target']}: {v['html'][:160]} ({v['why'][:200]})"
                     for v in found)


def assert_no_violations(page, name: str) -> None:
    """Fail on any serious or critical violation in what the course draws; write JupyterLab's own beside it."""
    found = course_violations(page, name)
    upstream_violations(page, name, found)
    assert not found, f"{len(found)} serious or critical WCAG 2.1 AA violations in {name}:\n" + summary(found)
