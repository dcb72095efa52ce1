"""Plain-text tables of the simulator's summary rows (what notebooks and the command line print)."""
from __future__ import annotations


def format_table(rows: list[dict], columns=None, headers: dict | None = None) -> str:
    """A plain-text table of ``rows`` (dicts) with the given ``columns`` (default: all keys of the first).

    Fractions whose column name contains ``share`` or ends in ``saving`` print as percents;
    ``headers`` maps a column to a shorter heading; a missing value prints as ``-``.
    """
    rows = list(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"rows[{i}] must be a dict (a summary row), got {type(row).__name__}")
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())
    headers = headers or {}

    def cell(name, value):
        if value is None:
            return "-"
        if isinstance(value, float) and ("share" in name or name.endswith("saving")):
            return f"{100 * value:.1f}%"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    body = [[cell(c, r.get(c)) for c in columns] for r in rows]
    titles = [headers.get(c, c) for c in columns]
    widths = [max(len(t), *(len(b[i]) for b in body)) for i, t in enumerate(titles)]
    lines = ["  ".join(t.rjust(w) for t, w in zip(titles, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)
