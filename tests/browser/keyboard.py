"""The keyboard alone, and what a screen reader is told: steps and readings shared by the JupyterLab and the
classic notebook tests.

A learner works a course control with Tab, arrows, Space and Enter; after every key the notebook's cells
are read again (their number and kinds), so a key that reached the notebook's command mode ("a", "b"
insert a cell, "x" and "dd" delete one, "m" makes one Markdown, Enter edits one) is caught at once.
What a screen reader hears is read from chromium's accessibility tree (through the DevTools protocol)
and from axe-core's accessible-name computation.
"""
from __future__ import annotations

from .pages import expect

SHORTCUTS = ("ArrowDown", "ArrowUp", "a", "b", "x", "m", "d", "d", "Enter")
"""Keys that are command-mode shortcuts in JupyterLab and the classic notebook, pressed inside each control.
Arrows come first: on a radio they choose within the group, and they must not move to another cell."""

CELLS_JS = """(nb) => [...nb.querySelectorAll('.jp-Cell, .cell')].map((c) =>
  (c.classList.contains('jp-MarkdownCell') || c.classList.contains('text_cell')) ? 'markdown' : 'code')"""

FOCUSED_JS = """() => {
  const el = document.activeElement;
  axe.setup();
  const name = axe.commons.text.accessibleTextVirtual(axe.utils.getNodeFromTree(el));
  axe.teardown();
  return {tag: el.tagName.toLowerCase(), type: el.type || '', role: el.getAttribute('role') || '', name: name.trim(),
          widget: !!el.closest('.jupyter-widgets, .widget-output, .widget-area'),
          text: (el.value !== undefined ? String(el.value) : el.innerText || '').slice(0, 60)};
}"""


class Learner:
    """Keys pressed on one notebook page; after each, the notebook's cells must be as they were."""

    def __init__(self, page, notebook):
        from axe_playwright_python.base import AXE_SCRIPT
        self.page, self.notebook, self.seen = page, notebook, []
        page.evaluate(AXE_SCRIPT)
        self.cells = self.read_cells()
        assert self.cells, "no cells found on the page"

    def read_cells(self) -> list[str]:
        return self.notebook.evaluate(CELLS_JS)

    def focused(self) -> dict:
        return self.page.evaluate(FOCUSED_JS)

    def press(self, key: str, inside=None) -> dict:
        """Press ``key``; assert the notebook's cells are unchanged (and focus still in ``inside``, if given)."""
        self.page.keyboard.press(key)
        self.page.wait_for_timeout(100)   # a shortcut acts at once; give it the chance to
        now = self.focused()
        if now["widget"]:
            self.seen.append(now)
        cells = self.read_cells()
        assert cells == self.cells, (f"{key!r} at {now['tag']} {now['name'][:60]!r} changed the notebook: "
                                     f"{len(self.cells)} cells before, {len(cells)} after")
        if inside is not None:
            assert self.holds(inside), f"{key!r} moved focus out of the control, to {now}"
        return now

    def holds(self, box) -> bool:
        return box.evaluate("(b) => b.contains(document.activeElement)")

    def shortcuts(self, box, keys=SHORTCUTS) -> None:
        """Press every command-mode shortcut in ``keys`` with focus inside ``box``."""
        for key in keys:
            self.press(key, inside=box)

    def tab_to(self, box, want: str, limit: int = 80) -> dict:
        """Press Tab until focus is on a control inside ``box`` whose tag/type/role/name says ``want``."""
        for _ in range(limit):
            now = self.press("Tab")
            if self.holds(box) and want in " ".join((now["tag"], now["type"], now["role"], now["name"])):
                return now
        raise AssertionError(f"{limit} Tabs did not reach {want!r} in the box; focus went through "
                             f"{[(s['tag'], s['name']) for s in self.seen[-limit:]]}")


def start_at(box) -> None:
    """Focus the notebook cell that holds ``box`` (as JupyterLab's command mode does), or in the classic
    notebook its output area: a Tab from a classic cell lands in its code editor, where Tab completes code."""
    box.scroll_into_view_if_needed()
    box.evaluate("""(b) => { const c = b.closest('.jp-Cell') || b.closest('.output_wrapper');
                             c.setAttribute('tabindex', c.getAttribute('tabindex') || '-1'); c.focus(); }""")


