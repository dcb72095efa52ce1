"""WCAG 2.1 AA for what the course draws, checked by axe-core in chromium, and by the keyboard alone.

* Each lesson after Run All with every gate committed (in test_lessons_in_lab.py, on the page its render and
  gate checks share), each released problem set as opened, a learner's
  feedback page and the class report from a real (small) grading run, and the hub's sign-up page: no
  serious or critical axe violation outside :data:`axe_check.UPSTREAM` (JupyterLab's and JupyterHub's
  own parts, each listed with its upstream issue); those are written to ``artifacts/browser/axe/``.
* The keyboard alone and what a screen reader is told: test_keyboard_and_screen_reader.py (every kind of
  control) and the lessons' journeys in test_lessons_in_lab.py, with the steps in keyboard.py.

Screenshots land in ``artifacts/browser/<test>/``.
"""
from __future__ import annotations

import pytest

from .browser_server import REPO
from . import axe_check
from .jlab import open_notebook
from .pages import expect

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
    levels = page.locator("h1, h2, h3, h4, h5, h6").evaluate_all("(hs) => hs.map((h) => +h.tagName[1])")
    assert levels[0] == 1, f"the page's first heading is an H{levels[0]}, not its H1 (the score)"
    assert all(b <= a + 1 for a, b in zip(levels, levels[1:])), f"a heading level is skipped: {levels}"
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
