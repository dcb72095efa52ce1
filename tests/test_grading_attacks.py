"""A hostile class, graded through the sandbox: every attacker answers every question wrong (fair score 0).

One attacker per attack class of issue 18: frame inspection, a background thread re-patching the checks,
garbage-collector hunting, rigged comparisons and conversions, a forged record, forged answers of the
grading worker written to every descriptor the kernel holds, copying a neighbour's
submission, calling the library's own implementation, rebinding the recorder at run time,
rewriting the library, solutions, gradebook and
grades.csv (also by a path spelled so that only the sandbox's report of what it denied can flag it), and
runaway processes, memory and files (each bounded by the sandbox's limits, so the test
machine is never at risk). Each attacker scores 0, no file outside the sandboxes changes (the course
folder and the library are hashed before and after), the flag names the attacker and nobody else, and the
all-wrong victim graded after them scores 0 while the honest student keeps full marks.
"""
from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from classroom import WRONG, answered, course_copy, solutions_by_cell
from conftest import REPO
from pagedkv_lib import course
from pagedkv_lib.course.instructor.intake.notebook_cleaning import normalise

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.xdist_group("nbgrader-class"),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)")]

NAME = "ps2_math"
LIBRARY = REPO / "pagedkv_lib"

FRAMES = """import sys
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    frame = sys._getframe(1)
    while frame is not None:  # the expected value, wherever a caller keeps it
        for key in ("want", "expected", "_want"):
            if isinstance(frame.f_locals.get(key), int):
                return frame.f_locals[key]
        frame = frame.f_back
    return 0
"""
THREAD = """import threading, time, sys
def _patch():
    while True:
        for name, mod in list(sys.modules.items()):
            if name.startswith("pagedkv_lib.course"):
                for attr in ("check_value", "check_known_mistakes", "require"):
                    if hasattr(mod, attr):
                        setattr(mod, attr, lambda *a, **k: None)
        time.sleep(0.001)
threading.Thread(target=_patch, daemon=True).start()
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
GC = """import gc
for obj in gc.get_objects():
    if callable(obj) and getattr(obj, "__name__", "") in ("check_value", "require", "check_known_mistakes"):
        obj.__code__ = (lambda *a, **k: None).__code__
    if type(obj).__name__ in ("Recorder", "CheckFailed"):
        try:
            obj.entries = []
        except Exception:
            pass
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
RIGGED = """class Everything(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
    def __index__(self):
        return 3072
    def __int__(self):
        return 3072
    def __float__(self):
        return 5.5
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return Everything(0)
"""
RIGGED_Q6 = "class Half(float):\n    def __eq__(self, other):\n        return True\n    __hash__ = float.__hash__\nexpected_slack_slots = Half(0.0)\n"
FORGED = """from IPython.display import display
for gid in ("q1_tests", "q2_tests", "q3_tests"):
    display({"application/vnd.pagedkv.result+json": {"grade_id": gid, "entries": []}, "text/plain": "forged"}, raw=True)
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
NEIGHBOUR = """import glob, json, os
found = []
for pattern in ("../*/ps2_math/*.ipynb", "../../*/ps2_math/*.ipynb", "/**/submitted/*/ps2_math/*.ipynb",
                "/tmp/**/submitted/*/ps2_math/*.ipynb"):
    found += glob.glob(pattern, recursive=True)
