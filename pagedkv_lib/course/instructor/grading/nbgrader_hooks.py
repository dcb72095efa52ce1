"""nbgrader preprocessors that make one student's run safe to grade and say what happened in it.

``nbgrader_config.py`` puts them in nbgrader's pipelines. Each finds its job (``grading_job.py``: the
parameters the class's autograde wrote for this student, found from nbgrader's ``resources``) and notes
what it saw there (a timeout, a dead kernel, a tampered locked cell, a capped output); the class's
autograde turns those events into the student's status. Their limits are ``grading_limits.py``'s settings.
"""
from __future__ import annotations

import copy
import json

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode, from_dict
from jupyter_core.utils import run_sync
from nbgrader.preprocessors import ClearHiddenTests, Execute, OverwriteCells
from traitlets import Bool, Integer

from ...protocol import PASS_MIME, RECORD_MAX_BYTES, RECORD_MIME, EventKind
from ..intake.notebook_cleaning import cell_grade_id, is_test, tidy_source
from .grading_job import GradingJob
from .grading_limits import KernelLimits, NotebookLimits
from .judge import error_output, judge_notebook, kernel_source, records_in, trusted_from_gradebook
from .judged_records import save_records
from .kernel_alone import judge_alone
from .kernel_sandbox import SandboxKernelManager


def _error(ename: str, evalue: str) -> NotebookNode:
    return from_dict({"output_type": "error", "ename": ename, "evalue": evalue,
                      "traceback": [f"{ename}: {evalue}"]})


class QuietOverwriteCells(OverwriteCells):
    """nbgrader's OverwriteCells, warning only about real tampering.

    nbgrader warns "checksum has changed" for every test cell with hidden tests (the learner's copy lacks
    them). Here a locked cell is reported only when its source differs from the *released* copy; the
    original is restored either way, as nbgrader does.
    """

    def preprocess(self, nb, resources):
        self._job = GradingJob.for_resources(resources)
        return super().preprocess(nb, resources)

    def report_change(self, name, attr, old, new):
        if attr != "checksum":
            self._job.record(EventKind.TAMPERED, cell=name, what=attr)
            super().report_change(name, attr, old, new)

    def preprocess_cell(self, cell, resources, cell_index):
        before = cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if before != cell.source:
            released = from_dict(dict(cell, source=cell.source))
            ClearHiddenTests().preprocess_cell(released, {}, cell_index)
            if tidy_source(before) != tidy_source(released.source):
                self._job.record(EventKind.TAMPERED, cell=cell_grade_id(cell), what="source")
                self.log.warning("Locked cell %s was edited; its original is restored", cell_grade_id(cell))
        return cell, resources

    def add_missing_grade_cells(self, nb, resources):
        """Put every graded cell the submission lacks back, after the nearest earlier source cell it has.

        nbgrader's own version looks the previous source cell up among the submission's answer and
        graded cells only, so a deleted cell that follows a locked markdown cell (or another deleted
        cell) raises KeyError and the whole notebook scores 0. Here any cell with a ``grade_id`` can be
        the anchor; with none before it the cell goes first. Source order is the gradebook's.
        """
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        by_name = {cell.name: cell for cell in source_nb.source_cells}
        graded = {cell.name: cell for cell in source_nb.grade_cells}
        answers = {cell.name for cell in source_nb.solution_cells}
        have = {cell_grade_id(c) for c in nb.cells} - {None}
        restored = [name for name in order if name in graded and name not in have]
        for name in restored:
            present = {cell_grade_id(c): i for i, c in enumerate(nb.cells) if cell_grade_id(c)}
            before = [present[n] for n in reversed(order[:order.index(name)]) if n in present]
            cell = self.missing_cell_transform(by_name[name], graded[name].max_score, is_solution=name in answers)
            nb.cells.insert(before[0] + 1 if before else 0, cell)
            self.log.warning("Graded cell %s was missing; it is put back from the gradebook", name)
        if restored:
            self._job.record(EventKind.CELLS_MISSING, cells=restored)
        return nb, resources


