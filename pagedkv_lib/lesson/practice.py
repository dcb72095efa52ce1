"""The practice loop: try a value, then up to three hints one at a time, then try again; and an answer canvas.

Matching is :func:`pagedkv_lib.course.check_value`'s (the checker graded cells use), so a value
that equals a known wrong answer gets the message naming that mistake. A practice with
``canvas=True`` also has a text area for the learner's explanation, with the three checks of
:mod:`.canvas` shown as they become true; the misconception check on the value comes after.
Tries go into the kernel's record (:mod:`.gates`); the first try (the learner's prediction,
before any hint) and the latest checked canvas are saved with the notebook (:mod:`.record`).
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

from ..course.learner import check_value
from . import access
from . import canvas as _canvas
from . import click_delay
from . import record as saved
from .answer_keys import practice_key
from .inputs import check_id, lookup, parse_number
from .record import RECORD, Slot, now
from .views import Shown, escape

PRACTICES: dict[str, "Practice"] = {}


class Practice(Shown):
    """Try a value, then ask for up to three hints one at a time, then try again.

    Each try goes through :func:`pagedkv_lib.course.check_value`, whose message names the
    mistake when the value matches a known wrong answer in ``mistakes`` (``{wrong value:
    explanation}``). Hints unlock after the first try: guess first, then get help. With
    ``canvas=True`` the learner also explains the answer in words (:meth:`explain`);
    ``bridges`` adds neighbouring ideas of this practice to the Bridge check's words.
    """

    MAX_HINTS = 3

    def __init__(self, pid: str, question: str, *, answer, hints: Sequence[str] = (),
                 mistakes: dict | None = None, units: str = "", rel_tol: float = 1e-9,
                 canvas: bool = False, bridges: Sequence[str] = ()):
        self.id = check_id(pid)
        if not isinstance(question, str) or not question.strip():
            raise TypeError(f"question of {pid!r} must be a non-empty string, got {question!r}")
        hints = list(hints)
        if len(hints) > self.MAX_HINTS or not all(isinstance(h, str) and h for h in hints):
            raise ValueError(f"hints of {pid!r} must be at most {self.MAX_HINTS} non-empty strings, got {hints!r}")
        mistakes = dict(mistakes or {})
        if answer in mistakes:
            raise ValueError(f"mistakes of {pid!r} list the answer {answer!r} itself as a wrong value")
        if not isinstance(canvas, bool):
            raise TypeError(f"canvas of {pid!r} must be True or False, got {canvas!r}")
        bridges = tuple(bridges)
        if not all(isinstance(b, str) and b.strip() for b in bridges):
            raise ValueError(f"bridges of {pid!r} must be non-empty strings, got {bridges!r}")
        self.question, self.answer, self.hints, self.units = question, answer, hints, units
        self.mistakes, self.rel_tol = mistakes, rel_tol
        self.canvas, self.bridges = canvas, bridges
        self.hints_shown = 0
        self.tries: list[dict] = []
        self.solved = False
        self.text_answer = ""
        self.slots = {"try": Slot(), "canvas": Slot()}   # the first try's and the canvas's saved records
        self._widget = None

    def hint(self) -> str:
        """The next hint (after a first try); a note when none is left."""
        if not self.tries:
            return "Make a first guess and check it before asking for a hint."
        if self.hints_shown >= len(self.hints):
            return "No more hints: check your working against the last one."
        self.hints_shown += 1
        return f"Hint {self.hints_shown}/{len(self.hints)}: {self.hints[self.hints_shown - 1]}"

    def check(self, value, *, clicked: bool = False) -> tuple[bool, str]:
        """Check a value; return ``(right, message)`` and add the try to the record.

        The first try is saved with the notebook: in the running cell, or (``clicked``) in the
        slot under the practice.
        """
        got = parse_number(f"value for {self.id!r}", value) if isinstance(value, str) else value
        left = self.hints_shown < len(self.hints)
        try:
            check_value(self.id, got, self.answer, rel_tol=self.rel_tol,
                        hint="Ask for a hint." if left else "Recheck each step.",
                        misconceptions=self.mistakes.items())
            right, message = True, f"Right: {got} {self.units}".rstrip() + "."
        except AssertionError as err:
            right, message = False, str(err)
        self.solved = self.solved or right
        entry = {"id": self.id, "kind": "practice", "question": self.question, "choice": None,
                 "value": got, "answer": self.answer if right else None,
                 "outcome": "right" if right else "wrong", "hints_used": self.hints_shown, "time": now()}
        self.tries.append(entry)
        RECORD.append(entry)
        if len(self.tries) == 1:
            kind = "number" if isinstance(got, numbers.Real) and not isinstance(got, bool) else "text"
            self._save("try", saved.entry(self.id, kind, got, right, None if right else self._mistake(got)),
                       clicked)
        return right, message

    def explain(self, text: str, *, clicked: bool = False) -> tuple:
        """Put ``text`` on the answer canvas, save it with its checks; return the three :mod:`.canvas` checks."""
        if not self.canvas:
            raise ValueError(f"practice {self.id!r} has no answer canvas (build it with canvas=True)")
        result = self.readiness(text)
        self.text_answer = text
        RECORD.append({"id": self.id, "kind": "canvas", "question": self.question, "choice": None,
                       "value": text, "answer": None, "outcome": None,
                       "checks": _canvas.as_record(result), "time": now()})
        self._save("canvas", saved.entry(self.id, "text", text, None, None, checks=_canvas.as_record(result)),
                   clicked)
        return result

    def readiness(self, text: str) -> tuple:
        """The canvas checks of ``text`` (nothing is saved)."""
        return _canvas.checks(text, self.bridges)

    def _mistake(self, got) -> str | None:
        for wrong, why in self.mistakes.items():
            same = (math.isclose(float(got), float(wrong), rel_tol=self.rel_tol)
                    if isinstance(got, numbers.Real) and isinstance(wrong, numbers.Real) else got == wrong)
            if same:
                return why
        return None

    def _save(self, which: str, e: dict, clicked: bool) -> None:
        slot = self.slots[which]
        if clicked and slot.shown:
            slot.fill(e)
        else:
            slot.data = saved.bundle(e)
            saved.emit(e)

    @property
    def widget(self):
        if self._widget is None:
            self._widget = _PracticeView(self)
        return self._widget

    def text(self) -> str:
        how = (f"check({self.id!r}, <your value>), then hint({self.id!r}) for help")
        if self.canvas:
            how = f"explain({self.id!r}, '<your answer in words>'), then " + how
        return (f"PRACTICE [{self.id}] {self.question}\nNo widgets here? Run: from pagedkv_lib.lesson.gates "
                f"import check, explain, hint; {how}.")

    def shown_slots(self) -> list[Slot]:
        """The slots its saved records go into: its tries, and its answer canvas if it has one."""
        return [self.slots["try"]] + ([self.slots["canvas"]] if self.canvas else [])


def checks_html(result) -> str:
    """The canvas checks as a short HTML list: each says what it found, or what it looks for."""
    rows = []
    for c in result:
        # "not yet" in #595959: 7:1 on white (#777 was 4.48:1, under WCAG's 4.5 for text)
        mark, colour = ("&#10003;", "green") if c.ok else ("&#9675;", "#595959")
        rows.append(f"<li style='list-style:none;color:{colour}'>{mark} <b>{c.name}</b> "
                    f"{escape(c.line().split(' ', 1)[1])}</li>")
    return "<ul style='margin:0;padding-left:0.5em'>" + "".join(rows) + "</ul>"


class _PracticeView:
    def __init__(self, practice: Practice):
        import ipywidgets as w
        self.practice = practice
        self.input = w.Text(placeholder=f"your value {practice.units}".strip(), layout=w.Layout(width="14em"))
        self.check_button = w.Button(description="Check", button_style="primary")
        self.hint_button = w.Button(description="Hint")
        self.feedback = w.HTML("")
        self.hint_list = w.HTML("")
        self.status = access.announcer()   # reads out each Check's verdict and each hint
        self.check_button.on_click(self._on_check)
        self.hint_button.on_click(self._on_hint)
        question, units = w.HTML(f"<b>Practice.</b> {escape(practice.question)}"), w.Label(practice.units)
        access.name_by(self.input, question, units)
        parts = [question]
        self.canvas = self.readiness = None
        if practice.canvas:
            about = w.HTML("<b>Your answer canvas</b>: the answer, why it holds, and what it connects to")
            # width and max-width: the canvas narrows with the window (reflow at 320 CSS px, WCAG 1.4.10)
            self.canvas = w.Textarea(layout=w.Layout(width="44em", max_width="100%", height="6em"))
            access.name_by(self.canvas, about)
            self.readiness = w.HTML(checks_html(practice.readiness("")))
            self.canvas.observe(self._on_type, names="value")
            parts += [about, self.canvas, self.readiness]
        parts += [w.HBox([self.input, units, self.check_button, self.hint_button]),
                  self.feedback, self.hint_list, self.status]
        self.box = access.control(w.VBox(parts))
        click_delay.watch()

    def _on_type(self, change=None) -> None:
        self.readiness.value = checks_html(self.practice.readiness(self.canvas.value))

    def _on_check(self, _button=None) -> None:
        refused = click_delay.refusal("Check")   # a click that waited behind running cells
        if refused:
            self._tell(f"<i>{escape(refused)}</i>", refused)
            return
        note = ""
        if self.canvas is not None and self.canvas.value.strip():
            self.practice.explain(self.canvas.value, clicked=True)
            note = "Your canvas is saved. "
        if not str(self.input.value).strip():
            self._tell(f"<i>{note}Type a value to check it.</i>", f"{note}Type a value to check it.")
            return
        try:
            right, message = self.practice.check(self.input.value, clicked=True)
        except ValueError as err:
            right, message = False, str(err)
        colour = "green" if right else "#a00"
        self._tell(f"<span style='color:{colour}'>{escape(message)}</span>", message)

    def _tell(self, shown: str, said: str) -> None:
        """Show ``shown`` (HTML) as the Check's feedback and have a screen reader read ``said``."""
        self.feedback.value = shown
        access.announce(self.status, said)

    def _on_hint(self, _button=None) -> None:
        note = self.practice.hint()
        shown = self.practice.hints[:self.practice.hints_shown]
        items = "".join(f"<li>{escape(h)}</li>" for h in shown)
        extra = "" if note.startswith("Hint ") else f"<i>{escape(note)}</i>"
        self.hint_list.value = (f"<ol>{items}</ol>" if items else "") + extra
        access.announce(self.status, note)


