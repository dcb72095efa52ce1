"""The widgets of a prediction gate (ipywidgets 7.7 and 8): the question, an input, Commit, the reveal.

Handlers only ask the gate (:class:`.gates.Gate`); the gate decides what to show. For a keyboard and
a screen reader (:mod:`.access`): the choices are one radio group named by the question, a number box
is named by the question and its units, and after the commit the message beside Commit, a polite live
region, says the verdict and the reveal's first sentence and takes the focus.
"""
from __future__ import annotations

import re

from . import access, click_delay
from .views import escape


class GateView:
    """Widgets of a gate: ``box`` holds them, ``output`` receives the reveal."""

    def __init__(self, gate):
        import ipywidgets as w
        self.gate = gate
        self.question = w.HTML(f"<b>Predict.</b> {escape(gate.question)}")
        if gate.choices is not None:
            self.input = w.RadioButtons(options=[str(c) for c in gate.choices], value=None,
                                        layout=w.Layout(width="auto"))
        else:
            self.input = w.Text(placeholder=f"your number ({gate.units})", layout=w.Layout(width="14em"))
        self.units = w.Label(gate.units or "")
        access.name_by(self.input, self.question, self.units)
        self.button = w.Button(description="Commit", button_style="primary")
        self.message = access.verdict(w.HTML(""))
        self.output = w.Output()
        self.button.on_click(self._on_commit)
        self.box = access.control(w.VBox([self.question, w.HBox([self.input, self.units]),
                                          w.HBox([self.button, self.message]), self.output]))
        click_delay.watch()
        self._sync()

    def _say(self, text: str, unseen: str = "") -> None:
        """Put ``text`` beside Commit (``unseen``: more words for a screen reader only)."""
        self.message.value = escape(text) + (f" {access.hidden_text(unseen)}" if unseen else "")

    def _on_commit(self, _button=None) -> None:
        if self.gate.committed:  # click() ignores disabled: the state decides
            self._say("Already committed: a commit is final.")
            return
        value = self.input.value
        if value is None or value == "":
            self._say("Choose or type a prediction first.")
            return
        refused = click_delay.refusal("Commit")   # a click that waited behind running cells
        if refused:
            self._say(refused)
            return
        try:
            self.gate.commit(value, clicked=True)
        except ValueError as err:
            self._say(str(err))
            return
        self._sync()

    def _sync(self) -> None:
        done = self.gate.committed
        self.button.disabled = self.input.disabled = done
        if done:
            self._say(f"Committed. {self.gate.verdict()}", first_sentence(self.gate.reveal_items))
            access.committed(self.message)
            self.input.value = str(self.gate.prediction)


def first_sentence(items) -> str:
    """The first sentence of a reveal's first paragraph of prose (not a table, code or HTML), without
    Markdown's marks; empty if it has none."""
    for item in items:
        if not isinstance(item, str):
            continue
        text = item.strip()
        if not text or text.startswith(("|", "```", "<")):
            continue
        line = re.sub(r"[*_`$#>]", "", text.split("\n\n", 1)[0]).replace("\n", " ").strip()
        return re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
    return ""
