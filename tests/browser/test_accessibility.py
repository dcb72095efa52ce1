"""WCAG 2.1 AA for what the course draws, checked by axe-core in chromium, and by the keyboard alone.

* Each lesson after Run All with every gate committed (in test_lessons_in_lab.py, on the page its render and
  gate checks share), each released problem set as opened, a learner's
  feedback page and the class report from a real (small) grading run, and the hub's sign-up page: no
  serious or critical axe violation outside :data:`axe_check.UPSTREAM` (JupyterLab's and JupyterHub's
  own parts, each listed with its upstream issue); those are written to ``artifacts/browser/axe/``.
* One gate, one practice and the allocation lab, done with Tab, Shift+Tab, arrows, Space and Enter
  only; every control on the way has an accessible name.

Screenshots land in ``artifacts/browser/<test>/``.
"""
from __future__ import annotations

import pytest

from .browser_server import REPO
from . import axe_check
from .jlab import open_notebook, run_all, wait_idle
from .pages import expect, gate_boxes

pytestmark = [pytest.mark.long, pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

PSETS = sorted(str(p.relative_to(REPO)) for p in (REPO / "exercises").glob("*/*.ipynb"))


@pytest.mark.parametrize("path", PSETS, ids=lambda p: p.split("/")[1])
def test_each_problem_set_as_opened(lab, every_cell_drawn, page, path):
    open_notebook(page, lab, path)
    page.screenshot(path=str(page.shots / "opened.png"))
    axe_check.assert_no_violations(page, path.split("/")[1])


# ---------------------------------------------------------------------- pages outside JupyterLab

@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """A real grading run of ps2_math for two learners (one right, one with known mistakes): its
    feedback pages and class report, as ``make autograde feedback report`` writes them."""
    import json
    import shutil
    import sys
    sys.path.insert(0, str(REPO / "tests"))
    from classroom import WRONG, answered, solutions_by_cell
    from pagedkv_lib import course
    from pagedkv_lib.course.instructor.intake.collect_notebooks import release_notebooks

    root = tmp_path_factory.mktemp("a11y-class") / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for folder in (course.SOURCE, course.RELEASE):
        shutil.copytree(REPO / folder / "ps2_math", root / folder / "ps2_math")
    release = json.loads((REPO / course.RELEASE / "ps2_math" / "ps2_math.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / course.SOURCE / "ps2_math" / "ps2_math.ipynb").read_text(encoding="utf-8"))
    downloads = root.parent / "downloads"
    for student, nb in (("ada", answered(release, solutions_by_cell(solution))), ("bo", answered(release, WRONG))):
        (downloads / student).mkdir(parents=True)
        (downloads / student / "ps2_math.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    releases = release_notebooks(root / course.RELEASE)
    course.collect_notebooks(downloads, root, releases)
    course.autograde(root, timeout_s=30, workers=1, progress=False)
    course.feedback(root)
    report = course.report(root, releases=releases)
    return root, report.with_suffix(".html")


def test_a_feedback_page_with_failures(graded_class, page):
    root, _ = graded_class
    feedback = root / "feedback" / "bo" / "ps2_math" / "ps2_math.html"
    page.goto(feedback.as_uri())
    expect(page.locator("body")).to_contain_text("Rounding down")
    page.screenshot(path=str(page.shots / "feedback.png"), full_page=True)
    axe_check.assert_no_violations(page, "feedback-page")


def test_the_class_report(graded_class, page):
    _, report = graded_class
    page.goto(report.as_uri())
    expect(page.locator("h1")).to_contain_text("Class report")
    page.screenshot(path=str(page.shots / "report.png"), full_page=True)
    axe_check.assert_no_violations(page, "class-report")
    for img in page.locator("img").all():
        assert (img.get_attribute("alt") or "").strip(), "a figure of the report has no text alternative"


def signup_page(tmp_path, alert: str, message: str):
    """NativeAuthenticator's sign-up template as the hub renders it (JupyterHub's page.html and static
    files, the course's roster message in the alert), written to a file: starting the whole hub for one
    page needs root, system users and the proxy (tests/browser/test_hub_journey.py does that)."""
    from pathlib import Path
    import jinja2
    import nativeauthenticator
    from jupyterhub._data import DATA_FILES_PATH
    share = Path(DATA_FILES_PATH)
    env = jinja2.Environment(autoescape=True, loader=jinja2.FileSystemLoader(
        [str(Path(nativeauthenticator.__file__).parent / "templates"), str(share / "templates"), str(share)]))
    html = env.get_template("signup.html").render(
        static_url=lambda p, **_: (share / "static" / p).as_uri(), base_url="/hub/", prefix="/",
        login_url="/hub/login", logout_url="/hub/logout", user=None, version_hash="", services=[],
        parsed_scopes=set(), announcement=None, post_url="/hub/signup", xsrf="x", ask_email=False,
        two_factor_auth=False, recaptcha_key=None, tos="", alert=alert, result_message=message, username="")
    path = tmp_path / "signup.html"
    path.write_text(html, encoding="utf-8")
    return path


SIGNUP_UPSTREAM = {
    **axe_check.UPSTREAM,
    "#password_confirmation_input": "NativeAuthenticator's confirm-password field: its label points at an id "
                                    "that does not exist (label, critical; jupyterhub/nativeauthenticator)",
    ".auth-form-header": "JupyterHub's orange form header: white on #F37626 is 2.9:1 (color-contrast; "
                         "jupyterhub/jupyterhub#4260, kept for the brand colour)",
    "#signup_submit": "JupyterHub's orange btn-jupyter button, as above (color-contrast; jupyterhub/jupyterhub#4260)",
}


@pytest.mark.parametrize("on_roster", [True, False], ids=["on-roster", "not-on-roster"])
def test_the_hub_sign_up_page_with_the_course_message(page, tmp_path, on_roster):
    import sys
    sys.path.insert(0, str(REPO / "hub"))
    from roster_signup import NOT_ON_ROSTER, ON_ROSTER
    alert, message = ("alert-success", ON_ROSTER) if on_roster else ("alert-warning", NOT_ON_ROSTER)
    page.goto(signup_page(tmp_path, alert, message).as_uri())
    expect(page.locator(".alert")).to_contain_text(message[:30])
    page.screenshot(path=str(page.shots / "signup.png"), full_page=True)
    found = axe_check.course_violations(page, "hub-signup", SIGNUP_UPSTREAM)
    axe_check.upstream_violations(page, "hub-signup", found)
    assert not found, axe_check.summary(found)


# ---------------------------------------------------------------------- the keyboard alone

FOCUSED_JS = """() => {
  const el = document.activeElement;
  axe.setup();
  const name = axe.commons.text.accessibleTextVirtual(axe.utils.getNodeFromTree(el));
  axe.teardown();
  return {tag: el.tagName.toLowerCase(), type: el.type || '', role: el.getAttribute('role') || '', name: name.trim(),
          widget: !!el.closest('.jupyter-widgets, .widget-output'),
          text: (el.value !== undefined ? String(el.value) : el.innerText || '').slice(0, 60)};
}"""


class Keyboard:
    """Tab through the page with the keyboard, recording each focused control's accessible name
    (computed by axe-core, as a screen reader would read it)."""

    def __init__(self, page):
        from axe_playwright_python.base import AXE_SCRIPT
        self.page, self.seen = page, []
        page.evaluate(AXE_SCRIPT)

    def focused(self) -> dict:
        return self.page.evaluate(FOCUSED_JS)

    def press(self, key: str) -> dict:
        self.page.keyboard.press(key)
        now = self.focused()
        if now["widget"]:
            self.seen.append(now)
        return now

    def tab_to(self, box, want: str, limit: int = 80) -> dict:
        """Press Tab until focus is on a control inside ``box`` whose tag/type/role/name says ``want``."""
        for _ in range(limit):
            now = self.press("Tab")
            inside = box.evaluate("(b) => b.contains(document.activeElement)")
            if inside and want in " ".join((now["tag"], now["type"], now["role"], now["name"])):
                return now
        raise AssertionError(f"{limit} Tabs did not reach {want!r} in the box; focus went through "
                             f"{[(s['tag'], s['name']) for s in self.seen[-limit:]]}")


def test_a_gate_a_practice_and_the_lab_by_keyboard_alone(lab, page):
    """On the Demo lesson: the opening gate, the fork practice and the allocation lab, each driven with
    Tab, arrows, Space and Enter only, starting from the cell above them (where JupyterLab's own arrow
    keys leave focus). Every control focused on the way has an accessible name."""
    notebook = open_notebook(page, lab, "notebooks/04_demo.ipynb")
    run_all(page, notebook)
    keys = Keyboard(page)

    def start_at(box):
        """Focus the notebook cell that holds ``box``, as JupyterLab's command mode does (Escape, arrows)."""
        box.scroll_into_view_if_needed()
        box.locator("xpath=ancestor::div[contains(@class, 'jp-Cell')][1]").evaluate("(c) => c.focus()")

    # one gate: the lesson's opening prediction (choices)
    gate = gate_boxes(notebook).filter(has_text="A server stops reserving").first
    start_at(gate)
    first = keys.tab_to(gate, "radio")
    keys.press("Space")                              # choose the focused choice
    keys.press("ArrowDown")                          # and move to the next one: arrows choose in a radio group
    chosen = gate.locator("input[type='radio']:checked").evaluate("(r) => r.parentElement.innerText")
    keys.tab_to(gate, "Commit")
    keys.press("Enter")
    expect(gate).to_contain_text(f"You predicted {chosen.strip()}")
    gate.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "01-gate-by-keyboard.png"))
    assert first["name"], first

    # one practice: type a value, Check, then ask for a hint
    practice = notebook.locator(".widget-vbox:has(> .widget-hbox > button:text-is('Check'))").first
    start_at(practice)
    keys.tab_to(practice, "input")
    page.keyboard.type("1")
    keys.tab_to(practice, "Check")
    keys.press("Space")
    feedback = practice.locator(".widget-html").nth(-2)
    expect(practice).not_to_contain_text("Type a value to check it")
    expect(feedback).not_to_be_empty()
    keys.tab_to(practice, "Hint")
    keys.press("Enter")
    expect(practice.locator("ol li").first).to_be_visible()
    practice.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "02-practice-by-keyboard.png"))

    # the lab: another trace by its first letter, block size 8 typed, sharing off with Space, then its gate
    the_lab = notebook.locator(".widget-vbox:has(> .widget-dropdown):has(> .widget-text)").first
    start_at(the_lab)
    keys.tab_to(the_lab, "select")
    keys.press("p")                                  # a closed list picks the option its first letter names
    expect(gate_boxes(the_lab)).to_contain_text("parallel sampling, S = 16")
    keys.tab_to(the_lab, "block size")
    page.keyboard.press("Control+A")
    page.keyboard.type("8")
    keys.press("Enter")
    expect(gate_boxes(the_lab)).to_contain_text("parallel sampling, S = 8, sharing on")
    keys.tab_to(the_lab, "checkbox")
    keys.press("Space")
    expect(gate_boxes(the_lab)).to_contain_text("parallel sampling, S = 8, sharing off")
    lab_gate = gate_boxes(the_lab)
    keys.tab_to(lab_gate, "radio")
    keys.press("Space")
    keys.tab_to(lab_gate, "Commit")
    keys.press("Enter")
    expect(lab_gate).to_contain_text("You predicted")
    wait_idle(page)
    the_lab.scroll_into_view_if_needed()
    page.screenshot(path=str(page.shots / "03-lab-by-keyboard.png"))

    unnamed = [s for s in keys.seen if not s["name"]]
    assert not unnamed, f"controls without an accessible name: {unnamed}"
    assert len({s["name"] for s in keys.seen}) >= 8, keys.seen
