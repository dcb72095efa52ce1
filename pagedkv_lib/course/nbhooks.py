"""nbgrader preprocessors that make one student's run safe to grade and say what happened in it.

``nbgrader_config.py`` puts them in nbgrader's pipelines. Each notes what it saw (a timeout, a dead
kernel, a tampered locked cell, a capped output) with :func:`record`, which appends a JSON line to the
file named by the ``PAGEDKV_GRADING_EVENTS`` environment variable; the course's ``autograde`` sets it
for every student and turns the lines into that student's status.
"""
from __future__ import annotations

import json
import os

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode, from_dict
from nbgrader.preprocessors import ClearHiddenTests, Execute, OverwriteCells
from traitlets import Bool, Integer

from .grade import EVENTS_ENV
from .nbclean import _grade_id, _is_test, _norm
from .testcell import PASS_MIME, TAMPER_TEXT


def record(kind: str, **details) -> None:
    """Append one event (``kind`` plus details) to this run's events file, if autograde asked for one."""
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, **details}) + "\n")


def _error(ename: str, evalue: str) -> NotebookNode:
    return from_dict({"output_type": "error", "ename": ename, "evalue": evalue,
                      "traceback": [f"{ename}: {evalue}"]})


class QuietOverwriteCells(OverwriteCells):
    """nbgrader's OverwriteCells, warning only about real tampering.

    nbgrader warns "checksum has changed" for every test cell with hidden tests (the learner's copy lacks
    them). Here a locked cell is reported only when its source differs from the *released* copy; the
    original is restored either way, as nbgrader does.
    """

    def report_change(self, name, attr, old, new):
        if attr != "checksum":
            record("tampered", cell=name, what=attr)
            super().report_change(name, attr, old, new)

    def preprocess_cell(self, cell, resources, cell_index):
        before = cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if before != cell.source:
            released = from_dict(dict(cell, source=cell.source))
            ClearHiddenTests().preprocess_cell(released, {}, cell_index)
            if _norm(before) != _norm(released.source):
                record("tampered", cell=_grade_id(cell), what="source")
                self.log.warning("Locked cell %s was edited; its original is restored", _grade_id(cell))
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
        have = {_grade_id(c) for c in nb.cells} - {None}
        restored = [name for name in order if name in graded and name not in have]
        for name in restored:
            present = {_grade_id(c): i for i, c in enumerate(nb.cells) if _grade_id(c)}
            before = [present[n] for n in reversed(order[:order.index(name)]) if n in present]
            cell = self.missing_cell_transform(by_name[name], graded[name].max_score, is_solution=name in answers)
            nb.cells.insert(before[0] + 1 if before else 0, cell)
            self.log.warning("Graded cell %s was missing; it is put back from the gradebook", name)
        if restored:
            record("cells_missing", cells=restored)
        return nb, resources


class GuardedExecute(Execute):
    """nbgrader's Execute that survives a dead kernel and a cell that ignores the timeout's interrupt.

    Either way the rest of the notebook is not run: each later code cell gets an error output saying
    why, so its tests score 0 instead of counting as passed for lack of an error.
    """

    def preprocess(self, nb, resources=None, km=None):
        self._stopped = ""
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("NotRun", f"this cell was not run: {self._stopped}")]
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            if any(o.get("ename") == "SystemExit" for o in cell.get("outputs", [])):
                record("exited", cell=_grade_id(cell) or index)  # IPython survives it; say so anyway
            return cell, resources
        except DeadKernelError:
            self._stop(cell, "kernel_died", "the kernel died (os._exit, a crash, or out of memory)")
        except CellTimeoutError:
            self._stop(cell, "stuck", f"the cell ran past the {self.timeout} s timeout and ignored the interrupt")
        return cell, self.resources

    def _stop(self, cell, kind: str, why: str) -> None:
        record(kind, cell=_grade_id(cell) or f"cell {cell.get('id', '?')}")
        cell.outputs = list(cell.get("outputs", [])) + [_error("GradingStopped", why)]
        self._stopped = f"an earlier cell stopped the run ({why})"
        self.shutdown_kernel = "immediate"

    async def _async_handle_timeout(self, timeout, cell=None):
        record("timeout", cell=(_grade_id(cell) if cell is not None else None), seconds=timeout)
        return await super()._async_handle_timeout(timeout, cell)


class CapOutput(Preprocessor):
    """Cap each code cell's outputs at ``max_bytes`` (text and data together); say where it cut."""

    enabled = Bool(True)
    max_bytes = Integer(20_000, help="most bytes of output kept per cell").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        kept, used, cut = [], 0, 0
        for out in cell.outputs:
            size = len(json.dumps(out))
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
            record("huge_output", cell=_grade_id(cell) or index, bytes=cut + used)
        cell.outputs = kept
        return cell, resources


class RequirePassMarker(Preprocessor):
    """Fail every test cell that shows no error but also no pass marker of its own.

    A test cell ends by showing a marker (see ``testcell.end``); an earlier cell that hides errors
    (``set_custom_exc``, an input transformer) stops the cell before it, so no marker means no points.
    """

    enabled = Bool(True)

    def preprocess_cell(self, cell, resources, index):
        if not _is_test(cell):
            return cell, resources
        outs = cell.get("outputs", [])
        for out in outs:
            if out.get("output_type") == "error" and TAMPER_TEXT in out.get("evalue", ""):
                record("tampered", cell=_grade_id(cell), what=out["evalue"].split("(", 1)[-1].split(")")[0])
        marked = any(o.get("data", {}).get(PASS_MIME, {}).get("grade_id") == _grade_id(cell) for o in outs)
        if not marked and not any(o.get("output_type") == "error" for o in outs):
            record("tampered", cell=_grade_id(cell), what="no pass marker (errors were hidden)")
            cell.outputs = list(outs) + [_error("GradingError", "this test did not run to its end "
                                                "(an earlier cell hid its errors): it scores 0")]
        return cell, resources


class ClearHiddenTestSource(ClearHiddenTests):
    """nbgrader's ClearHiddenTests, applied to test cells only, so autograded notebooks and feedback hold
    no hidden-test source.

    A learner's own cell that merely mentions the delimiters (``# BEGIN HIDDEN TESTS`` in an answer) is
    left alone instead of stopping the run; a test cell's source is the released one, restored from the
    gradebook before it ran, so its hidden region is well formed.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if _is_test(cell):
            self._remove_hidden_test_region(cell)
        return cell, resources
