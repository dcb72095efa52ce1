"""How a lesson object shows itself: a widget where a front end can draw one, its text everywhere."""
from __future__ import annotations

import html


def escape(text: str) -> str:
    """Text made safe to put inside an HTML widget."""
    return html.escape(text)


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (so display outputs reach a notebook)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def widget_bundle(text: str, view) -> dict:
    """A display bundle: the widget view (``view().box``) where a front end can render it, ``text`` everywhere."""
    data = {"text/plain": text}
    try:
        model_id = view().box.model_id
    except Exception:  # no kernel to talk to: the text form is all there is
        return data
    data["application/vnd.jupyter.widget-view+json"] = {
        "version_major": 2, "version_minor": 0, "model_id": model_id}
    return data


class Shown:
    """Display for a lesson object with ``text()``, a ``widget`` view and ``shown_slots()``: its text
    everywhere, its widget where a front end can draw one, then the slots its saved records go into."""

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return widget_bundle(self.text(), lambda: self.widget)

    def _ipython_display_(self):
        from IPython.display import display
        display(self._repr_mimebundle_(), raw=True)
        for slot in self.shown_slots():
            slot.show()


class FigureWithText:
    """A drawn figure for IPython's display: the PNG, and (where a front end renders HTML) the same
    image with its text alternative and data table (:func:`pagedkv_lib.figure_text.figure_html`)."""

    def __init__(self, png: bytes, html_text: str, alt: str):
        self.png, self.html, self.alt = png, html_text, alt

    def _repr_mimebundle_(self, include=None, exclude=None):
        import base64
        return {"text/html": self.html, "image/png": base64.b64encode(self.png).decode("ascii"),
                "text/plain": f"<figure: {self.alt}>"}

