"""Text alternatives of the course's figures (WCAG 2.1, success criterion 1.1.1): what a figure says, as text.

Each plot function of the course calls :func:`describe` on the axes it drew: a one-line summary and
the data it drew as a table (column names, then rows). :func:`alternative` collects them for a whole
figure, with each axes' title as it stands when the figure is shown (a notebook may retitle it), and
:func:`figure_html` draws the figure as a PNG ``<img>`` whose ``alt`` is that summary, with the table
beside it in a ``<details>`` element a keyboard or screen reader can open. A described figure is its
own ``_repr_html_``, so a notebook shows it that way (the inline backend's PNG stays beside it).

Plain strings and the standard library only; no plotting library is imported here.
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from typing import Sequence

SCROLL = "pagedkv-scroll"
"""Class of a region that scrolls sideways on its own: a table or a preformatted block too wide for a narrow window."""

_KEY = "_pagedkv_text"  # the attribute of a matplotlib Axes that holds its description


@dataclass(frozen=True)
class AxesText:
    """What one axes shows: ``summary`` (a sentence), and its data as ``columns`` and ``rows`` of a table."""
    summary: str
    columns: tuple
    rows: tuple


def describe(ax, summary: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
    """Attach ``summary`` and the table ``columns`` x ``rows`` (the data drawn) to the matplotlib axes ``ax``."""
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError(f"summary must be a non-empty sentence, got {summary!r}")
    columns = tuple(str(c) for c in columns)
    rows = tuple(tuple(r) for r in rows)
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"rows[{i}] has {len(row)} cells, but there are {len(columns)} columns "
                             f"{columns!r}")
    setattr(ax, _KEY, AxesText(summary, columns, rows))
    fig = ax.figure
    # IPython asks an object for ``_repr_html_``: a notebook then shows this figure with its text. (A type
    # printer for Figure would not last: the inline backend drops them all when it starts.)
    fig._repr_html_ = lambda: figure_html(fig)


def described(fig) -> list:
    """``(axes title, AxesText)`` for each described axes of ``fig``, top to bottom as they were added."""
    found = []
    for ax in fig.axes:
        text = getattr(ax, _KEY, None)
        if text is not None:
            title = " ".join(t for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t)
            found.append((" ".join(title.split()), text))
    if getattr(fig, "_suptitle", None) is not None and found:
        found[0] = (f"{fig._suptitle.get_text()}: {found[0][0]}".strip(": "), found[0][1])
    return found


def alternative(fig) -> str:
    """The figure's short text alternative: each described panel's title and summary, one sentence each."""
    parts = []
    for title, text in described(fig):
        parts.append(f"{title}. {text.summary}" if title else text.summary)
    return " ".join(parts)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table_html(title: str, text: AxesText) -> str:
    """One panel's data as an HTML table: a caption, column headers with ``scope="col"``, a header cell per row."""
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in text.columns)
    body = []
    for row in text.rows:
        first, *rest = [html.escape(_cell(v)) for v in row]
        body.append(f'<tr><th scope="row">{first}</th>' + "".join(f"<td>{v}</td>" for v in rest) + "</tr>")
    caption = html.escape(title or text.summary)
    return (f'<table class="pagedkv-figure-data"><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def figure_html(fig, png: bytes | None = None) -> str | None:
    """The figure as ``<figure>``: its PNG with the alt text, and its data tables in a ``<details>``.

    ``png``: the figure already drawn as PNG bytes (default: drawn here at 100 dpi). None for a figure
    no course function described (it has no text of ours to carry)."""
    panels = described(fig)
    if not panels:
        return None
    if png is None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        png = buf.getvalue()
    src = base64.b64encode(png).decode("ascii")
    tables = "".join(scroll_region(table_html(title, text), f"Table: {title or text.summary}")
                     for title, text in panels)
    return (f'<figure class="pagedkv-figure" style="margin: 0">'
            f'<img src="data:image/png;base64,{src}" alt="{html.escape(alternative(fig))}" '
            f'style="max-width: 100%">'
            f'<details><summary>Data of this figure, as a table</summary>{tables}</details></figure>')


def scroll_region(inner: str, name: str) -> str:
    """HTML: ``inner`` in a region named ``name`` that scrolls sideways on its own and is a Tab stop, so the
    keyboard can scroll it (WCAG 2.1.1; 1.4.10 lets a data table or code keep its two dimensions)."""
    return (f'<div class="{SCROLL}" role="region" tabindex="0" aria-label="{html.escape(name, quote=True)}" '
            f'style="overflow-x: auto; max-width: 100%">{inner}</div>')