for path in found:
    try:
        for cell in json.load(open(path))["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("solution"):
                exec("".join(cell["source"]))
    except Exception:
        pass
if "kv_bytes_per_token" not in globals():
    def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
        return 0
"""
LIBRARY_Q2 = "from pagedkv_lib.accounting import blocks_needed\n"
LIBRARY_Q3 = ("def reserved_and_slack(lengths, block_size):\n    import pagedkv_lib.accounting as acc\n"
              "    r = acc.reserved_slots(lengths, block_size)\n    return r, r - sum(lengths)\n")
REWRITE = """import glob, os, site, sys, pagedkv_lib
targets = [pagedkv_lib.__file__]
for root in site.getsitepackages():
    for finder in glob.glob(os.path.join(root, "__editable__*finder.py")):
        text = open(finder).read()  # it names the repository's own library folder
        for line in text.splitlines():
            if "pagedkv_lib" in line and "/" in line:
                targets += [p for p in line.split("'") if p.startswith("/")]
for folder in list(targets):
    folder = folder if os.path.isdir(folder) else os.path.dirname(folder)
    for rel in ("course/learner/checks.py", "accounting.py", "../solutions/ps2_math/ps2_math.ipynb",
                "../gradebook.db", "../grades.csv", "../submitted/zz_victim/ps2_math/ps2_math.ipynb"):
        targets.append(os.path.join(folder, rel))
for top in ("/", os.path.expanduser("~"), "/tmp"):
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
        targets += [os.path.join(dirpath, f) for f in files if f in ("gradebook.db", "grades.csv", "ps2_math.ipynb")]
for path in targets:
    try:
        with open(path, "a") as f:
            f.write("# rewritten by an attacker")
    except OSError:
        pass
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
# Reaches for the course root's gradebook and grades by a path no reading of the cell can see (ROOT_HEX is
# the root, hex-encoded, put in when the class is built): only the sandbox's own report can flag it.
OBLIQUE = """import os
where = bytes.fromhex("ROOT_HEX").decode()
for name in ("gradebook", "grades", "solutions"):
    for ext in (".db", ".csv", ""):
        try:
            with open(os.path.join(where, name + ext), "a") as f:
                f.write("x")
        except OSError:
            pass
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
RUNAWAY = """import os, signal, subprocess, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
children = []
try:
    for _ in range(400):  # bounded here, and stopped sooner by the sandbox's process limit
        children.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
except OSError:
    pass
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True:\\n    time.sleep(0.05)"], start_new_session=True)
try:
    hog = bytearray(64 * 2**30)  # refused: the address-space limit is far below
except MemoryError:
    pass
try:
    with open("big.bin", "wb") as f:
        for _ in range(200):
            f.write(b"x" * 2**20)  # stopped at the file-size limit
except OSError:
    pass
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
# Writes forged worker answers ("this job succeeded") into every pipe and file its kernel holds, aiming at
# the descriptor on which the grading worker answers its parent. The kernel never holds it: jupyter_client
# starts kernels with close_fds, and the worker holds it close-on-exec besides (test_grading_worker reads
# the flag; a forged line would also lack the job's random id, which the parent requires). Tried by hand
# with jupyter_client patched to keep descriptors open and neither defence: the kernel reached it and the
# forged answer stopped the whole class's autograde. So this test states the outcome, not one defence.
# It reaches only its own kernel's pipes, so there is nothing to flag.
CHANNELS = """import json, os, stat
forged = (json.dumps({"success": True, "log": "", "error": ""}) + "\\n").encode()
for fd in range(3, 1024):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, False)
            os.write(fd, forged * 32)
    except OSError:
        pass
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
# The right Q1 kept under another name, and the recorder rebound through computed names so that the real
# test cells record it instead of the (wrong) answer: no reading of the cell sees it; the recorder's
# run-time check (learner/run_time_patches.py) does, and the record is judged forged.
PATCHED = """import importlib
def _right(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_scalar
_cls = getattr(importlib.import_module("pagedkv_lib.course.learner." + "test" + "cell"), "Rec" + "order")
_init = getattr(_cls, "__" + "init__")
setattr(_cls, "__" + "init__", lambda self, gid, space: _init(self, gid, {**space, "kv_bytes_per_token": _right}))
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    return 0
"""
# A record nested 900 lists deep: converting it (nbformat recurses) would overflow the grader's stack.
ROUTE_Q6 = """import importlib
_acc = importlib.import_module("pagedkv_lib." + "acc" + "ounting")   # a name the answer-cell scan cannot read
expected_slack_slots = V.q6_requests * getattr(_acc, "expected_slack_" + "per_request")(V.q6_block_size)
"""
DEEP = ("from IPython.display import display\nx = []\nfor _ in range(900):\n    x = [x]\n"
        "display({'application/vnd.pagedkv.result+json': {'grade_id': 'q2_tests', 'entries': x}, 'text/plain': 'deep'},"
        " raw=True)\n" + WRONG["q1_answer"])

ATTACKERS = {  # student: (answers over WRONG, words that must be in their status)
    "a_frames": ({"q1_answer": FRAMES}, ["reaches outside", "frame inspection"]),
    "a_thread": ({"q1_answer": THREAD}, ["reaches outside", "threads or processes"]),
    "a_gc": ({"q1_answer": GC}, ["reaches outside", "garbage-collector hunting"]),
    "a_rigged": ({"q1_answer": RIGGED, "q6_answer": RIGGED_Q6}, ["reaches outside", "rigged comparisons"]),
    "a_forged": ({"q1_answer": FORGED}, ["forged record"]),
    "a_neighbour": ({"q1_answer": NEIGHBOUR}, ["reaches outside", "files outside its sandbox"]),
    "a_library": ({"q2_answer": LIBRARY_Q2, "q3_answer": LIBRARY_Q3}, ["library implementation", "blocks_needed"]),
    "a_rewrite": ({"q1_answer": REWRITE}, ["reaches outside", "files outside its sandbox"]),
    "a_runaway": ({"q1_answer": RUNAWAY}, ["reaches outside", "threads or processes"]),
    "a_channels": ({"q1_answer": CHANNELS}, []),
    "a_oblique": ({"q1_answer": OBLIQUE}, ["reaches outside", "the sandbox denied", "gradebook.db (ENOENT)"]),
    "a_deep": ({"q1_answer": DEEP}, ["malformed output"]),
    # the library route the evidence test found: stubbed in ps2, and the stub's call is seen by the tracer
    "a_route": ({"q6_answer": ROUTE_Q6}, ["library implementation", "pagedkv_lib.accounting:expected_slack_per_request"]),
    "a_patched": ({"q1_answer": PATCHED}, ["forged record", "patched at run time", "testcell.Recorder.__init__"]),
    # nbgrader itself stops on a locked cell without a grade id (KeyError), so the notebook scores 0 as a
    # grader error; the judge's own rule (never run such a cell) is tested in test_course_guards.
    "a_injected": ({}, ["grader error", "grade_id"]),
}
HONEST, VICTIM = "honest", "zz_victim"


def _digest(root: Path, skip=()) -> dict:
    """{relative path: sha256} of every file under ``root`` but the grader's own outputs."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not any(part in skip or part == "__pycache__" for part in rel.parts):
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


GRADER_OUTPUTS = ("autograded", "feedback", "grading-logs", "grading-cache", "gradebook.db", "grades.csv",
                  "status.csv", "results", "report", "collect.json")


def _gradebook_sources(root: Path) -> dict:
    """The locked cells' sources and checksums nbgrader grades against, read from the gradebook."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_notebook(NAME, NAME)
        return {c.name: (c.source, c.checksum) for c in nb.source_cells}


def _injected_cell(root: Path) -> dict:
    """Learner code dressed as an instructor's locked cell: it writes into the course folder."""
    code = (f"from pathlib import Path\nPath({str(root)!r}, 'solutions', 'PWNED').write_text('x')\n"
            "import pagedkv_lib.course.learner.checks as c\nc.check_value = lambda *a, **k: None\n")
    return {"cell_type": "code", "execution_count": None, "id": "injected", "outputs": [], "source": code,
            "metadata": {"nbgrader": {"locked": True, "grade": False, "solution": False, "schema_version": 3}}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = course_copy(tmp_path_factory.mktemp("hostile") / "course", NAME)
    release = json.loads((root / course.RELEASE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    good = solutions_by_cell(json.loads((root / course.SOURCE / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8")))
    students = {HONEST: good, VICTIM: WRONG, **{s: {**WRONG, **over} for s, (over, _) in ATTACKERS.items()}}
    for student, answers in students.items():
        folder = root / course.SUBMITTED / student / NAME
        folder.mkdir(parents=True)
        nb = answered(release, {g: src.replace("ROOT_HEX", str(root.resolve()).encode().hex()) for g, src in answers.items()})
        if student == "a_injected":  # a cell marked locked, so that a judge trusting metadata would run it
            nb["cells"].insert(1, _injected_cell(root))
        clean = normalise(json.dumps(nb), release, student).nb  # as collect writes it
        (folder / f"{NAME}.ipynb").write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    course.generate(root, [NAME], release_dir=str((root / "grading-cache" / "releases").resolve()))
    before = _digest(root, GRADER_OUTPUTS), _digest(LIBRARY), _gradebook_sources(root)
    statuses = course.autograde(root, timeout_s=20, workers=2, progress=False)
    grades_after_export = (root / "grades.csv").read_bytes()
    time.sleep(2)  # a process an attacker left running would write now
    after = _digest(root, GRADER_OUTPUTS), _digest(LIBRARY), _gradebook_sources(root)
    listed = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,uid=,args="], capture_output=True, text=True).stdout
    return root, {s.student: s for s in statuses}, before, after, grades_after_export, _left_over(listed)


def _left_over(listed: str) -> list[tuple[int, str]]:
    """(uid, command) of each process not descended from a kernel whose scratch folder still exists.

    Other tests may be grading at the same moment: a kernel whose scratch folder exists is theirs, still
    running, and so is every process under it (matplotlib's ``fc-list``, say). A process whose kernel's
    folder its manager already removed, or with no kernel above it, was left behind.
    """
    procs = {}
    for line in listed.splitlines():
        pid, ppid, uid, args = (line.split(None, 3) + [""])[:4]
        procs[int(pid)] = (int(ppid), int(uid), args)

    def live(pid: int) -> bool:
        while pid in procs:
            ppid, _, args = procs[pid]
            if _scratch_exists(args):
                return True
            pid = ppid
        return False

    return [(uid, args) for pid, (_, uid, args) in procs.items() if not live(pid)]


def _scores(root: Path) -> dict:
    return {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader((root / "grades.csv").open(encoding="utf-8"))}


@pytest.mark.parametrize("attacker", sorted(ATTACKERS))
def test_each_attacker_scores_0_and_is_flagged_by_name(graded, attacker):
    root, statuses, *_ = graded
    assert _scores(root)[attacker] == 0.0
    text = f"{statuses[attacker].label} {' '.join(statuses[attacker].details)}"
    for word in ATTACKERS[attacker][1]:
        assert word in text, (attacker, text)
    if attacker != "a_injected":  # its grader error is nbgrader's own (above); no other may stop grading
        assert "grader error" not in statuses[attacker].problems and "graded on try" not in text, (attacker, text)


def test_the_flags_land_on_attackers_only(graded):
    _, statuses, *_ = graded
    assert statuses[HONEST].label == "ok", statuses[HONEST]
    assert statuses[VICTIM].label == "ok", statuses[VICTIM]


def test_the_victim_graded_after_them_scores_0_and_the_honest_student_full_marks(graded):
    root, *_ = graded
    scores = _scores(root)
    assert scores[VICTIM] == 0.0
    assert scores[HONEST] == 24.0  # ps2_math's autograded points


def test_no_file_outside_the_sandboxes_changed(graded):
    _, _, before, after, grades_after_export, _ = graded
    assert before[0] == after[0], "the course folder (solutions, releases, submissions) changed"
    assert before[1] == after[1], "the library changed"
    assert before[2] == after[2], "the gradebook's locked cells changed"
    root = graded[0]
    assert (root / "grades.csv").read_bytes() == grades_after_export, "grades.csv changed after the export"


def test_no_process_of_a_student_outlives_grading(graded):
    left = graded[5]
    from pagedkv_lib.course.instructor.grading.kernel_sandbox import KERNEL_UIDS
    theirs = [(uid, args) for uid, args in left if uid in KERNEL_UIDS]
    assert not theirs, theirs


def _scratch_exists(ps_line: str) -> bool:
    found = re.search(r"(/\S*/pkv-kernel-[^/\s]+)/", ps_line)
    return bool(found) and Path(found.group(1)).is_dir()