def practice(pid: str, question: str, *, answer, hints: Sequence[str] = (), mistakes: dict | None = None,
             units: str = "", rel_tol: float = 1e-9, canvas: bool = False, bridges: Sequence[str] = ()) -> Practice:
    """Build (and register under ``pid``) a practice loop; display the returned :class:`Practice`."""
    p = Practice(pid, question, answer=answer, hints=hints, mistakes=mistakes, units=units, rel_tol=rel_tol,
                 canvas=canvas, bridges=bridges)
    PRACTICES[pid] = p
    return p


def exercise(pid: str, question: str, **live) -> Practice:
    """A lesson's practice: the cell gives its id, its question and the live objects it made.

    The answer, the hints (shown one at a time, on request, after a first try) and the known mistakes
    come from the practice's answer key (:mod:`.answer_keys`), so the notebook's source lists none of
    them. Display the returned :class:`Practice`.
    """
    key = practice_key(pid)
    return practice(pid, question, answer=key.answer(live), hints=key.hints, mistakes=key.mistakes(live),
                    units=key.units, canvas=key.canvas, bridges=key.bridges)


def _practice(pid: str) -> Practice:
    return lookup(PRACTICES, "practice", pid)


def check(pid: str, value) -> bool:
    """Text fallback of the Check button: print the verdict, return whether ``value`` is right."""
    right, message = _practice(pid).check(value)
    print(message)
    return right


def explain(pid: str, text: str) -> bool:
    """Text fallback of the answer canvas: save ``text``, print its three checks, return whether all pass."""
    result = _practice(pid).explain(text)
    for c in result:
        print(c.line())
    return all(c.ok for c in result)


def hint(pid: str) -> str:
    """Text fallback of the Hint button: print and return the next hint."""
    text = _practice(pid).hint()
    print(text)
    return text