def ax_node(page, element) -> dict:
    """The accessibility-tree node chromium builds for ``element`` (a Playwright locator): role, name,
    and properties such as ``posinset``, ``setsize``, ``checked``, ``live``."""
    element.evaluate("(e) => e.setAttribute('data-probe', '1')")
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "[data-probe='1']"})["nodeId"]
        ax = cdp.send("Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False})["nodes"][0]
    finally:
        element.evaluate("(e) => e.removeAttribute('data-probe')")
        cdp.detach()
    props = {p["name"]: p["value"].get("value") for p in ax.get("properties", [])}
    return {"role": ax["role"]["value"], "name": ax.get("name", {}).get("value", ""), **props}


def gate_by_keyboard(page, learner: Learner, gate) -> dict:
    """A choice gate, by keyboard alone: one Tab stop for its radio group (named by its question, each
    choice "k of n"), the arrows choose, no shortcut reaches the notebook, Commit by Enter; then focus is on
    the verdict, a polite live region reading the verdict and the reveal's first sentence.
    Returns the readings (before and after) for the caller's screenshots and messages."""
    question = gate.locator(".widget-html").first.inner_text().strip()
    group = gate.get_by_role("radiogroup")
    expect(group).to_have_count(1)
    group_ax = ax_node(page, group)
    assert group_ax["role"] == "radiogroup" and group_ax["name"].strip() == question, group_ax
    radios = gate.locator("input[type='radio']")
    n = radios.count()
    start_at(gate)
    first = learner.tab_to(gate, "radio")
    assert ax_node(page, radios.first)["role"] == "radio"
    # chromium's tree has no position properties to read through DevTools: the ARIA ones it is given
    sets = radios.evaluate_all("(rs) => rs.map((r) => [+r.getAttribute('aria-posinset'), +r.getAttribute('aria-setsize')])")
    sets = [tuple(s) for s in sets]
    assert sets == [(k + 1, n) for k in range(n)], f"the choices are not 1..{n} of {n}: {sets}"
    learner.shortcuts(gate)
    chosen = gate.locator("input[type='radio']:checked")
    expect(chosen).to_have_count(1)                       # the arrows chose one (Space was not needed)
    assert learner.holds(chosen), "focus is not on the chosen radio"
    after = learner.press("Tab", inside=gate)             # one Tab stop for the whole group: next is Commit
    assert after["tag"] == "button" and after["name"] == "Commit", after
    verdict = gate.locator(".pagedkv-verdict")
    expect(verdict).to_have_text("")
    learner.press("Enter")
    expect(verdict).to_contain_text("Committed. You predicted")
    expect(verdict).to_be_focused()
    live = ax_node(page, verdict)
    assert live["role"] == "status" and live.get("live") == "polite", live
    said = ax_node(page, verdict)["name"] or verdict.text_content()   # a status is named by its contents
    learner.shortcuts(verdict)                            # the focused verdict keeps keys from the notebook too
    return {"first": first, "said": said}


def practice_by_keyboard(page, learner: Learner, practice, value: str = "2") -> str:
    """A practice, by keyboard alone: its value box is named by its question; Check by Enter reads its
    verdict from a polite live region while focus stays on Check; Hint by Enter reads the hint. No
    shortcut pressed on the way reaches the notebook. Returns what the live region read last."""
    start_at(practice)
    field = learner.tab_to(practice, "input")
    assert field["name"].startswith("Practice."), field
    page.keyboard.type(value)
    learner.tab_to(practice, "Check")
    learner.shortcuts(practice, [k for k in SHORTCUTS if k != "Enter"])
    learner.press("Enter", inside=practice)
    status = practice.locator(":scope > .pagedkv-live")
    expect(status).not_to_have_text("")
    node = ax_node(page, status)
    assert node["role"] == "status" and node.get("live") == "polite", node
    assert learner.focused()["name"] == "Check", "focus left the Check button"
    learner.tab_to(practice, "Hint")
    learner.press("Enter", inside=practice)
    expect(status).to_contain_text("Hint 1/")
    return status.text_content()


def list_by_keyboard(page, learner: Learner, box) -> dict:
    """The first list (a dropdown) of a control, by keyboard alone: named, and every command-mode key pressed
    on it (letters and arrows pick items there) leaves the notebook's cells as they were."""
    start_at(box)
    chosen = learner.tab_to(box, "select")
    assert chosen["name"], chosen
    learner.shortcuts(box, [k for k in SHORTCUTS if k != "Enter"])
    return chosen
