"""What the class predicted before each reveal: one report section per prediction gate.

Per gate: how many committed, the share right, the distribution (bar chart for choices and texts,
histogram for numbers, ``predictions/<gate>.png``), the three most common wrong answers with the
misconception each matches, and, where the record names a question, the mean later score on it of those
who predicted right and of those who predicted wrong (from ``autograded/``). No learner is named unless
``names=True``. The records come from :mod:`.predictions`; every learner-written string is shown
through :func:`safe`.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from ..course_layout import AUTOGRADED
from ..intake.notebook_cleaning import cell_grade_id, is_test
from .prediction_records import ID, Prediction, declared_gates, read_predictions, shown

LESSONS_HANDED_IN = "submitted-lessons"
"""Where ``make collect-lessons`` puts the lessons learners hand in on a hub (``<student>/lessons/*.ipynb``)."""
#: What could make learner text a link, image, tag, entity, emphasis, code, maths or table cell in Markdown
#: (``:`` and ``@`` stop autolinks); CommonMark shows any of them literally after a backslash.
_PUNCTUATION = frozenset("!#$&()*:<>@[\\]_`{|}~")


def safe(value) -> str:
    """``value`` as Markdown that shows it literally: each mark in :data:`_PUNCTUATION` backslash-escaped."""
    text = value if isinstance(value, str) else shown(value)
    return "".join("\\" + c if c in _PUNCTUATION else c for c in text)


def _id(text: str) -> str:
    """A gate, question, assignment or student id as is when it has only id characters, else escaped."""
    return text if ID.fullmatch(text) else safe(text)


def question_scores(autograded_dir) -> dict:
    """``{(student, assignment, grade id): (score, points)}`` of every autograded test cell (full points
    when the cell raised nothing, else 0)."""
    out = {}
    for path in sorted(Path(autograded_dir).glob("*/*/*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            if is_test(cell):
                points = float(cell["metadata"]["nbgrader"].get("points", 0) or 0)
                failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
                out[(path.parent.parent.name, path.parent.name, cell_grade_id(cell))] = (0.0 if failed else points, points)
    return out


def _graded(question: str, student: str, assignment: str, scores: dict):
    """The score entry of ``question``: its own test cell, or for an answer id ``qN_answer`` ``qN_tests``."""
    for gid in (question, re.sub(r"_answer$", "_tests", question)):
        if (student, assignment, gid) in scores:
            return gid, scores[(student, assignment, gid)]
    return None, None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


VERDICT_STYLE = {True: ("#004488", "", "right"), False: ("#D55E00", "xx", "wrong"), None: ("#BBBBBB", "..", "no verdict")}
"""Fill, hatching and name of each verdict in the answer figures: blue and vermilion stay apart for
colour-blind readers, and the hatching (and, on bars, the verdict written beside each answer) tells
them apart without colour."""


def _figure(path: Path, gate: str, preds: list[Prediction]) -> str:
    """A bar chart of the answers (a histogram for numbers), styled by the record's verdict; returns its
    text alternative (the answers and their counts), as Markdown that shows learner text literally."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    colour = {v: style[0] for v, style in VERDICT_STYLE.items()}
    hatch = {v: style[1] for v, style in VERDICT_STYLE.items()}
    label = {v: style[2] for v, style in VERDICT_STYLE.items()}
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    if preds[0].kind == "number":
        values = [p.value for p in preds]
        lo, hi = min(values), max(values)
        groups = [(v, [p.value for p in preds if p.right is v]) for v in (True, False, None)]
        groups = [(v, xs) for v, xs in groups if xs]
        _, _, bars = ax.hist([xs for _, xs in groups], bins=np.linspace(lo, hi if hi > lo else lo + 1, 16),
                             stacked=True, color=[colour[v] for v, _ in groups], edgecolor="white")
        for (v, _), group in zip(groups, bars if len(groups) > 1 else [bars]):
            for bar in group:
                bar.set_hatch(hatch[v])
        ax.set(xlabel="predicted value", ylabel="learners")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        present = [v for v, _ in groups]
        tally = Counter((shown(p.value), p.right) for p in preds).most_common(8)
    else:
        counts = Counter(p.value for p in preds).most_common(8)
        verdict = {v: Counter(p.right for p in preds if p.value == v).most_common(1)[0][0] for v, _ in counts}
        # learner text as a label: "$" would start matplotlib's mathtext, so it is escaped
        labels = [(v if len(v) <= 24 else v[:23] + "…").replace("$", r"\$") + f" ({label[verdict[v]]})"
                  for v, _ in counts]
        bars = ax.barh(range(len(counts)), [n for _, n in counts], color=[colour[verdict[v]] for v, _ in counts],
                       edgecolor="white")
        for bar, (v, _) in zip(bars, counts):
            bar.set_hatch(hatch[verdict[v]])
        ax.set_yticks(range(len(counts)), labels)
        ax.invert_yaxis()
        ax.set(xlabel="learners")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        present = sorted(set(verdict.values()), key=lambda v: (v is None, v is False))
        tally = [((v, verdict[v]), n) for v, n in counts]
    ax.legend(handles=[Patch(fc=colour[v], ec="white", hatch=hatch[v], label=label[v]) for v in present],
              frameon=False, fontsize=8)
    ax.set_title(f"{gate}: {len(preds)} learners", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return (f"Answers of {_count(len(preds), 'learner')} at {_id(gate)}: "
            + "; ".join(f"{safe(' '.join(value.split()))}, {_count(n, 'learner')} ({label[right]})"
                        for (value, right), n in tally))


def _gate_section(gate: str, assignment: str, preds: list[Prediction], scores: dict, fig_dir: Path,
                  names: bool) -> list[str]:
    lines = [f"### {_id(gate)} ({_id(assignment)})", ""]
    if not preds:
        return lines + ["Nobody committed a prediction here.", ""]
    judged = [p for p in preds if p.right is not None]
    right = sum(p.right for p in judged)
    share = (f"{100 * right / len(judged):.0f}% right ({right} of {len(judged)} with a verdict)" if judged
             else "no verdicts")
    lines += [f"{_count(len(preds), 'learner')} committed; {share}.", ""]
    path = fig_dir / f"{_slug(assignment)}--{_slug(gate)}.png"
    alt = _figure(path, gate, preds)
    lines += [f"![{alt}]({fig_dir.name}/{path.name})", ""]
    wrong = Counter(p.value if p.kind != "number" else shown(p.value) for p in preds if p.right is False)
    if wrong:
        lines += ["| most common wrong answers | learners | misconception it matches |", "|---|---|---|"]
        for value, n in wrong.most_common(3):
            mis = Counter(p.misconception for p in preds if p.right is False and
                          (p.value if p.kind != "number" else shown(p.value)) == value and p.misconception)
            lines.append(f"| {safe(value)} | {n} | {safe(mis.most_common(1)[0][0]) if mis else 'none known'} |")
        lines.append("")
    lines += _score_link(preds, scores)
    if names:
        lines += ["| learner | prediction | right |", "|---|---|---|"]
        lines += [f"| {_id(p.student)} | {safe(p.value)} | {'-' if p.right is None else ('yes' if p.right else 'no')} |"
                  for p in preds] + [""]
    return lines


def _score_link(preds: list[Prediction], scores: dict) -> list[str]:
    asked = Counter(p.question for p in preds if p.question)
    if not asked:
        return []
    question = asked.most_common(1)[0][0]
    rows, gid, points = {True: [], False: []}, None, 0.0
    for p in preds:
        if p.right is None or p.question != question:
            continue
        found, entry = _graded(question, p.student, p.assignment, scores)
        if entry:
            gid, points = found, entry[1]
            rows[p.right].append(entry[0])
    if gid is None:
        return [f"Later score on {question}: not autograded yet.", ""]
    out = [f"| prediction | learners | mean later score on {gid} (of {points:g}) |", "|---|---|---|"]
    for verdict, label in ((True, "right"), (False, "wrong")):
        xs = rows[verdict]
        out.append(f"| {label} | {len(xs)} | {sum(xs) / len(xs):.2f} |" if xs else f"| {label} | 0 | - |")
    return out + [""]


def _one_kind(group: list[Prediction], bad: Counter) -> list[Prediction]:
    """The gate's records of its most common kind; others (a forged kind) are counted in ``bad``."""
    if not group:
        return group
    kind = Counter(p.kind for p in group).most_common(1)[0][0]
    kept = [p for p in group if p.kind == kind or {p.kind, kind} == {"choice", "text"}]
    bad["kind differs from the gate's other records"] += len(group) - len(kept)
    return kept


def prediction_section(course_dir, out_dir, releases: dict | None = None, names: bool = False) -> list[str]:
    """The report's Markdown lines for every gate; its figures go to ``<out_dir>/predictions/``."""
    root = Path(course_dir)
    preds, bad = read_predictions(root / "submitted")
    lessons, lessons_bad = read_predictions(root / LESSONS_HANDED_IN)   # lessons handed in on a hub (ungraded)
    preds, bad = preds + lessons, bad + lessons_bad
    by_gate: dict[tuple, list] = defaultdict(list)
    for assignment, release in (releases or {}).items():
        for gate in declared_gates(release):
            by_gate[(assignment, gate)]
    for p in preds:
        by_gate[(p.assignment, p.gate)].append(p)
    by_gate = {key: _one_kind(group, bad) for key, group in sorted(by_gate.items())}
    kept = [p for group in by_gate.values() for p in group]
    lines = ["## Predictions before the reveal", ""]
    lines += [f"{_count(len(kept), 'committed prediction')} from {_count(len({p.student for p in kept}), 'learner')} "
              f"at {_count(len(by_gate), 'gate')}."
              + (" Ignored: " + ", ".join(f"{n} {safe(why)}" for why, n in sorted(bad.items())) + "." if bad else ""),
              ""]
    if not by_gate:
        return lines + ["No prediction was committed in the handed-in notebooks.", ""]
    fig_dir = Path(out_dir) / "predictions"
    fig_dir.mkdir(parents=True, exist_ok=True)
    scores = question_scores(root / AUTOGRADED) if (root / AUTOGRADED).is_dir() else {}
    for (assignment, gate), group in by_gate.items():
        lines += _gate_section(gate, assignment, group, scores, fig_dir, names)
    return lines


def write_html(markdown_path) -> Path:
    """``report.html`` beside ``report.md``: the same report, with raw HTML in it escaped."""
    import mistune
    path = Path(markdown_path)
    body = mistune.create_markdown(escape=True, plugins=["table"])(path.read_text(encoding="utf-8"))
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Class report</title><style>"
            "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}td{overflow-wrap:anywhere}"
            "img{max-width:100%}"
            "</style></head><body>" + body + "</body></html>\n")
    out = path.with_suffix(".html")
    out.write_text(page, encoding="utf-8")
    return out