def nested_deeper(value, limit: int) -> bool:
    """True if ``value`` nests lists or dicts more than ``limit`` levels deep (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


class GuardedExecute(Execute):
    """nbgrader's Execute, in the sandbox, so that one bad answer costs one question.

    Each student kernel runs in ``kernel_sandbox.py``'s sandbox (unless the job says the submissions are
    trusted). A test cell is sent without its grader-only regions (``judge.kernel_source``). When the
    kernel dies or a cell ignores the timeout's interrupt, that cell gets an error output saying why, a
    fresh kernel (a fresh sandbox) is started, the code cells before it are run again in it as the
    learner had them (their outputs are kept from the first run), and the notebook goes on. After
    ``NotebookLimits.max_restarts`` fresh kernels, every later code cell gets an error output instead.
    """

    def preprocess(self, nb, resources=None, km=None):
        self._stopped, self._restarts, self._skip = "", 0, set()
        self._job = GradingJob.for_resources(resources)
        self._limits = NotebookLimits(parent=self)
        self.kernel_manager_class = SandboxKernelManager if self._job.sandbox else AsyncKernelManager
        return super().preprocess(nb, resources, km)

    def create_kernel_manager(self):
        """nbclient's, with this job handed to the sandboxed kernel's manager (its key, library, events)."""
        km = super().create_kernel_manager()
        if isinstance(km, SandboxKernelManager):
            km.job = self._job
        return km

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's, for a message nested no deeper than ``NotebookLimits.max_output_depth``; a deeper
        one is replaced by a line saying so, before nbformat converts it."""
        depth = self._limits.max_output_depth
        if nested_deeper(msg.get("content"), depth):
            self._job.record(EventKind.MALFORMED_OUTPUT, cell=cell_grade_id(self.nb.cells[cell_index]) or cell_index)
            text = f"... output dropped: it nested lists or dicts more than {depth} levels deep.\n"
            msg = dict(msg, msg_type="stream", header=dict(msg["header"], msg_type="stream"),
                       content={"name": "stderr", "text": text})
        return super().output(outs, msg, display_id, cell_index)

    def _run(self, cell, index):
        """Execute ``cell`` (a test cell without its grader-only parts) and return it."""
        full = cell.source
        if is_test(cell):
            cell.source = kernel_source(full)
        try:
            return self.execute_cell(cell, index, store_history=True)
        finally:
            cell.source = full

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("NotRun", f"this cell was not run: {self._stopped}")]
            return cell, resources
        try:
            cell = self._run(cell, index)
            if any(o.get("ename") == "SystemExit" for o in cell.get("outputs", [])):
                self._job.record(EventKind.EXITED, cell=cell_grade_id(cell) or index)  # IPython survives it; say so anyway
            return cell, resources
        except DeadKernelError:
            self._recover(cell, index, EventKind.KERNEL_DIED, "the kernel died (os._exit, a crash, or out of memory)")
        except CellTimeoutError:
            self._recover(cell, index, EventKind.STUCK, f"the cell ran past the {self.timeout} s timeout and ignored the interrupt")
        return cell, self.resources

    def _recover(self, cell, index: int, kind: str, why: str) -> None:
        """Score this cell's question 0 (its error output says why), then go on in a fresh kernel.

        A locked set-up cell (the instructor's, such as one importing torch on a loaded machine) is not
        the learner's doing: it is run again in the fresh kernel instead of being left out.
        """
        self._job.record(kind, cell=cell_grade_id(cell) or f"cell {cell.get('id', '?')}")
        meta = cell.metadata.get("nbgrader", {})
        ours = bool(meta.get("locked")) and not meta.get("solution") and not is_test(cell)
        outputs = list(cell.get("outputs", [])) + [_error("GradingStopped", why)]
        cell.outputs = outputs
        if not ours:
            self._skip.add(index)
        while self._restarts < self._limits.max_restarts:
            self._restarts += 1
            try:
                self._fresh_kernel()
                for j, earlier in enumerate(self.nb.cells[:index]):
                    if earlier.cell_type == "code" and j not in self._skip:
                        self._run(copy.deepcopy(earlier), j)
                if ours:
                    self._run(cell, index)
                self._job.record(EventKind.RESTARTED, cell=cell_grade_id(cell) or index, replayed=index)
                return
            except (DeadKernelError, CellTimeoutError):
                cell.outputs = outputs
                continue
        self._stopped = (f"an earlier cell stopped the run ({why}) and {self._limits.max_restarts} fresh kernels "
                         "did not get past it")
        self.shutdown_kernel = "immediate"

    def _fresh_kernel(self) -> None:
        run_sync(self.km.restart_kernel)(now=True)
        if self.kc is not None:
            self.kc.stop_channels()
        self.start_new_kernel_client()

    async def _async_handle_timeout(self, timeout, cell=None):
        self._job.record(EventKind.TIMEOUT, cell=(cell_grade_id(cell) if cell is not None else None), seconds=timeout)
        return await super()._async_handle_timeout(timeout, cell)


