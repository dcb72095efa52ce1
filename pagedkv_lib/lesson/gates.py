"""Predictions that stay hidden until committed, and the record of them.

A lesson cell computes and checks everything first (so a headless run still checks every
claim), then builds a :class:`Gate`: the question, its choices or a number box, and a Commit
button. The reveal (numbers, figures, explanation) is held in Python and shown only after a
commit. The rule lives in Python state, not in ``Button.disabled``: ``Button.click()`` fires
handlers even on a disabled button, so every handler asks :attr:`Gate.committed` itself.

Where widgets cannot render (a terminal, plain nbconvert) the gate's text form says how to
commit with :func:`commit`; the same rule applies. Every commit, and every practice check
(:mod:`.practice`, re-exported here), lands in the kernel's record (:func:`record`,
:func:`save_record`) and is saved with the notebook as an output of its own type
(:mod:`.record`). Only ipywidgets APIs present in both 7.7 (Colab) and 8.x are used.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from typing import Sequence

from ..course.learner import check_value
from . import practice as _practice_module
from . import record as saved
from .answer_keys import gate_key
from .gate_view import GateView
from .inputs import check_id, lookup, parse_number
from .practice import Practice, check, exercise, explain, hint, practice  # noqa: F401 (the lesson API: W.exercise, ...)
from .record import RECORD, Slot, now, set_notebook  # noqa: F401 (W.set_notebook)
from .reveal import hold_figures, rendered
from .views import Shown, in_kernel

_GATES: dict[str, "Gate"] = {}


class Gate(Shown):
    """One gated prediction: a question, choices or a number box with units, and a hidden reveal.

    ``choices`` (a list) or ``number`` (the units, a string such as ``"KiB"``) says how the
    learner answers; ``answer`` is the outcome the prediction is compared with; a number is
    right within the relative ``tolerance``. Where several choices tie, ``answer`` may be a
    tuple of them: each counts as right. ``reveal`` holds matplotlib figures (or axes), markdown
    strings, zero-argument callables returning either (called at reveal time), or any
    displayable object, shown in order after the commit.

    ``answer=None`` makes an ungraded prediction: recorded, never judged in the notebook (a
    problem set's opening predictions, whose answers are the questions ahead; ``about`` names the
    nbgrader grade id of that question). ``mistakes`` maps a wrong choice (or a wrong number,
    matched within ``tolerance``) to the known misconception it stands for; it goes into the
    saved record, never on screen before the commit.
    """

    def __init__(self, qid: str, question: str, *, answer, choices: Sequence | None = None,
                 number: str | None = None, reveal: Sequence = (), tolerance: float = 0.1,
                 mistakes: dict | None = None, about: str | None = None):
        self.id = check_id(qid)
        if not isinstance(question, str) or not question.strip():
            raise TypeError(f"question of {qid!r} must be a non-empty string, got {question!r}")
        if (choices is None) == (number is None):
            raise ValueError(f"gate {qid!r} needs exactly one of choices=[...] or number='<units>', "
                             f"got choices={choices!r}, number={number!r}")
        if choices is not None:
            choices = list(choices)
            if len(choices) < 2 or len(set(map(str, choices))) != len(choices):
                raise ValueError(f"choices of {qid!r} must be at least two distinct options, got {choices!r}")
            tied = isinstance(answer, tuple) and answer not in choices
            ok = (len(answer) > 0 and all(a in choices for a in answer)) if tied else answer in choices
            if not ok and answer is not None:
                raise ValueError(f"answer of {qid!r} must be one of its choices {choices!r} (or a tuple of "
                                 f"tied choices), got {answer!r}")
        else:
            if not isinstance(number, str):
                raise TypeError(f"number of {qid!r} must name the units as a string, got {number!r}")
            answer = None if answer is None else parse_number(f"answer of {qid!r}", answer)
        mistakes = dict(mistakes or {})
        if choices is not None and not set(mistakes) <= set(choices):
            raise ValueError(f"mistakes of {qid!r} must be keyed by its choices {choices!r}, got {list(mistakes)!r}")
        if any(not isinstance(m, str) or not m.strip() for m in mistakes.values()):
            raise ValueError(f"mistakes of {qid!r} must map to non-empty explanations, got {mistakes!r}")
        if about is not None:
            check_id(about)
        if not (isinstance(tolerance, numbers.Real) and 0 <= tolerance < 1):
            raise ValueError(f"tolerance of {qid!r} must be a relative tolerance in [0, 1), got {tolerance!r}")
        if isinstance(reveal, (str, bytes)) or not hasattr(reveal, "__iter__"):
            reveal = [reveal]
        self.question, self.choices, self.units = question, choices, number
        self.answer, self.tolerance = answer, float(tolerance)
        self.mistakes, self.about = mistakes, about
        self.reveal_items = hold_figures(reveal)
        self.prediction = None
        self.outcome: str | None = None   # "right", "wrong" or "recorded" (ungraded) once committed
        self.saved: dict | None = None    # the record saved with the notebook (record.entry)
        self.slot: Slot | None = None     # where a click's commit is saved (the cell showing the gate)
        self.revealed = False
        self._widget = None
        self._on_commit: list = []        # callables run once, right after the commit (when_committed)

    # ------------------------------------------------------------ state: the rule itself

    @property
    def committed(self) -> bool:
        return self.outcome is not None

    def commit(self, value, *, clicked: bool = False) -> dict:
        """Commit a prediction (a choice, or a number); return its record entry. A commit is final.

        A bad value raises ``ValueError`` and changes nothing; so does a second commit. The saved
        record goes into the running cell's output, or (``clicked``, from the widget) into the
        gate's :class:`~.record.Slot`, in the cell that shows the gate.
        """
        if self.committed:
            raise ValueError(f"{self.id!r} is already committed (you predicted {self._shown(self.prediction)}); "
                             "a commit is final")
        if self.choices is not None:
            matches = [c for c in self.choices if c == value or str(c) == str(value)]
            if not matches:
                raise ValueError(f"prediction for {self.id!r} must be one of {self.choices!r}, got {value!r}")
            value = matches[0]
            right = None if self.answer is None else self.is_right(value)
            mistake = self.mistakes.get(value)
        else:
            value = parse_number(f"prediction for {self.id!r}", value)
            right = None if self.answer is None else _close(value, self.answer, self.tolerance)
            mistake = next((m for v, m in self.mistakes.items() if _close(value, v, self.tolerance)), None)
        self.prediction, self.outcome = value, {True: "right", False: "wrong", None: "recorded"}[right]
        entry = {"id": self.id, "kind": "predict", "question": self.question,
                 "choice": value if self.choices is not None else None,
                 "value": value if self.choices is None else None,
                 "answer": self.answer, "outcome": self.outcome, "time": now()}
        RECORD.append(entry)
        self.saved = saved.entry(self.id, "choice" if self.choices is not None else "number", value, right,
                                 None if right else mistake, question=self.about)
        if clicked and self.slot is not None and self.slot.shown and self.slot.empty:
            self.slot.fill(self.saved)
        else:
            saved.emit(self.saved)
        self._reveal()
        saved.committed()
        for run in self._on_commit:
            run()
        self._on_commit.clear()
        return dict(entry)

    def when_committed(self, run) -> None:
        """Call ``run()`` once this gate is committed: now if it already is, else right after the commit
        (a control that would show the answer opens only then)."""
        if self.committed:
            run()
        else:
            self._on_commit.append(run)

    def verdict(self) -> str:
        """``"you predicted X; it is Y"``, only after a commit (empty before)."""
        if not self.committed:
            return ""
        if self.answer is None:
            return (f"You predicted {self._shown(self.prediction)}. It is recorded, not judged here: "
                    "the question it is about tells you.")
        return (f"You predicted {self._shown(self.prediction)}; it is {self._shown(self.answer)} "
                f"({self.outcome}).")

    def is_right(self, choice) -> bool:
        """Whether ``choice`` (one of ``choices``) is the answer, or one of the tied answers."""
        return choice in self.answer if self._tied else choice == self.answer

    @property
    def _tied(self) -> bool:
        return self.choices is not None and isinstance(self.answer, tuple) and self.answer not in self.choices

    def _shown(self, value) -> str:
        if value is self.answer and self._tied:
            return " and ".join(map(str, value)) + ", tied"
        return str(value) if self.units is None else f"{readable(value)} {self.units}".strip()

    def _reveal(self) -> bool:
        """Put the verdict and the reveal into the gate's output; does nothing before a commit."""
        if not self.committed or self.revealed:
            return False
        self.revealed = True
        if self._widget is not None:
            self._show_in(self._widget.output)
        return True

    def _show_in(self, out) -> None:
        out.append_display_data(rendered(f"**{self.verdict()}**"))
        for item in self.reveal_items:
            out.append_display_data(rendered(item))

    # ------------------------------------------------------------ views

    @property
    def widget(self):
        """The ipywidgets view (built on first use): question, input, Commit button, output."""
        if self._widget is None:
            self._widget = GateView(self)
            if self.revealed:
                self._show_in(self._widget.output)
        return self._widget

    def text(self) -> str:
        """The gate as plain text, for front ends without widgets."""
        lines = [f"PREDICT [{self.id}] {self.question}"]
        if self.committed:
            lines.append(self.verdict())
            lines += [str(i) for i in self.reveal_items if isinstance(i, str)]
            return "\n".join(lines)
        if self.choices is not None:
            lines += [f"  ({k}) {c}" for k, c in enumerate(self.choices, 1)]
            how = f"commit({self.id!r}, <one of the choices above, as text>)"
        else:
            how = f"commit({self.id!r}, <a number, {self.units}>)"
        lines.append(f"No widgets here? Commit by running: from pagedkv_lib.lesson.gates import commit; {how}")
        return "\n".join(lines)

    def shown_slots(self) -> list[Slot]:
        """Its slot, shown under it (empty until a click commits; saved with the notebook)."""
        if self.slot is None:
            self.slot = Slot()
            if self.saved is not None:
                self.slot.data = saved.bundle(self.saved)
        return [self.slot]


