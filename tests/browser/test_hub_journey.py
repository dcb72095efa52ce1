"""A class on a real JupyterHub (``make hub``): release, fetch, validate, submit, collect, grade and feedback.

Three real system users (``pkv-hub-instructor``, ``pkv-hub-learner1``, ``pkv-hub-learner2``) sign up on a
hub started with ``make hub`` on a free loopback port, with a test-private exchange, hub state, homes and
course copy under one tmp folder. Each user drives their own JupyterLab in chromium. The instructor
grades with the course's own ``make autograde feedback report`` in their JupyterLab terminal. learner2 is
also the attacker of issue 37: they try to sign up as the instructor, hand in as learner1, hand in a link to the
solutions, the instructor's solution notebook, a backdated ``timestamp.txt``, a malformed entry and a 2 GB file
(which fills only their own disk, then fails: learner1 hands in after it);
what the instructor sees (formgrader, ``status.csv``, the report, grades, feedback) is asserted. Screenshots
of each step go to ``artifacts/browser/hub/``. Whatever happens, the hub is stopped by its pid, every
process of the test is checked gone, and the users, homes and folders are removed.
"""
from __future__ import annotations

import copy
import csv
import fcntl
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urljoin

import pytest

from . import hostile_handin as hostile
from .browser_server import ARTIFACTS, REPO, WINDOW, free_port, require_browser
from .jlab import accept_dialog, menu, open_notebook, run_all
from .pages import expect
from .test_problem_set_in_lab import validate

pytestmark = [pytest.mark.long, pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("hub")]

INSTRUCTOR, LEARNER1, LEARNER2 = "pkv-hub-instructor", "pkv-hub-learner1", "pkv-hub-learner2"
ASSIGNMENT = "ps2_math"
GATE = "q-waste"   # the first prediction gate of notebooks/01_intuition.ipynb
PREDICTION_MIME = "application/vnd.pagedkv.prediction+json"   # how a committed gate is saved (README)
PASSWORD = "correct-horse-battery-staple"
SHOTS = ARTIFACTS / "hub"
ACCOUNTS = [sys.executable, str(REPO / "hub" / "accounts.py")]
BACKDATED = "2000-01-01 00:00:00.000000 UTC"   # attack 5: the time an attacker writes into their timestamp.txt
MALFORMED = f"nobody+{ASSIGNMENT}+not-a-time+x"   # attack 4: nbgrader's own collect fails parsing its time


def points(notebook: Path) -> tuple[float, float]:
    """(autograded points, all points) of a source notebook: test cells are autograded, written answers are not."""
    auto = total = 0.0
    for cell in json.loads(notebook.read_text())["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade"):
            total += meta["points"]
            auto += meta["points"] if cell["cell_type"] == "code" and not meta.get("solution") else 0
    return auto, total


def answered(released: dict, source: dict, wrong: bool) -> dict:
    """``released`` with every answer cell replaced by the solution's answer, or (``wrong``) its code answers by wrong
    values."""
    solutions = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in source["cells"]
                 if c["metadata"].get("nbgrader", {}).get("solution")}
    for cell in released["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in solutions and not wrong:   # typed in as a learner would: no solution markers
            cell["source"] = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n?", "", solutions[gid])
        elif gid in solutions and cell["cell_type"] == "code":
            cell["source"] = _wrong(solutions[gid])
    return released


def leaked_solution(source: dict) -> dict:
    """The instructor's solution notebook, solution markers and hidden tests in it, as a learner who got the file
    hands it in; its code answers wrong between the markers, so that grading it stays quick (attack 3)."""
    nb = copy.deepcopy(source)
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution") and cell["cell_type"] == "code":
            cell["source"] = _wrong("".join(cell["source"]), markers=True)
    return nb


def _wrong(solution: str, markers: bool = False) -> str:
    """The solution block replaced by a wrong answer: ``return -1`` in a function, else the name bound to -1;
    with ``markers``, inside the solution's own BEGIN/END SOLUTION lines."""
    head, rest = solution.split("### BEGIN SOLUTION", 1)
    indent = re.search(r"\n([ \t]*)$", head).group(1)
    tail = rest.split("### END SOLUTION", 1)[1]
    name = "return" if indent else re.findall(r"^(\w+) = None", head, re.M)[-1] + " ="
    wrong = f"{name} -1  # wrong"
    if markers:
        wrong = f"### BEGIN SOLUTION\n{indent}{wrong}\n{indent}### END SOLUTION"
    return f"{head}{wrong}{tail}"


class HubUser:
    """One user's browser session on the hub: what jlab.open_notebook needs (``url``, ``close_sessions``)."""

    def __init__(self, browser, base: str, name: str):
        self.name, self.base = name, base
        self.context = browser.new_context(viewport=WINDOW)
        self.page = self.context.new_page()
        self.page.set_default_timeout(90_000)
        self.page.shots = SHOTS

    def url(self, path: str) -> str:
        return f"{self.base}/user/{self.name}/{path.lstrip('/')}"

    def api(self, method: str, path: str, data=None):
        xsrf = next((c["value"] for c in self.context.cookies() if c["name"] == "_xsrf"), "")
        resp = self.page.request.fetch(self.url(path), method=method, headers={"X-XSRFToken": xsrf},
                                       data=json.dumps(data) if data is not None else None)
        assert resp.ok, f"{method} {path} as {self.name}: {resp.status} {resp.text()[:500]}"
        return resp.json() if resp.text() else None

    def sessions(self) -> list[dict]:
        """This user's kernel sessions on their single-user server."""
        return self.api("GET", "api/sessions")

    def close_sessions(self) -> None:
        for session in self.sessions():
            self.api("DELETE", f"api/sessions/{session['id']}")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(SHOTS / f"{name}.png"))

    def sign_up(self, code: str, as_user: str | None = None) -> None:
        """Sign up with ``code``; as ``as_user`` (another's roster id), the hub must refuse it."""
        page = self.page
        page.goto(f"{self.base}/hub/signup")
        page.fill("#username_input", as_user or self.name)
        page.fill("#signup_code_input", code)
        page.fill("#password_input", PASSWORD)
        page.fill("#password_confirmation_input", PASSWORD)
        page.click("#signup_submit")
        if as_user:
            expect(page.locator(".alert-danger").first).to_contain_text("not the one given for this name")
            return
        # a roster id is authorised at sign-up, and the page says so (not NativeAuthenticator's "sent to the admin")
        expect(page.locator(".alert-success").first).to_contain_text("you can log in now")

    def log_in(self) -> None:
        """Log in; the hub starts this user's server (the page waits on spawn-pending meanwhile)."""
        page = self.page
        page.goto(f"{self.base}/hub/login")
        page.fill("#username_input", self.name)
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")
        page.wait_for_url(re.compile(r".*/(spawn-pending|user)/.*"))

    def wait_for_lab(self) -> None:
        self.page.wait_for_url(re.compile(rf".*/user/{self.name}/lab.*"), timeout=240_000)
        self.page.wait_for_selector(".jp-LabShell", timeout=120_000)

    def assignment_list(self):
        """Open Nbgrader > Assignment List and return its panel."""
        self.page.goto(self.url(f"lab/workspaces/t{uuid.uuid4().hex[:12]}"))
        self.page.wait_for_selector(".jp-LabShell")
        menu(self.page, "Nbgrader", "Assignment List")
        panel = self.page.locator("#nbgrader-assignment-list, .nbgrader-AssignmentList, #assignments").first
        panel.wait_for()
        expect(panel).not_to_contain_text("Loading, please wait", use_inner_text=True, timeout=60_000)
        return panel


