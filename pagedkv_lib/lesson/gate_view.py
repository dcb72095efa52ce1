"""The widgets of a prediction gate (ipywidgets 7.7 and 8): the question, an input, Commit, the reveal.

Handlers only ask the gate (:class:`.gates.Gate`); the gate decides what to show.
"""
from __future__ import annotations

from . import click_delay
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
        self.button = w.Button(description="Commit", button_style="primary")
        self.message = w.Label("")
        self.output = w.Output()
        self.button.on_click(self._on_commit)
        self.box = w.VBox([self.question, w.HBox([self.input, self.units]),
                           w.HBox([self.button, self.message]), self.output])
        click_delay.watch()
        self._sync()

    def _on_commit(self, _button=None) -> None:
        if self.gate.committed:  # click() ignores disabled: the state decides
            self.message.value = "Already committed: a commit is final."
            return
        value = self.input.value
        if value is None or value == "":
            self.message.value = "Choose or type a prediction first."
            return
        refused = click_delay.refusal("Commit")   # a click that waited behind running cells
        if refused:
            self.message.value = refused
            return
        try:
            self.gate.commit(value, clicked=True)
        except ValueError as err:
            self.message.value = str(err)
            return
        self._sync()

    def _sync(self) -> None:
        done = self.gate.committed
        self.button.disabled = self.input.disabled = done
        if done:
            self.message.value = "Committed."
            self.input.value = str(self.gate.prediction)
