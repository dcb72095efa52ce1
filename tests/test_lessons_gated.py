"""Every lesson runs top to bottom with each of its predictions committed from Python as it appears.

After every code cell a probe cell commits each gate that is armed and not yet committed, with a
choice or number that is wrong where one exists, so the wrong-answer reveal is exercised too. It then
checks what a learner would see: the reveal shown once, a second commit refused. Every commit must be
saved in the executed notebook: one output of the record's mime type per gate, in the cell that shows
the gate (the probe clicks, so the record fills the gate's slot there). ``make test-colab``
runs this file under ipywidgets 7.7.1 (Colab's version) as well as the main suite does under 8.x.
"""
import json
from pathlib import Path

import nbformat
import pytest

from conftest import LESSONS, execute_lesson
from pagedkv_lib.lesson.record import MIME

PROBE = '''\
from pagedkv_lib.lesson import gates as _W
_done = []
for _g in list(_W._GATES.values()):
    if _g.committed:
        continue
    _view = _g.widget                      # the widgets a learner clicks
    if _g.choices is not None:
        _wrong = [c for c in _g.choices if not _g.is_right(c)]
        _view.input.value = str((_wrong or _g.choices)[0])
    else:
        _view.input.value = str(_g.answer * 3 + 1)
    _view._on_commit()                     # what the Commit button's click runs
    assert _g.committed and _g.revealed, _g.id
    shown = len(_view.output.outputs)
    assert shown >= 1 and _g.verdict().startswith("You predicted"), _g.id
    _view._on_commit()                     # a second commit is refused
    assert len(_view.output.outputs) == shown and "final" in _view.message.value, _g.id
    try:
        _W.commit(_g.id, _view.input.value)
        raise AssertionError(f"{_g.id}: a second commit from code was accepted")
    except ValueError:
        pass
    _done.append(_g.id)
import json as _json
print("COMMITTED", _json.dumps(_done))
'''


@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_with_every_gate_committed(path: Path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code":
            cells.append(nbformat.v4.new_code_cell(PROBE))
    nb.cells = cells
    errors = execute_lesson(nb, path)
    assert not errors, errors[0].get("evalue") if errors else ""
    printed = "".join(o["text"] for c in nb.cells if c.source == PROBE for o in c.outputs
                      if o.get("name") == "stdout")   # a cell's stdout may arrive in several pieces
    committed = [g for line in printed.splitlines() if line.startswith("COMMITTED ")
                 for g in json.loads(line.split(" ", 1)[1])]
    gates = sum(c.source.count(call) for c in nb.cells if c.source != PROBE
                for call in ("W.ask(", "W.predict(", "AllocationLab(", "SimulatorLab("))
    assert gates >= 1 and len(committed) >= gates, (committed, gates)
    saved = [(i, o["data"][MIME]) for i, c in enumerate(nb.cells) if c.source != PROBE
             for o in c.get("outputs", []) if MIME in o.get("data", {})]
    by_gate = {e["gate"]: (i, e) for i, e in saved}
    assert set(committed) <= set(by_gate), set(committed) - set(by_gate)
    for gid in committed:
        i, e = by_gate[gid]
        assert e["v"] == 1 and e["notebook"] == path.stem and e["kind"] in ("choice", "number"), e
        assert e["right"] in (True, False) and e["time"].endswith("+00:00"), e
        widgets = [o for o in nb.cells[i].get("outputs", [])
                   if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
        assert widgets, (gid, "its record is not in the cell that shows the gate", nb.cells[i].source[:80])
