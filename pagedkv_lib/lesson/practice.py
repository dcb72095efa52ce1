"""The practice loop: try a value, then up to three hints one at a time, then try again.

Matching is :func:`pagedkv_lib.course.check_value`'s (the checker graded cells use), so a value
that equals a known wrong answer gets the message naming that mistake. Tries go into the
record of :mod:`pagedkv_lib.lesson.gates`.
"""
from __future__ import annotations

from typing import Sequence

from .record import RECORD, check_id, escape, lookup, now, parse_number, widget_bundle

PRACTICES: dict[str, "Practice"] = {}


class Practice:
    """Try a value, then ask for up to three hints one at a time, then try again.

    Each try goes through :func:`pagedkv_lib.course.check_value`, whose message names the
    mistake when the value matches a known wrong answer in ``mistakes`` (``{wrong value:
    explanation}``). Hints unlock after the first try: guess first, then get help.
    """

    MAX_HINTS = 3

    def __init__(self, pid: str, question: str, *, answer, hints: Sequence[str] = (),
                 mistakes: dict | None = None, units: str = "", rel_tol: float = 1e-9):
        self.id = check_id(pid)
        if not isinstance(question, str) or not question.strip():
            raise TypeError(f"question of {pid!r} must be a non-empty string, got {question!r}")
        hints = list(hints)
        if len(hints) > self.MAX_HINTS or not all(isinstance(h, str) and h for h in hints):
            raise ValueError(f"hints of {pid!r} must be at most {self.MAX_HINTS} non-empty strings, got {hints!r}")
        mistakes = dict(mistakes or {})
        if answer in mistakes:
            raise ValueError(f"mistakes of {pid!r} list the answer {answer!r} itself as a wrong value")
        self.question, self.answer, self.hints, self.units = question, answer, hints, units
        self.mistakes, self.rel_tol = mistakes, rel_tol
        self.hints_shown = 0
        self.tries: list[dict] = []
        self.solved = False
        self._widget = None

    def hint(self) -> str:
        """The next hint (after a first try); a note when none is left."""
        if not self.tries:
            return "Make a first guess and check it before asking for a hint."
        if self.hints_shown >= len(self.hints):
            return "No more hints: check your working against the last one."
        self.hints_shown += 1
        return f"Hint {self.hints_shown}/{len(self.hints)}: {self.hints[self.hints_shown - 1]}"

    def check(self, value) -> tuple[bool, str]:
        """Check a value; return ``(right, message)`` and add the try to the record."""
        from ..course import check_value  # here, not at the top: course imports nbconvert (seconds)
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
        return right, message

    @property
    def widget(self):
        if self._widget is None:
            self._widget = _PracticeView(self)
        return self._widget

    def text(self) -> str:
        return (f"PRACTICE [{self.id}] {self.question}\nNo widgets here? Run: from pagedkv_lib.lesson.gates "
                f"import check, hint; check({self.id!r}, <your value>), then hint({self.id!r}) for help.")

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return widget_bundle(self.text(), lambda: self.widget)


class _PracticeView:
    def __init__(self, practice: Practice):
        import ipywidgets as w
        self.practice = practice
        self.input = w.Text(placeholder=f"your value {practice.units}".strip(), layout=w.Layout(width="14em"))
        self.check_button = w.Button(description="Check", button_style="primary")
        self.hint_button = w.Button(description="Hint")
        self.feedback = w.HTML("")
        self.hint_list = w.HTML("")
        self.check_button.on_click(self._on_check)
        self.hint_button.on_click(self._on_hint)
        self.box = w.VBox([w.HTML(f"<b>Practice.</b> {escape(practice.question)}"),
                           w.HBox([self.input, w.Label(practice.units), self.check_button, self.hint_button]),
                           self.feedback, self.hint_list])

    def _on_check(self, _button=None) -> None:
        try:
            right, message = self.practice.check(self.input.value)
        except ValueError as err:
            right, message = False, str(err)
        colour = "green" if right else "#a00"
        self.feedback.value = f"<span style='color:{colour}'>{escape(message)}</span>"

    def _on_hint(self, _button=None) -> None:
        note = self.practice.hint()
        shown = self.practice.hints[:self.practice.hints_shown]
        items = "".join(f"<li>{escape(h)}</li>" for h in shown)
        extra = "" if note.startswith("Hint ") else f"<i>{escape(note)}</i>"
        self.hint_list.value = (f"<ol>{items}</ol>" if items else "") + extra


def practice(pid: str, question: str, *, answer, hints: Sequence[str] = (), mistakes: dict | None = None,
             units: str = "", rel_tol: float = 1e-9) -> Practice:
    """Build (and register under ``pid``) a practice loop; display the returned :class:`Practice`."""
    p = Practice(pid, question, answer=answer, hints=hints, mistakes=mistakes, units=units, rel_tol=rel_tol)
    PRACTICES[pid] = p
    return p


def _practice(pid: str) -> Practice:
    return lookup(PRACTICES, "practice", pid)


def check(pid: str, value) -> bool:
    """Text fallback of the Check button: print the verdict, return whether ``value`` is right."""
    right, message = _practice(pid).check(value)
    print(message)
    return right


def hint(pid: str) -> str:
    """Text fallback of the Hint button: print and return the next hint."""
    text = _practice(pid).hint()
    print(text)
    return text