# ---- the hub and the people on it ---------------------------------------------------------------------

def _stat(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name: [state, ppid, ..., starttime at index 19]."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _descendants(root: int) -> set[tuple[int, str]]:
    """Every live process whose parent chain leads to ``root``, as (pid, start time): a pid alone may be reused."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = _stat(int(entry.name))
                parent[(int(entry.name), fields[19])] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = set(), {root}
    while frontier:
        new = {p for p, pp in parent.items() if pp in frontier} - found
        found |= new
        frontier = {pid for pid, _ in new}
    return found


def _alive(proc: tuple[int, str]) -> bool:
    """Is this very process (same pid and start time) still running and not a zombie?"""
    try:
        fields = _stat(proc[0])
        return fields[19] == proc[1] and fields[0] != "Z"
    except OSError:
        return False


def _owned_by(uids: set[int]) -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _uid(e) in uids]


def _cgroups(pid: int) -> str:
    """The cgroups of process ``pid`` as /proc lists them ("" for a process gone meanwhile)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def _outliving(uids: set[int], grace_s: float = 30.0) -> list[int]:
    """Processes of ``uids`` still there after ``grace_s`` seconds: a server's kernels and their sandboxes
    take a moment to die after the hub's SIGTERM, longer on a loaded machine; one that stays is a leftover."""
    deadline = time.monotonic() + grace_s
    while (owned := _owned_by(uids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return owned


def _commands(pids: list[int]) -> list[str]:
    """``pid: command line`` of each process, for a failure message."""
    out = []
    for pid in pids:
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            out.append(f"{pid}: {command[:300]}")
        except OSError:
            out.append(f"{pid}: (gone)")
    return out


def _uid(entry: Path) -> int | None:
    try:
        return entry.stat().st_uid
    except OSError:
        return None


def _searchable_for_others(path: Path) -> list[Path]:
    """Folders above ``path`` (resolved) that others cannot search, e.g. /root holding a pyenv Python."""
    return [p for p in Path(os.path.realpath(path)).parents if not os.stat(p).st_mode & stat.S_IXOTH]


@pytest.fixture(scope="module")
def hub():
    """``make hub`` as root with a three-user roster, everything private to this test under one tmp folder."""
    require_browser()
    if os.geteuid() != 0 or not shutil.which("useradd"):
        why = "the hub test creates system users: it runs as root with useradd"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    if not (REPO / "hub" / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        why = "no hub/node_modules: run `make hub` or `make test-long` once (npm ci installs configurable-http-proxy)"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    lock = open(Path(tempfile.gettempdir()) / "pkv-hub-test.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)   # the users' names are fixed: one hub test at a time on a machine
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    tmp = Path(tempfile.mkdtemp(prefix="pkv-hub-"))
    tmp.chmod(0o711)   # the users reach their homes and the exchange through it, and list nothing
    (tmp / "homes").mkdir(mode=0o711)
    roster = tmp / "roster.csv"
    roster.write_text(f"id,role,name\n{INSTRUCTOR},instructor,Hub Test Instructor\n"
                      f"{LEARNER1},learner,Hub Test Learner One\n{LEARNER2},learner,Hub Test Learner Two\n")
    # The venv's Python may live where others cannot search (a pyenv under /root): let them for this test only.
    opened = {p: os.stat(p).st_mode for p in _searchable_for_others(REPO / ".venv" / "bin" / "python")}
    checkout_mode = os.stat(REPO).st_mode   # make hub closes this checkout to other users; given back after
    for p, mode in opened.items():
        os.chmod(p, mode | stat.S_IXOTH)
    port = free_port()
    env = dict(os.environ)
    log = open(ARTIFACTS / "make-hub.log", "w")
    started = time.monotonic()
    make = subprocess.Popen(
        ["make", "-o", ".venv/.installed", "hub", f"PORT={port}", f"CLASS={roster}", f"EXCHANGE={tmp / 'exchange'}",
         f"HUB_STATE={tmp / 'state'}", f"HOMES={tmp / 'homes'}", f"COURSE={tmp / 'course'}",
         f"RELEASE={tmp / 'release'}", f"RUNTIME={tmp / 'runtime'}", f"HOME_IMAGES={tmp / 'images'}"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    info = {"base": f"http://127.0.0.1:{port}", "tmp": tmp, "make": make, "started": started, "seen": set()}
    try:
        _wait_for_hub(info, ARTIFACTS / "make-hub.log")
        info["steps"] = {"hub up (accounts, hub, proxy)": time.monotonic() - started}
        yield info
    finally:
        info["seen"] |= _descendants(make.pid)
        left = _stop(info)
        uids = {pwd.getpwnam(u).pw_uid for u in (INSTRUCTOR, LEARNER1, LEARNER2) if _exists(u)}
        stray = _commands(_outliving(uids))
        removed = subprocess.run([*ACCOUNTS, "remove", "--roster", str(roster), "--exchange", str(tmp / "exchange"),
                                  "--runtime", str(tmp / "runtime"), "--course", str(tmp / "course"),
                                  "--images", str(tmp / "images")],
                                 capture_output=True, text=True)
        orphans = [str(p) for p in tmp.rglob("*") if p.lstat().st_uid in uids]   # owned by a deleted user
        shutil.rmtree(tmp, ignore_errors=True)
        for p, mode in opened.items():
            os.chmod(p, mode)
        os.chmod(REPO, stat.S_IMODE(checkout_mode))
        log.close()
        lock.close()
        gone = [u for u in (INSTRUCTOR, LEARNER1, LEARNER2) if _exists(u)] + ([str(tmp)] if tmp.exists() else [])
        assert not left and not stray and removed.returncode == 0 and not gone and not orphans, (
            f"left running: {left}; test users' processes: {stray}; still there: {gone}; "
            f"owned by a removed user: {orphans[:20]}; {removed.stderr}")


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def _wait_for_hub(info, log: Path, timeout: float = 180) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if info["make"].poll() is not None:
            raise RuntimeError(f"make hub exited with {info['make'].returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{info['base']}/hub/api/", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the hub did not answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


#: How long a process the hub stopped may take to exit after the hub itself has (a kernel or a terminal whose
#: server sent it SIGTERM a moment before the hub exited); one still there after this outlived the hub.
EXIT_GRACE_S = 20


def _stop(info) -> list[str]:
    """SIGTERM to the hub's own pid (it stops the servers and the proxy), then make's group if still there.

    Returns ``pid: command line`` of each process of the test still alive :data:`EXIT_GRACE_S` seconds after
    the hub had stopped (should be none)."""
    pid_file = info["tmp"] / "state" / "jupyterhub.pid"
    make = info["make"]
    if pid_file.exists() and make.poll() is None:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        try:
            make.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + EXIT_GRACE_S
    while any(_alive(p) for p in info["seen"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = sorted(p for p in info["seen"] if _alive(p))
    named = _commands([pid for pid, _ in left])   # before the kill, so that a failure names what outlived the hub
    if make.poll() is None:
        os.killpg(make.pid, signal.SIGKILL)
        make.wait(timeout=10)
    for p in left:   # what the hub failed to stop: by its pid (checked to be the same process), never by name
        if _alive(p):
            os.kill(p[0], signal.SIGKILL)
    return named


# ---- the journey ----------------------------------------------------------------------------------------

def test_a_class_on_the_hub_from_release_to_feedback(hub, browser):
    tmp, course = hub["tmp"], hub["tmp"] / "course"
    released = json.loads((REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    source = json.loads((REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    auto, total = points(REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    users = {n: HubUser(browser, hub["base"], n) for n in (INSTRUCTOR, LEARNER1, LEARNER2)}
    teacher, one, two = users[INSTRUCTOR], users[LEARNER1], users[LEARNER2]
    steps, last = hub["steps"], [time.monotonic()]

    def step(name: str) -> None:
        now = time.monotonic()
        steps[name], last[0] = now - last[0], now
    try:
        with open(tmp / "state" / "signup-codes.csv", newline="") as f:
            codes = {row["id"]: row["code"] for row in csv.DictReader(f)}
        one.sign_up(codes[LEARNER1], as_user=INSTRUCTOR)   # attack 6: a learner claims the instructor's id first
        for user in users.values():
            user.sign_up(codes[user.name])
        for user in users.values():   # three servers start at once
            user.log_in()
        for user in users.values():
            user.wait_for_lab()
        teacher.shot("01-instructor-lab")
        step("3 sign-ups, log-ins and server starts")
        for name in (LEARNER1, LEARNER2):   # attack 7's defence: each learner's server runs inside its own cgroups
            pids = _owned_by({pwd.getpwnam(name).pw_uid})
            outside = [p for p in pids if (cg := _cgroups(p)) and f"/pagedkv-{name}" not in cg]
            assert pids and not outside, (name, pids, outside)
        hub["seen"] |= _descendants(hub["make"].pid)

        # 1. the instructor releases ps2_math from formgrader
        formgrader_click(teacher, "release")
        teacher.shot("02-formgrader-released")
        assert (tmp / "exchange" / "pagedkv" / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()
        for link in ("name", "preview"):   # formgrader's own page: the set's name and Preview open its folders
            anchor = teacher.page.locator(f"tr:has(td.name:has-text('{ASSIGNMENT}')) td.{link} a").first
            href = anchor.get_attribute("href")
            got = teacher.page.request.get(urljoin(teacher.page.url, href or ""))
            assert got.status == 200 and ASSIGNMENT in (href or ""), (link, href, got.status)
        step("release from formgrader")

        # roles: a learner has no formgrader, in the menu or at /formgrader, and cannot open the instructor's server
        panel = one.assignment_list()
        one.shot("03-learner1-assignment-list")
        menus = one.page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
        one.page.locator(".lm-MenuBar-itemLabel:text-is('Nbgrader')").click()
        items = one.page.locator(".lm-Menu-itemLabel").all_inner_texts()
        one.page.keyboard.press("Escape")
        assert "Nbgrader" in menus and "Assignment List" in items, (menus, items)
        assert not any("Formgrader" in i or "Create Assignment" in i for i in items), items
        assert one.page.request.get(one.url("formgrader")).status == 404
        for other in (INSTRUCTOR, LEARNER2):   # their servers run: the hub refuses learner1 access to them
            resp = one.page.request.get(f"{hub['base']}/user/{other}/api/contents")
            assert resp.status == 403, (other, resp.status, resp.text()[:300])

        # 2. learner1 fetches, answers correctly, validates and submits; 3. learner2 submits wrong answers
        for user, wrong in ((one, False), (two, True)):
            panel = user.assignment_list() if user is two else panel
            row(panel, ASSIGNMENT).locator("button:text-is('Fetch')").first.click()
            expect(row(panel, ASSIGNMENT).locator("button:text-is('Submit')").first).to_be_visible(timeout=60_000)
            path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
            fetched = user.api("GET", f"api/contents/{path}")["content"]
            assert [c["source"] for c in fetched["cells"]] == [
                "".join(c["source"]) for c in released["cells"]], "the fetched set differs from the released one"
            user.api("PUT", f"api/contents/{path}",
                     {"type": "notebook", "format": "json", "content": answered(fetched, source, wrong)})
            open_notebook(user.page, user, path)
            user.shot(f"04-{user.name}-answered")
            text = validate(user.page)
            if wrong:
                assert "failed" in text.lower() or "error" in text.lower(), text[:1500]
            else:
                assert "Success! Your notebook passes all the tests." in text, text[:1500]
            panel = user.assignment_list()
            row(panel, ASSIGNMENT).locator("button:text-is('Submit')").first.click()
            expect(row(panel, ASSIGNMENT).locator("button:text-is('Fetch Feedback')").first).to_be_visible(timeout=60_000)
            user.shot(f"05-{user.name}-submitted")
            step(f"{user.name}: fetch, answer, validate, submit")

        # learner1 hands in the lessons (make hub released them as `lessons`) with a prediction saved in one
        # (written through the contents API as a committed gate saves it; the gates themselves are tested elsewhere)
        lesson = one.api("GET", "api/contents/lessons/01_intuition.ipynb")["content"]
        asking = next(c for c in lesson["cells"] if c["cell_type"] == "code" and f'W.ask("{GATE}"' in "".join(c["source"]))
        asking["outputs"].append({"output_type": "display_data", "metadata": {}, "data": {PREDICTION_MIME: {
            "v": 1, "gate": GATE, "notebook": "01_intuition", "kind": "choice", "value": "the reserved tail",
            "right": None, "misconception": None, "time": "2026-12-03T12:00:00+00:00"}}})
        one.api("PUT", "api/contents/lessons/01_intuition.ipynb", {"type": "notebook", "format": "json", "content": lesson})
        panel = one.assignment_list()
        row(panel, "lessons").locator("button:text-is('Submit')").first.click()
        inbound = tmp / "exchange" / "pagedkv" / "inbound"
        deadline = time.monotonic() + 120
        while not list((inbound / LEARNER1).glob(f"{LEARNER1}+lessons+*")):
            assert time.monotonic() < deadline, f"no hand-in of the lessons in {sorted(inbound.iterdir())}"
            one.page.wait_for_timeout(500)
        one.shot("05-learner1-lessons-handed-in")
        step("learner1 hands in the lessons")

        # permissions, from learner1's own kernel: not the exchange's inbound, not learner2's submission, not the course
        inbound = tmp / "exchange" / "pagedkv" / "inbound"
        assert sorted(p.name for p in inbound.iterdir()) == [LEARNER1, LEARNER2]   # one folder each, their own disk
        theirs = [p for p in (inbound / LEARNER2).iterdir() if p.name.startswith(LEARNER2 + "+")]
        assert len(theirs) == 1, sorted((inbound / LEARNER2).iterdir())
        attempts = {"list inbound": f"os.listdir({str(inbound)!r})",
                    "write in inbound": f"os.mkdir({str(inbound / (LEARNER2 + '+' + ASSIGNMENT + '+t+x'))!r})",
                    "write in learner2's folder": f"os.mkdir({str(inbound / LEARNER2 / (LEARNER2 + '+' + ASSIGNMENT + '+t+x'))!r})",
                    "list learner2's folder": f"os.listdir({str(inbound / LEARNER2)!r})",
                    "read learner2's submission": f"open({str(theirs[0] / (ASSIGNMENT + '.ipynb'))!r}).read()",
                    "list learner2's submission": f"os.listdir({str(theirs[0])!r})",
                    "list the course": f"os.listdir({str(course)!r})",
                    "list the instructor's checkout": f"os.listdir({str(REPO)!r})",
                    "list learner2's home": f"os.listdir(os.path.expanduser('~{LEARNER2}'))"}
        for where in (REPO, course):   # every solution file by its path, in the checkout and the instructor's copy
            for path in sorted((REPO / "solutions").rglob("*.ipynb")):
                attempts[f"read {where / path.relative_to(REPO)}"] = f"open({str(where / path.relative_to(REPO))!r}).read()"
        probe = probe_notebook(attempts)
        one.api("PUT", "api/contents/probe.ipynb", {"type": "notebook", "format": "json", "content": probe})
        notebook = open_notebook(one.page, one, "probe.ipynb")
        run_all(one.page, notebook)
        out = notebook.locator(".jp-OutputArea-output").last.inner_text()
        one.shot("06-learner1-permission-probe")
        result = json.loads(out[out.index("{"):])
        kernel, found = result.pop("kernel"), result.pop("solutions found")
        assert result == {k: "PermissionError" for k in result}, result
        # anywhere on the machine: no file the learner can read holds a hidden test or a solution region
        # (asserted after the journey, so a leak elsewhere on the machine does not hide the rest)
        hub["solutions found"] = found
        # the learner's kernel runs the learner release: its venv, its library, no grader
        runtime = tmp / "runtime" / "venv"
        assert Path(kernel["python"]).parent == runtime / "bin" and kernel["user"] == LEARNER1, kernel
        assert kernel["pagedkv_lib"].startswith(str(runtime / "lib")) and kernel["grader"] is None, kernel
        step("roles and permission checks")

        # attacks 1 and 2, as learner2 (their uid, as from their terminal): a later hand-in named for learner1, with a
        # secret of their choosing, and a link to the instructor's solutions named as their own later hand-in.
        # In inbound/ itself and in learner1's folder the file system refuses the forgery; in learner2's own
        # folder it is made, and collect refuses it below.
        later, mine = "2099-01-01 00:00:00.000000 UTC", inbound / LEARNER2
        refused = [str(inbound / f"{LEARNER1}+{ASSIGNMENT}+{later}+forged"),
                   str(inbound / LEARNER1 / f"{LEARNER1}+{ASSIGNMENT}+{later}+forged")]
        forge = (f"import os, shutil, sys\nfor d in {refused!r}:\n    try:\n        os.mkdir(d)\n"
                 "    except PermissionError:\n        print('refused', d)\n"
                 f"d = {str(mine)!r} + '/{LEARNER1}+{ASSIGNMENT}+{later}+forged'\nos.mkdir(d)\n"
                 f"open(d + '/{ASSIGNMENT}.ipynb', 'w').write(sys.stdin.read())\n"
                 "open(d + '/timestamp.txt', 'w').write('" + later + "')\nopen(d + '/submission_secret.txt', 'w').write('chosen')\n"
                 f"os.symlink({str(course / 'solutions' / ASSIGNMENT)!r}, {str(mine)!r} + '/{LEARNER2}+{ASSIGNMENT}+{later}+link')\n")
        made = subprocess.run(["runuser", "-u", LEARNER2, "--", "/usr/bin/python3", "-c", forge], capture_output=True,
                              text=True, input=json.dumps(released), cwd="/")   # the blank release: 0 points
        assert made.returncode == 0 and made.stdout.count("refused") == 2, (made.stdout, made.stderr)
        # attacks 3-5, as learner2: they hand in the instructor's own solution notebook through their Assignment List
        # (3), then backdate its timestamp.txt (5), and leave an empty folder with a malformed name and a 2 GB file (4):
        # the file fills learner2's own disk (make hub's LEARNER_HOME_MIB) and stops there, "No space left on device"
        before = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
        theirs_now = hand_in(two, mine, hostile.with_payloads(leaked_solution(source)))   # and script for the instructor
        big = mine / f"{LEARNER2}+{ASSIGNMENT}+{later}+big"
        attack = (f"import os\nopen({str(theirs_now / 'timestamp.txt')!r}, 'w').write({BACKDATED!r})\n"
                  f"os.mkdir({str(mine / MALFORMED)!r})\nos.mkdir({str(big)!r})\n"
                  f"fd = os.open({str(big / 'big.bin')!r}, os.O_WRONLY | os.O_CREAT, 0o600)\n"
                  "os.posix_fallocate(fd, 0, 2 * 2**30)\n")
        made = subprocess.run(["runuser", "-u", LEARNER2, "--", "/usr/bin/python3", "-c", attack], capture_output=True,
                              text=True, cwd="/")
        assert made.returncode != 0 and "No space left on device" in made.stderr, (made.returncode, made.stderr)
        assert shutil.disk_usage(mine).free < 16 * 2**20 and shutil.disk_usage(inbound / LEARNER1).free > 256 * 2**20
        # learner1 hands in again after it, through their Assignment List: their own disk has room
        after_attack = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
        hand_in(one, inbound / LEARNER1, one.api("GET", f"api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")["content"])
        step("attacks 1-5 (learner2), learner1 hands in again")

        # 4. the instructor collects (formgrader), grades with the course's make targets (terminal), releases feedback
        said = formgrader_click(teacher, "collect", modal="#error-modal")   # the others collected, the forgeries named
        assert f"names {LEARNER1} but is owned by {LEARNER2}" in said and "symbolic link" in said, said[:3000]
        assert f"{MALFORMED!r}" in said and "more than 104,857,600 bytes" in said, said[:3000]   # attack 4 named
        stamp = (course / "submitted" / LEARNER2 / ASSIGNMENT / "timestamp.txt").read_text()
        assert datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC") >= before, stamp   # attack 5: the server's time
        stamp = (course / "submitted" / LEARNER1 / ASSIGNMENT / "timestamp.txt").read_text()
        assert datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC") >= after_attack, stamp   # the hand-in after it
        # root clears the 2 GB attempt (accounts.py clear-inbound), which gives learner2's disk its room back
        cleared = subprocess.run([*ACCOUNTS, "clear-inbound", "--exchange", str(tmp / "exchange"), "--assignment",
                                  ASSIGNMENT, "--entry", big.name], capture_output=True, text=True)
        assert cleared.returncode == 0 and not big.exists(), cleared.stderr
        assert shutil.disk_usage(mine).free > 256 * 2**20
        teacher.shot("07-formgrader-collected")
        assert sorted(p.name for p in (course / "submitted").iterdir()) == [LEARNER1, LEARNER2]
        step("collect from formgrader")
        # the instructor's terminal opens in the course, with the course's nbgrader on PATH
        # and after a git pull that touched pyproject.toml, make uses the course's venv (root's) as it is
        run_in_terminal(teacher, course, f'test "$(pwd -P)" = "{course.resolve()}" && command -v nbgrader | '
                        f'grep -qx "{course}/.venv/bin/nbgrader" && touch pyproject.toml && ! (make -n autograde | '
                        "grep -q 'pip install')", "08-instructor-terminal", timeout=60, cd=False)
        run_in_terminal(teacher, course, "make collect-lessons autograde feedback report", "08-instructor-grading")
        handed_in = course / "submitted-lessons" / LEARNER1 / "lessons" / "01_intuition.ipynb"
        assert handed_in.exists(), sorted(p.name for p in (course / "submitted-lessons").rglob("*"))
        # the report counts learner1's lesson prediction, without naming them (NAMES=1 would)
        report = (course / "report" / "report.md").read_text()
        predictions = report[report.index("## Predictions before the reveal"):]
        assert f"### {GATE} (lessons)" in predictions and LEARNER1 not in predictions, predictions[:3000]
        with open(course / "grades.csv", newline="") as f:
            grades = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(f)}
        assert grades == {LEARNER1: auto, LEARNER2: 0.0}, grades   # the leaked solution graded as it is, and:
        with open(course / "status.csv", newline="") as f:
            status = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
        theirs = status[LEARNER2]
        assert status[LEARNER1]["status"] == "ok", status[LEARNER1]
        assert "leaked solution" in theirs["status"] and f"{MALFORMED!r}" in theirs["details"], theirs
        flags = report[report.index("## Flags"):report.index("## Status")]
        assert "leaked solution" in flags and ASSIGNMENT in flags, flags[:3000]
        handed = {s["student"]: s["timestamp"] for s in teacher.api("GET", f"formgrader/api/submissions/{ASSIGNMENT}")}
        shown_time = datetime.fromisoformat(handed[LEARNER2]).replace(tzinfo=None)
        assert shown_time >= before, handed   # formgrader shows the server's time, not the learner's
        step("make autograde feedback report (terminal)")
        formgrader_click(teacher, "release-feedback")
        teacher.shot("09-formgrader-feedback-released")
        step("release feedback from formgrader")

        # 5. each learner fetches their feedback and sees their own score
        for user, score in ((one, auto), (two, 0.0)):
            panel = user.assignment_list()
            row(panel, ASSIGNMENT).locator("button:text-is('Fetch Feedback')").first.click()
            link = row(panel, ASSIGNMENT).locator("a:text-is('view feedback'), a:has-text('feedback')").first
            expect(link).to_be_visible(timeout=60_000)
            user.shot(f"10-{user.name}-feedback-fetched")
            pages = user.api("GET", f"api/contents/{ASSIGNMENT}/feedback")["content"]
            stamp = pages[0]["name"]
            user.page.goto(user.url(f"files/{ASSIGNMENT}/feedback/{stamp}/{ASSIGNMENT}.html"))
            body = user.page.inner_text("body")
            user.shot(f"11-{user.name}-feedback")
            found = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", body)
            assert found, body[:1500]
            assert (float(found.group(1)), float(found.group(2))) == (score, total), (user.name, found.group(0))
            assert user.name in body or ASSIGNMENT in body
            if user is two:   # their written answer is shown, its markup as text (asserted below, with the instructor's)
                own_feedback = {"shown": hostile.ANSWER_TEXT in body, "ran": hostile.ran(user.page)}
        step("2 learners fetch and read feedback")

        # 6. one gradebook: the instructor scores learner1's written answers in formgrader, and `make export`
        # writes them into the same row of grades.csv as the autograded points
        subs = teacher.api("GET", f"formgrader/api/submitted_notebooks/{ASSIGNMENT}/{ASSIGNMENT}")
        theirs = next(sub for sub in subs if sub["student"] == LEARNER1)
        cells = teacher.api("GET", f"formgrader/api/grades?submission_id={theirs['id']}")
        written = [g for g in cells if g["cell_type"] == "markdown" and g["max_score"]]
        assert written and sum(g["max_score"] for g in written) == total - auto, cells
        for g in written:
            teacher.api("PUT", f"formgrader/api/grade/{g['id']}", {"manual_score": g["max_score"]})
        teacher.page.goto(teacher.url(f"formgrader/submissions/{theirs['id']}/"))
        teacher.page.wait_for_selector(".score, #notebook, body")
        teacher.shot("12-formgrader-written-answers-graded")
        # issue 37, nothing of the instructor read: learner2's hand-in carries script (tests/browser/hostile_handin.py)
        # in its written answer and in outputs its code makes again at autograde. The instructor reads it where
        # formgrader, the report and the feedback show it: none of it runs, and the answer's text is shown
        theirs = next(sub for sub in subs if sub["student"] == LEARNER2)
        read = {name: hostile.visit(teacher.page, teacher.url(path), SHOTS / f"12-instructor-reads-{name}.png",
                                    teacher.url("lab"))
                for name, path in (("manual-grading", f"formgrader/submissions/{theirs['id']}/"),
                                   ("submissions", f"formgrader/manage_submissions/{ASSIGNMENT}"),
                                   ("report", "files/report/report.html"),
                                   ("feedback", f"files/feedback/{LEARNER2}/{ASSIGNMENT}/{ASSIGNMENT}.html"))}
        pwned = hostile.markers(lambda: [p.name for p in course.iterdir()], wait_s=2)
        ran = {name: (r["ran"], r["title"]) for name, r in read.items()}
        print(f"hub journey: learner2's payloads that ran, by page the instructor read: {ran}; marker files: {pwned}; "
              f"in learner2's own feedback: {own_feedback}")
        assert not any(r["ran"] for r in read.values()) and not pwned, (ran, pwned)
        assert own_feedback == {"shown": True, "ran": []}, own_feedback
        assert hostile.ANSWER_TEXT in read["manual-grading"]["text"], read["manual-grading"]["text"][:3000]
        step("the instructor reads learner2's hostile hand-in")
        run_in_terminal(teacher, course, "make export", "13-instructor-export")
        with open(course / "grades.csv", newline="") as f:
            rows = [(r["student_id"], r["assignment"], float(r["raw_score"])) for r in csv.DictReader(f)]
        assert sorted(rows) == [(LEARNER1, ASSIGNMENT, total), (LEARNER2, ASSIGNMENT, 0.0)], rows
        home = Path(pwd.getpwnam(INSTRUCTOR).pw_dir)
        assert not (home / "gradebook.db").exists(), "formgrader made a second gradebook in the instructor's home"
        step("written answers graded in formgrader, make export")
        hub["journey_s"] = time.monotonic() - hub["started"]
        # the instructor opens formgrader from the Nbgrader menu: it shows in its frame, not a refused blank one
        teacher.page.goto(teacher.url("lab"))
        teacher.page.wait_for_selector(".jp-LabShell")
        menu(teacher.page, "Nbgrader", "Formgrader")
        framed = teacher.page.frame_locator("#formgrader-iframe iframe")
        expect(framed.locator(f"td.name:has-text('{ASSIGNMENT}')").first).to_be_visible(timeout=60_000)
        teacher.shot("12-formgrader-from-the-menu")
        (SHOTS / "timings.json").write_text(json.dumps({"total_s": hub["journey_s"], "load_1min": os.getloadavg()[0],
                                                        "steps_s": steps}, indent=1))
        hub["seen"] |= _descendants(hub["make"].pid)
    finally:
        for user in users.values():
            try:
                user.shot(f"zz-{user.name}-last")
            except Exception:   # the page may be gone; the screenshot is a courtesy, the failure is reported anyway
                pass
            user.context.close()
    found = hub["solutions found"]
    # Another developer's clone of this repository on the same machine (CI's machine keeps the session's own
    # checkout) is outside what make hub serves: named in the output, not a failure of the hub.
    elsewhere = [f for f in found["files"] if _in_another_checkout(Path(f))]
    if elsewhere:
        print(f"hub journey: other checkouts on this machine that learners can read: {elsewhere}")
    leaked = [f for f in found["files"] if f not in elsewhere]
    assert leaked == [] and found["walked"] > 1000, (
        f"learner1 can read these files holding solution or hidden-test lines: {leaked}")
    print(f"hub journey: {hub['journey_s']:.0f} s from make hub to the last feedback page; "
          + "; ".join(f"{k} {v:.0f} s" for k, v in steps.items()))

    # clean stop: SIGTERM to the hub's pid stops the proxy, every server and everything they started
    assert len(hub["seen"]) >= 5, f"too few processes recorded (hub, proxy, 3 servers): {hub['seen']}"
    left = _stop(hub)
    assert left == [], f"still running after the hub stopped: {left}"
    assert hub["make"].poll() is not None
    uids = {pwd.getpwnam(u).pw_uid for u in (INSTRUCTOR, LEARNER1, LEARNER2)}
    owned = _outliving(uids)
    assert owned == [], f"a test user still has processes: {_commands(owned)}"
    # the fixture's teardown then removes the users, their homes and the tmp folder, and checks that


def _in_another_checkout(path: Path) -> bool:
    """Whether ``path`` lies in a git work tree other than the checkout this test serves (the folder that
    holds ``.git`` is not :data:`REPO`, and the hub made none of it)."""
    for folder in path.parents:
        if (folder / ".git").exists():
            return folder.resolve() != REPO.resolve()
    return False


SOLUTION_SEARCH = r'''
def solutions_found(needles):
    """Every notebook this user can read, anywhere, and every file in a folder named solutions, that holds a
    line of one of the course's solution regions or hidden tests (``needles``), but for the user's own
    files (their answers); and how many entries the walk saw."""
    files, walked = [], 0
    for folder, dirs, names in os.walk("/", onerror=lambda err: None):
        if folder == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "run")]
        walked += len(dirs) + len(names)
        for name in names:
            path = os.path.join(folder, name)
            if not (name.endswith(".ipynb") or "/solutions/" in path) or not os.path.isfile(path):
                continue
            try:
                if os.stat(path).st_uid == os.getuid():
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(20_000_000)
            except OSError:
                continue
            if "/solutions/" in path or any(n in text for n in needles):
                files.append(path)
    return {"files": files, "walked": walked}
'''


def solution_lines() -> list[str]:
    """Every line of the course's solution regions and hidden tests (the learner release's own scan), also
    as it reads inside a notebook's JSON (quotes and backslashes escaped)."""
    spec = importlib.util.spec_from_file_location("learner_release", REPO / "tools" / "learner_release.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    lines = tool.secret_lines(REPO)
    return sorted(lines | {json.dumps(line)[1:-1] for line in lines})


def probe_notebook(attempts: dict[str, str]) -> dict:
    """A one-cell notebook printing, for each attempt, the exception it raised (or "allowed"), what
    :data:`SOLUTION_SEARCH` found, and its kernel (python, user, library, whether the grader imports)."""
    lines = ["import json, os", "result = {}"]
    for name, expr in attempts.items():
        lines += ["try:", f"    {expr}", f"    result[{name!r}] = 'allowed'",
                  "except Exception as err:", f"    result[{name!r}] = type(err).__name__"]
    lines += [*SOLUTION_SEARCH.strip().split("\n"),
              f"result['solutions found'] = solutions_found({solution_lines()!r})",
              "import getpass, importlib.util, sys, pagedkv_lib",
              "grader = importlib.util.find_spec('pagedkv_lib.course.instructor')",
              "result['kernel'] = {'python': sys.executable, 'user': getpass.getuser(),",
              "                    'pagedkv_lib': pagedkv_lib.__file__, 'grader': grader and str(grader.origin)}",
              "print(json.dumps(result))"]
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "probe", "metadata": {},
                       "outputs": [], "source": "\n".join(lines)}],
            "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def row(panel, assignment: str):
    """The Assignment List's row of ``assignment`` (the list also holds the released ``lessons``)."""
    return panel.locator(".list_item").filter(has_text=assignment)


def hand_in(user: HubUser, inbound: Path, notebook: dict) -> Path:
    """``user`` saves ``notebook`` as their set and presses Submit in their Assignment List; the new inbound
    entry, once the submit has finished (every path in it closed to others, as ``pagedkv_exchange`` leaves it)."""
    earlier = set(inbound.glob(f"{user.name}+{ASSIGNMENT}+*"))
    user.api("PUT", f"api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
             {"type": "notebook", "format": "json", "content": notebook})
    row(user.assignment_list(), ASSIGNMENT).locator("button:text-is('Submit')").first.click()
    deadline = time.monotonic() + 120
    while True:
        new = sorted(set(inbound.glob(f"{user.name}+{ASSIGNMENT}+*")) - earlier)
        files = ("timestamp.txt", "submission_secret.txt", f"{ASSIGNMENT}.ipynb")
        paths = [new[0], *(new[0] / f for f in files)] if new else []
        if paths and all(p.exists() and not p.stat().st_mode & 0o007 for p in paths):
            return new[0]
        assert time.monotonic() < deadline, f"no finished hand-in of {user.name} in {sorted(inbound.iterdir())}"
        user.page.wait_for_timeout(500)


def formgrader_click(user: HubUser, action: str, modal: str = "#success-modal") -> str:
    """On formgrader's Manage Assignments page, press ``action`` (release, collect, release-feedback) for the set;
    assert that ``modal`` answers, and return its text."""
    page = user.page
    page.goto(user.url("formgrader"))
    row = page.locator(f"tr:has(td.name:has-text('{ASSIGNMENT}'))").first
    row.locator(f"td.{action} a").click(timeout=60_000)
    modal_id, modal = modal, page.locator("#success-modal, #error-modal").first
    modal.wait_for(timeout=180_000)
    text = modal.inner_text()
    assert modal.get_attribute("id") == modal_id.lstrip("#"), text[:3000]
    return text


def run_in_terminal(user: HubUser, cwd: Path, command: str, shot: str, timeout: float = 400, cd: bool = True) -> None:
    """Type ``command`` into a new JupyterLab terminal of ``user`` (after ``cd cwd`` unless not ``cd``: then it
    runs where the terminal opened); wait for it to finish; assert it succeeded."""
    page, rc, log = user.page, cwd / ".hub-test.rc", cwd / ".hub-test.log"
    rc.unlink(missing_ok=True)   # an earlier command's exit status must not read as this one's
    page.goto(user.url(f"lab/workspaces/t{uuid.uuid4().hex[:12]}"))
    page.wait_for_selector(".jp-LabShell")
    menu(page, "File", "New")
    page.locator(".lm-Menu-itemLabel:text-is('Terminal')").click()
    term = page.locator(".jp-Terminal").first
    term.wait_for()
    page.wait_for_timeout(1500)
    term.click()
    page.keyboard.type(f"{f'cd {cwd} && ' if cd else ''}({command}) > {log} 2>&1; echo $? > {rc}\n")
    deadline = time.monotonic() + timeout
    while not rc.exists() or not rc.read_text().strip():
        assert time.monotonic() < deadline, f"{command} did not finish in {timeout:.0f} s"
        page.wait_for_timeout(1000)
    page.keyboard.type(f"tail -n 25 {log}\n")
    page.wait_for_timeout(1000)
    user.shot(shot)
    assert rc.read_text().strip() == "0", log.read_text()[-4000:]
    accept_dialog(page)