def readable(value) -> str:
    """A number as a reader takes it in: thousands separated, a fraction to at most four significant figures
    (``90.3476239458196`` reads ``90.35``, ``85.50`` reads ``85.5``; a very small or very large one ``8.604e-60``)."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return f"{value:,}"
    if not 1e-3 <= abs(value) < 1e15:
        return f"{value:.3e}"
    if value.is_integer():
        return f"{value:,}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    shown = f"{value:,.{decimals}f}"
    return shown.rstrip("0").rstrip(".") if "." in shown else shown


def _close(value, answer, tolerance: float) -> bool:
    """A number prediction is right within ``tolerance`` (relative), through the course's matcher."""
    try:
        check_value("prediction", float(value), float(answer), rel_tol=tolerance)
    except AssertionError:
        return False
    return True


# ------------------------------------------------------------------ the module-level API

def predict(qid: str, question: str, *, answer, choices: Sequence | None = None, number: str | None = None,
            reveal: Sequence = (), tolerance: float = 0.1, mistakes: dict | None = None,
            about: str | None = None) -> Gate:
    """Build (and register under ``qid``) a gated prediction; display the returned :class:`Gate`.

    Running the cell again keeps an earlier commit of the same question (a commit is final), and
    its saved record; a changed question or answer gets a fresh gate.
    """
    gate = Gate(qid, question, answer=answer, choices=choices, number=number, reveal=reveal,
                tolerance=tolerance, mistakes=mistakes, about=about)
    old = _GATES.get(qid)
    if old is not None and old.committed and (old.question, old.answer, old.choices, old.units) == (
            gate.question, gate.answer, gate.choices, gate.units):
        gate.prediction, gate.outcome, gate.revealed = old.prediction, old.outcome, True
        gate.saved = old.saved
    return arm(gate)


