"""One live Jupyter kernel that grades many versions of a problem set, for the mutation and leak tests.

Starting a kernel per submission (as nbgrader does) costs seconds; here one kernel runs each version's
cells from the top after a namespace reset, and a test cell counts as passed exactly as the autograder
counts it: no error, and the pass marker shown (see ``pagedkv_lib/course/testcell.py``).
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from jupyter_client.manager import start_new_kernel

from pagedkv_lib.course.testcell import PASS_MIME

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS\n?", re.DOTALL)
SOLUTION = re.compile(r"[ \t]*### (BEGIN|END) SOLUTION\n?")


def _src(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _meta(cell) -> dict:
    return cell["metadata"].get("nbgrader", {})


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def solutions(cells: list[dict]) -> dict[str, str]:
    """{answer grade_id: the reference answer's code, without the BEGIN/END SOLUTION lines}."""
    return {_meta(c)["grade_id"]: SOLUTION.sub("", _src(c)) for c in cells
            if _meta(c).get("solution") and c["cell_type"] == "code"}


NO_TRITON = None if importlib.util.find_spec("triton") else (
    "triton is not installed here (Linux only): ps3's solution cannot score its 2-point Triton bonus, "
    "so it cannot pass every test")
"""Why the checks that need ps3's full marks skip here, or None where triton is installed."""


def points(cells: list[dict]) -> dict[str, float]:
    """{test grade_id: points} of the autograded test cells."""
    return {_meta(c)["grade_id"]: float(_meta(c)["points"]) for c in cells
            if _meta(c).get("grade") and not _meta(c).get("solution")}


class LiveKernel:
    """A kernel started once; :meth:`grade` runs one version of a notebook in it."""

    def __init__(self, cwd: Path):
        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(cwd))

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def run(self, code: str, timeout_s: float = 60) -> tuple[bool, str]:
        """Run ``code``; return (passed marker seen and no error, the error's message or '')."""
        seen = {"error": "", "passed": False, "stdout": "", "shown": ""}

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                seen["stdout"] += content["text"]
            elif kind == "error":
                seen["error"] = "\n".join(content["traceback"]) or f"{content['ename']}: {content['evalue']}"
            elif kind == "display_data" and PASS_MIME in content.get("data", {}):
                seen["passed"] = True
            elif kind in ("display_data", "execute_result"):
                seen["shown"] += content.get("data", {}).get("text/plain", "<a display without text>") + "\n"

        self.kc.execute_interactive(code, output_hook=hook, timeout=timeout_s)
        self.stdout, self.shown = seen["stdout"], seen["shown"]
        return seen["passed"] and not seen["error"], seen["error"]

    def expected_values(self, cells: list[dict], answers: dict[str, str], *, hidden: bool,
                        sweeps: bool = False) -> list:
        """The expected and known-wrong values the test cells compare against, recorded in the kernel.

        Checks of random sweeps (a list in the checked name) are left out unless ``sweeps``: their values
        are many and small, and in a set graded on values none of them is an answer a learner could copy.
        """
        self.run(_RECORD.replace("_SWEEPS", str(sweeps)))
        self.grade(cells, answers, hidden=hidden)
        self.run("import pagedkv_lib.course.testcell as _t, json\nprint(json.dumps(_t._recorded, default=repr))\n"
                 "_t.fresh_checks_module = _t._unrecorded")
        return json.loads(self.stdout)

    def grade(self, cells: list[dict], answers: dict[str, str], *, hidden: bool = True) -> dict[str, tuple[bool, str]]:
        """{test grade_id: (passed, message)} for ``cells`` with ``answers`` put in their answer cells.

        ``hidden=False`` drops the hidden tests, leaving what a learner sees before handing in. What each
        test cell printed or displayed, other than its pass marker, is left in ``self.printed``.
        """
        self.run("get_ipython().run_line_magic('reset', '-f')")
        self.printed = {}
        verdicts = {}
        for cell in cells:
            meta, source = _meta(cell), _src(cell)
            if cell["cell_type"] != "code":
                continue
            if meta.get("grade_id") in answers:
                source = answers[meta["grade_id"]]
            elif not hidden:
                source = HIDDEN.sub("", source)
            passed, message = self.run(source)
            if meta.get("grade") and not meta.get("solution"):
                verdicts[meta["grade_id"]] = (passed, message)
                self.printed[meta["grade_id"]] = self.stdout + self.shown
        return verdicts

    def score(self, cells: list[dict], answers: dict[str, str], **kw) -> float:
        pts = points(cells)
        return sum(pts[g] for g, (ok, _) in self.grade(cells, answers, **kw).items() if ok)


_RECORD = """
import pagedkv_lib.course.testcell as _t
_t._recorded, _t._unrecorded = [], getattr(_t, "_unrecorded", _t.fresh_checks_module)

def _recording_module(_t=_t):  # bound now: the namespace reset between versions removes _t
    store, module = _t._recorded, _t._unrecorded()
    check_value, check_known_mistakes = module.check_value, module.check_known_mistakes

    def recorded(name, got, expected, **kw):
        if _SWEEPS or "[" not in name:  # a random sweep's cases (lists in the name) identify no answer
            store.extend([expected, *[w for w, _ in kw.get("misconceptions", ())]])
        return check_value(name, got, expected, **kw)

    def recorded_mistakes(name, got, misconceptions, **kw):
        misconceptions = list(misconceptions)
        store.extend(w for w, _ in misconceptions if _SWEEPS or "[" not in name)
        return check_known_mistakes(name, got, misconceptions, **kw)

    module.check_value, module.check_known_mistakes = recorded, recorded_mistakes
    return module

_t.fresh_checks_module = _recording_module
"""
