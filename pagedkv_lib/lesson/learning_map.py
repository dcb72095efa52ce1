"""Where a lesson sits (Before / Now / Try / Next) and its opening lens: the first prediction, made before any figure."""
from __future__ import annotations

from . import gates
from .items import NEXT_TOPIC, PREREQUISITES, ROUTE, TRY, lesson as _lesson
from .record import set_notebook


def map_markdown(name: str) -> str:
    """The learning map of lesson ``name`` as a markdown table; the current section in bold."""
    les = _lesson(name)
    now = " → ".join(f"**{s}**" if s == les.section else s for s in ROUTE)
    return ("| | |\n|---|---|\n"
            f"| **Before** | {'; '.join(PREREQUISITES)} |\n"
            f"| **Now** | {now}: {les.title} |\n"
            f"| **Try** | {TRY[0].upper() + TRY[1:]} |\n"
            f"| **Next** | {NEXT_TOPIC}: what these memory counts do to time to first token, tokens per "
            "second and cost per request |")


def show(name: str):
    """Name this notebook for the saved record and display its learning map (text without a notebook)."""
    set_notebook(name)
    from IPython.display import Markdown
    return Markdown(map_markdown(name))


def lens(name: str) -> gates.Gate:
    """The lesson's opening prediction gate (its answer and explanation stay hidden until the commit)."""
    ln = _lesson(name).lens
    return gates.predict(ln.id, ln.question, choices=list(ln.choices), answer=ln.answer,
                         mistakes=ln.mistakes, reveal=[ln.reveal])