class CapOutput(Preprocessor):
    """Cap each code cell's outputs at ``max_bytes`` (text and data together); say where it cut.

    A test cell's record of results is not counted (the judge needs it whole); it is capped on its own
    at ``RECORD_MAX_BYTES``, and one over that is dropped (its test then scores 0).
    """

    enabled = Bool(True)
    max_bytes = Integer(20_000, help="most bytes of output kept per cell").tag(config=True)

    def preprocess(self, nb, resources):
        self._job = GradingJob.for_resources(resources)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        kept, used, cut = [], 0, 0
        for out in cell.outputs:
            size = len(json.dumps(out))
            if RECORD_MIME in out.get("data", {}):
                if size <= RECORD_MAX_BYTES:
                    kept.append(out)
                continue
            if used + size <= self.max_bytes:
                kept.append(out)
                used += size
                continue
            cut += size
            if out.get("output_type") == "stream" and used < self.max_bytes:
                room = self.max_bytes - used
                kept.append(from_dict(dict(out, text=out["text"][:room])))
                used = self.max_bytes
        if cut:
            note = f"\n... output cut: this cell printed {cut + used:,} bytes; the grader keeps {self.max_bytes:,}.\n"
            kept.append(from_dict({"output_type": "stream", "name": "stderr", "text": note}))
            self._job.record(EventKind.HUGE_OUTPUT, cell=cell_grade_id(cell) or index, bytes=cut + used)
        cell.outputs = kept
        return cell, resources


class JudgeTests(Preprocessor):
    """Score every test cell from its record of results, here in the grader's process (``judge.py``); a
    set's kernel that must run alone (``kernel_alone.py``) scores only if it is right there too.

    Each test cell's outputs become what the learner's code printed, the judge's one-line message if
    the test failed (an error output, so nbgrader's SaveAutoGrades scores it 0) and a line saying how
    many results were judged; records, pass markers and the kernel's own errors are dropped, so nothing
    the kernel showed decides a score. A record that is not one well-formed record of the test's own is
    reported as ``forged``.
    """

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        info, job = resources["nbgrader"], GradingJob.for_resources(resources)
        trusted = trusted_from_gradebook(info["db_url"], info["notebook"], info["assignment"])
        verdicts, elsewhere = judge_notebook(nb.cells, trusted, job.variant_key)
        judge_alone(verdicts, nb.cells, info["assignment"], job, KernelLimits(config=self.config),
                    NotebookLimits(config=self.config).alone_seconds)
        kept = {}  # each test's own record and verdict, for copy detection across the class
        for cell in nb.cells:
            gid = cell_grade_id(cell) if cell.cell_type == "code" else None
            if gid in verdicts:
                mine = [r for r in records_in(cell.get("outputs", [])) if isinstance(r, dict) and r.get("grade_id") == gid]
                kept.setdefault(gid, {"record": mine[0] if len(mine) == 1 else None, "passed": verdicts[gid].passed})
        save_records(job, kept)
        for where in elsewhere:
            job.record(EventKind.FORGED, what=where)  # a record outside its test cell, or grader metadata nobody wrote
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            found = records_in(cell.get("outputs", []))
            verdict = verdicts.pop(cell_grade_id(cell), None) if is_test(cell) else None  # the gradebook's tests only
            kept = [o for o in cell.get("outputs", [])
                    if RECORD_MIME not in o.get("data", {}) and PASS_MIME not in o.get("data", {})
                    and not (verdict and o.get("output_type") == "error" and o.get("ename") != "GradingStopped")]
            if verdict is not None:
                for what in verdict.forged:
                    job.record(EventKind.FORGED, cell=verdict.grade_id, what=what)
                count = sum(len(r.get("entries", [])) for r in found if isinstance(r, dict) and isinstance(r.get("entries"), list))
                kept.append(from_dict({"output_type": "stream", "name": "stdout",
                                       "text": f"{verdict.grade_id}: {count} results judged by the grader: "
                                               f"{'passed' if verdict.passed else 'failed'}.\n"}))
                if not verdict.passed:
                    kept.append(from_dict(error_output(verdict.message)))
            cell.outputs = kept
        return nb, resources


class ClearHiddenTestSource(ClearHiddenTests):
    """nbgrader's ClearHiddenTests, applied to test cells only, so autograded notebooks and feedback hold
    no hidden-test source.

    A learner's own cell that merely mentions the delimiters (``# BEGIN HIDDEN TESTS`` in an answer) is
    left alone instead of stopping the run; a test cell's source is the released one, restored from the
    gradebook before it ran, so its hidden region is well formed.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if is_test(cell):
            self._remove_hidden_test_region(cell)
        return cell, resources
