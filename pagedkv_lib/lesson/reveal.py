"""What a gate shows after its commit: text as Markdown, figures as PNG images (with their text
alternative where a course function described them), drawn only when revealed."""
from __future__ import annotations

import io
from typing import Any

from ..figure_text import alternative, figure_html
from .access import markdown
from .views import FigureWithText


def figure_of(item):
    """The matplotlib figure of a figure or axes item, else None."""
    fig = item if hasattr(item, "savefig") else getattr(item, "figure", None)
    return fig if hasattr(fig, "savefig") else None


def rendered(item) -> Any:
    """A reveal item as something IPython can display: text as Markdown, a figure as a PNG image.

    A callable item is called first (so a figure is drawn only when it is revealed)."""
    import matplotlib.pyplot as plt
    from IPython.display import Image
    if callable(item):
        item = item()
    fig = figure_of(item)
    if fig is not None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        html_text = figure_html(fig, buf.getvalue())   # None unless a course function described it
        alt = alternative(fig)
        plt.close(fig)
        if html_text is not None:
            return FigureWithText(buf.getvalue(), html_text, alt)
        return Image(data=buf.getvalue(), format="png")
    return markdown(item) if isinstance(item, str) else item


def hold_figures(items) -> list:
    """Close figures handed to a reveal, so the inline backend does not show them at cell end."""
    import matplotlib.pyplot as plt
    items = list(items)
    for item in items:
        if figure_of(item) is not None:
            plt.close(figure_of(item))
    return items
