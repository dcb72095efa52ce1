"""A hostile hand-in read by the instructor: formgrader's pages and the feedback run none of its script (issue 37).

The course's own pipeline makes the pages: a clean copy of the repository, one hand-in with the payloads of
:mod:`hostile_handin` in ``submitted/``, ``make autograde feedback`` (the sandbox re-runs the learner's code, so
its outputs are made again), then ``make instructor`` (JupyterLab with formgrader) in chromium. The instructor
opens the manual-grading page of the hand-in, formgrader's lists of it and the feedback page; no payload may run
(none recorded, no marker file, the tab's title formgrader's own), the answer's text must still be shown, and
grading it in formgrader must still work. The hub journey (``test_hub_journey.py``) does the same on the hub.
"""
from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone

import pytest

from . import hostile_handin as hostile
from .browser_server import ARTIFACTS, REPO, WAIT_MS, clean_copy, require_browser, start, stop

pytestmark = [pytest.mark.long, pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]

STUDENT, ASSIGNMENT = "attacker", "ps2_math"
SHOTS = ARTIFACTS / "formgrader-hostile"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course whose one hand-in is hostile, autograded and given feedback, served by ``make instructor``."""
    require_browser()
    root = clean_copy(tmp_path_factory.mktemp("course-hostile"))
    (root / ".venv").symlink_to(REPO / ".venv")
    released = json.loads((REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    handed = root / "submitted" / STUDENT / ASSIGNMENT
    handed.mkdir(parents=True)
    (handed / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(hostile.with_payloads(released)))
    (handed / "timestamp.txt").write_text(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["make", "-o", ".venv/.installed", "autograde", "feedback"], cwd=root, capture_output=True,
                          text=True, timeout=900)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    server = start("instructor", root, ARTIFACTS / "make-instructor-hostile.log")
    try:
        yield server
    finally:
        stop(server)


def test_a_hostile_hand_in_runs_nothing_on_the_instructors_pages(graded, browser):
    root = graded.root
    autograded = json.loads((root / "autograded" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    kinds = {k for c in autograded["cells"] for o in c.get("outputs", []) for k in o.get("data", {})}
    assert {"text/html", "application/javascript", "text/markdown", "image/png"} <= kinds, kinds   # made again
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(graded.url("formgrader"))   # logs in with the token: the cookies a payload would use
        page.wait_for_selector(f"text={ASSIGNMENT}")
        subs = graded.api(f"formgrader/api/submitted_notebooks/{ASSIGNMENT}/{ASSIGNMENT}")
        sub = next(s for s in subs if s["student"] == STUDENT)
        before = graded.api(f"formgrader/api/grades?submission_id={sub['id']}")
        base = f"http://127.0.0.1:{graded.port}/"
        pages = {"manual grading": f"formgrader/submissions/{sub['id']}/",
                 "submissions of the set": f"formgrader/manage_submissions/{ASSIGNMENT}",
                 "gradebook of the notebook": f"formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}",
                 "the student's notebooks": f"formgrader/manage_students/{STUDENT}/{ASSIGNMENT}",
                 "feedback": f"files/feedback/{STUDENT}/{ASSIGNMENT}/{ASSIGNMENT}.html"}
        seen = {name: hostile.visit(page, base + path, SHOTS / f"{i}-{name.replace(' ', '-')}.png", base + "lab")
                for i, (name, path) in enumerate(pages.items())}
        found = hostile.markers(lambda: [p.name for p in root.iterdir()], wait_s=2)
        after = graded.api(f"formgrader/api/grades?submission_id={sub['id']}")
        report = {name: (s["ran"], s["title"]) for name, s in seen.items()}
        print(f"hostile hand-in: payloads that ran, by page: {report}; marker files: {found}")
        assert not any(s["ran"] for s in seen.values()) and not found, (report, found)
        assert not any(s["title"].startswith("pwned") for s in seen.values()), report
        assert before == after, "the grades changed while the instructor read the hand-in"
        for name in ("manual grading", "feedback"):   # the answer is shown, its markup as text
            assert hostile.ANSWER_TEXT in seen[name]["text"], (name, seen[name]["text"][:3000])
            assert "<svg onload" in seen[name]["text"], seen[name]["text"][:3000]   # a tag not kept: shown as text
        # formgrader still grades: the written answer's score typed in its box is saved in the gradebook
        page.goto(base + pages["manual grading"])
        box = page.locator("input.score#q8_answer")
        box.fill("1")
        box.press("Tab")
        page.wait_for_timeout(1500)
        saved = {g["name"]: g for g in graded.api(f"formgrader/api/grades?submission_id={sub['id']}")}
        assert saved["q8_answer"]["manual_score"] == 1, saved["q8_answer"]
        page.screenshot(path=str(SHOTS / "9-graded.png"))
    finally:
        context.close()