def ask(qid: str, question: str, **live) -> Gate:
    """A lesson's gated prediction: the cell gives its id, its question and the live objects it made.

    The choices (or units), the answer and the reveal come from the gate's answer key
    (:mod:`.answer_keys`), computed from ``live`` now, with the checks behind them, so the notebook's
    source holds none of them. Display the returned :class:`Gate`.
    """
    key = gate_key(qid)
    answer, reveal = key.answer_and_reveal(live)
    return predict(qid, question, answer=answer, choices=key.choices, number=key.units,
                   reveal=reveal, tolerance=key.tolerance, mistakes=dict(key.mistakes))


def arm(gate: Gate) -> Gate:
    """Register ``gate`` under its id, replacing any earlier one, so :func:`commit` reaches it."""
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a Gate, got {type(gate).__name__}")
    _GATES[gate.id] = gate
    return gate


def gate(qid: str) -> Gate:
    """The gate registered under ``qid`` by :func:`predict`."""
    return lookup(_GATES, "prediction", qid)


def commit(qid: str, value) -> None:
    """Commit a prediction from code (the same rule as the button), and show the reveal here.

    In a notebook the verdict, figures and text appear under the calling cell (and in the
    gate's widget, where widgets render); in a terminal the text is printed.
    """
    g = gate(qid)
    g.commit(value)
    if not in_kernel():
        figures = sum(1 for i in g.reveal_items if not isinstance(i, str))
        print(g.text() + (f"\n({figures} figure(s): open the lesson in Jupyter to see them)" if figures else ""))
        return
    from IPython.display import display
    display(*[rendered(item) for item in [f"**{g.verdict()}**", *g.reveal_items]])


def record() -> list[dict]:
    """Every commit and practice check so far, oldest first (copies: editing them changes nothing)."""
    return [dict(e) for e in RECORD]


def save_record(path="predictions.json") -> str:
    """Write :func:`record` as JSON to ``path``; return the path."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record(), f, indent=1, default=str)
    return path


def reset() -> None:
    """Forget every gate, practice and record entry (for tests, or to start a lesson afresh)."""
    RECORD.clear()
    _GATES.clear()
    _practice_module.PRACTICES.clear()
    saved._NOTEBOOK.clear()


