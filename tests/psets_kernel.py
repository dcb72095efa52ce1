"""One live Jupyter kernel that grades many versions of a problem set, for the mutation and leak tests.

Starting a kernel per submission (as nbgrader does) costs seconds; here one kernel runs each version's
cells from the top after a namespace reset, test cells without their grader-only parts, and each test
cell is then judged as the autograder judges it: from its record of results, by the judge in this
process (``pagedkv_lib/course/instructor/grading/judge.py``). With ``hidden=False`` (what a learner runs before
handing in) the verdicts are the kernel's own: no error, and the pass marker shown.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import numbers
import re
import shutil
from pathlib import Path

from jupyter_client.manager import KernelManager

from notebook_runs import socket_folder, unix_sockets
from pagedkv_lib.course.instructor.grading import judge
from pagedkv_lib.course.learner.testcell import PASS_MIME, RECORD_MIME
from pagedkv_lib.course.learner.variants import KEY_ENV

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
        self.sockets = socket_folder("pkv-kernel-")   # Unix sockets, not TCP ports (``notebook_runs.py`` says why)
        self.km = KernelManager(kernel_name="python3", **unix_sockets(self.sockets))
        self.km.start_kernel(cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=60)
        except RuntimeError:
            self.close()
            raise

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self.sockets, ignore_errors=True)

    def run(self, code: str, timeout_s: float = 60) -> tuple[bool, str]:
        """Run ``code``; return (passed marker seen and no error, the error's message or '')."""
        seen = {"error": "", "passed": False, "stdout": "", "shown": ""}
        self.outputs = []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                seen["stdout"] += content["text"]
            elif kind == "error":
                seen["error"] = "\n".join(content["traceback"]) or f"{content['ename']}: {content['evalue']}"
            elif kind == "display_data" and PASS_MIME in content.get("data", {}):
                seen["passed"] = True
            elif kind == "display_data" and RECORD_MIME in content.get("data", {}):
                self.outputs.append({"output_type": kind, "data": content["data"]})
            elif kind in ("display_data", "execute_result"):
                seen["shown"] += content.get("data", {}).get("text/plain", "<a display without text>") + "\n"

        self.kc.execute_interactive(code, output_hook=hook, timeout=timeout_s)
        self.stdout, self.shown = seen["stdout"], seen["shown"]
        return seen["passed"] and not seen["error"], seen["error"]

    def expected_values(self, cells: list[dict], answers: dict[str, str], *, hidden: bool,
                        sweeps: bool = False, key: str = "", answers_only: bool = False) -> list:
        """The expected and known-wrong values the test cells compare against, recorded in the judge
        (the verdicts of that run are left in ``self.verdicts``).

        Checks of random sweeps (a list in the checked name) are left out unless ``sweeps``: their values
        are many and small, and in a set graded on values none of them is an answer a learner could copy.
        ``answers_only`` keeps only the expected values of the answers a learner sets (checks named after
        a variable), without the known-wrong ones.
        """
        store = []
        checks = judge.RecordedAnswers.checks

        class Recording:
            def __getattr__(self, name):
                return getattr(checks, name)

            @staticmethod
            def check_value(name, got, expected, **kw):
                if answers_only:
                    store.extend([expected] if name.isidentifier() else [])
                elif sweeps or "[" not in name:
                    store.extend([expected, *[w for w, _ in kw.get("misconceptions", ())]])
                return checks.check_value(name, got, expected, **kw)

            @staticmethod
            def check_known_mistakes(name, got, misconceptions, **kw):
                misconceptions = list(misconceptions)
                store.extend(w for w, _ in misconceptions if not answers_only and (sweeps or "[" not in name))
                return checks.check_known_mistakes(name, got, misconceptions, **kw)

        judge.RecordedAnswers.checks = Recording()
        try:
            self.verdicts = self.grade(cells, answers, hidden=hidden, judged=True, key=key)
        finally:
            judge.RecordedAnswers.checks = checks
        return json.loads(json.dumps(store, default=lambda v: float(v) if isinstance(v, numbers.Real) else repr(v)))

    def grade(self, cells: list[dict], answers: dict[str, str], *, hidden: bool = True,
              judged: bool | None = None, key: str = "") -> dict[str, tuple[bool, str]]:
        """{test grade_id: (passed, message)} for ``cells`` with ``answers`` put in their answer cells.

        ``hidden=False`` drops the hidden tests, leaving what a learner sees before handing in; its
        verdicts are the kernel's own unless ``judged``. With hidden tests they are the judge's. What each
        test cell printed or displayed, other than its record and pass marker, is left in ``self.printed``.
        ``key`` is the learner's variant key, given to the kernel as a hub gives it and to the judge as
        autograde does ("" for the practice numbers).
        """
        judged = hidden if judged is None else judged
        self.run("get_ipython().run_line_magic('reset', '-f')")
        self.run(f"import os; os.environ[{KEY_ENV!r}] = {key!r}")
        self.printed = {}
        verdicts, ran = {}, []
        for cell in cells:
            meta, source = _meta(cell), _src(cell)
            if cell["cell_type"] != "code":
                continue
            if meta.get("grade_id") in answers:
                source = answers[meta["grade_id"]]
            elif not hidden:
                source = HIDDEN.sub("", source)
            full = source
            if judge.is_test(cell):
                source = judge.kernel_source(source)
            passed, message = self.run(source)
            ran.append(dict(copy.deepcopy(cell), source=full, outputs=self.outputs))
            if meta.get("grade") and not meta.get("solution"):
                verdicts[meta["grade_id"]] = (passed, message)
                self.printed[meta["grade_id"]] = self.stdout + self.shown
        if not judged:
            return verdicts
        found, elsewhere = judge.judge_notebook(ran, judge.trusted_cells(ran), key)  # the full tests it ran
        assert not elsewhere and not any(v.forged for v in found.values()), (elsewhere, found)
        return {g: (v.passed, "" if v.passed else f"CheckFailed: {judge.error_output(v.message)['evalue']}")
                for g, v in found.items()}

    def score(self, cells: list[dict], answers: dict[str, str], **kw) -> float:
        pts = points(cells)
        return sum(pts[g] for g, (ok, _) in self.grade(cells, answers, **kw).items() if ok)


def reference_values(cells: list[dict], key: str) -> dict:
    """The reference answers' values (``_t.value`` names) on ``key``'s numbers, run in this process
    from the solution's set-up and answer cells (no kernel, no judge: what a correct learner sets)."""
    import os
    from pagedkv_lib.course.learner.variants import KEY_ENV
    before = os.environ.pop(KEY_ENV, None)
    try:
        ns = {"VARIANT_KEY": key}
        exec(compile(judge.trusted_cells(cells)["setup"][0], "<setup>", "exec"), ns)
        for source in solutions(cells).values():
            exec(compile(source, "<answer>", "exec"), ns)
    finally:
        if before is not None:
            os.environ[KEY_ENV] = before
    return {n: ns[n] for n in answer_names(cells) if n in ns}


_VALUE = re.compile(r'\bt\.value\("(\w+)"\)|\b_(?:set|count|fraction)\(t, "(\w+)"')


def answer_names(cells: list[dict]) -> list[str]:
    """The variables the visible checks read (``t.value(name)``), in order: in the test cells' visible
    parts and in the library module of visible checks they call (``course/learner/pset_checks``)."""
    from psets_leaks import visible_checks_source
    sources = [HIDDEN.sub("", _src(c)) for c in cells if c["cell_type"] == "code"]
    modules = {m for source in sources for m in re.findall(r"pset_checks import (\w+) as", source)}
    sources += [visible_checks_source(m) for m in sorted(modules)]
    return list(dict.fromkeys(a or b for source in sources for a, b in _VALUE.findall(source.replace("_t.value", "t.value"))))
