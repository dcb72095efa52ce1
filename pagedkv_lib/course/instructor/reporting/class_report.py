"""What the instructor reads after grading: a class report.

The report (``report/report.md`` with ``scores.png`` and ``pass_rates.png``) shows the score histogram,
each question's pass rate, the misconception messages the class hit most per question (counted from
the failure messages in ``autograded/``), and the status table, so the ideas the class has not got stand out.
"""
from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

from ..course_layout import AUTOGRADED, GRADES_CSV, SOURCE, SUBMITTED
from ..intake.notebook_cleaning import cell_grade_id, is_test
from .grades_export import read_statuses
from .learner_feedback import question_titles
from .prediction_report import prediction_section, safe, write_html
from .similar_answers import similar_answers

#: Status words that flag an attempt on the grader (see intake/prepare_submission.py and grading/).
FLAG_WORDS = ("tampered", "reaches outside", "library implementation", "forged record", "leaked solution")


def _message(evalue: str) -> str:
    """The explanation part of a check's failure message (the learner's own value cut away)."""
    return evalue.split(" is not right. ", 1)[-1].strip() or evalue.strip()


def question_results(autograded_dir: Path) -> dict:
    """``{(assignment, test id): {"passed": n, "total": n, "messages": Counter}}`` over every notebook."""
    out = defaultdict(lambda: {"passed": 0, "total": 0, "messages": Counter()})
    for nb_path in sorted(Path(autograded_dir).glob("*/*/*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if not is_test(cell):
                continue
            res = out[(nb_path.parent.name, cell_grade_id(cell))]
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            res["total"] += 1
            res["passed"] += not errors
            res["messages"].update(_message(f"{e.get('ename')}: {e.get('evalue', '')}"
                                            if e.get("ename") not in ("AssertionError", "CheckFailed") else e.get("evalue", ""))
                                   for e in errors[:1])
    return dict(out)


def _details(result) -> str:
    """A result's details for one cell of a Markdown table: cut at 300 characters, no column breaks."""
    return " | ".join(result.details)[:300].replace("|", "/")


def _figures(out_dir: Path, scores: list[float], results: dict, titles: dict) -> tuple[str, str]:
    """``scores.png`` and ``pass_rates.png``; returns their text alternatives, which carry the same numbers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(scores, bins=min(20, max(5, len(set(scores)))), color="#004488", edgecolor="white")
    ax.set(xlabel="score (points)", ylabel="students", title="Class scores")
    fig.tight_layout()
    fig.savefig(out_dir / "scores.png", dpi=110)
    plt.close(fig)
    keys = sorted(results)
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(keys) + 1))
    rates = [100 * results[k]["passed"] / max(1, results[k]["total"]) for k in keys]
    names = [titles.get(k[1], k[1]).split(":")[0] for k in keys]
    ax.barh(names, rates, color="#004488")
    ax.set(xlim=(0, 100), xlabel="students passing (%)", title="Pass rate per question")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out_dir / "pass_rates.png", dpi=110)
    plt.close(fig)
    spread = Counter(scores)
    scores_alt = (f"Histogram of the class scores, {len(scores)} grade rows: "
                  + "; ".join(f"{s:g} points, {n}" for s, n in sorted(spread.items())))
    rates_alt = "Pass rate per question: " + "; ".join(f"{safe(n)} {r:.0f}%" for n, r in zip(names, rates))
    return scores_alt, rates_alt


def report(course_dir=".", grades_csv: str = GRADES_CSV, out: str = "report", releases: dict | None = None,
           top: int = 3, names: bool = False) -> Path:
    """Write ``<out>/report.md`` and its two figures from ``grades_csv``, ``autograded/`` and the last run's
    results (``notebook_result.py``)."""
    root = Path(course_dir)
    out_dir = root / out
    out_dir.mkdir(exist_ok=True)
    grades = list(csv.DictReader((root / grades_csv).open(encoding="utf-8")))
    scores = [float(r["raw_score"]) for r in grades]
    results = question_results(root / AUTOGRADED)
    titles = {gid: t for rel in (releases or {}).values() for gid, t in question_titles(rel).items()}
    scores_alt, rates_alt = _figures(out_dir, scores, results, titles)
    lines = ["# Class report", "", f"{len(grades)} grade rows; median score "
             f"{sorted(scores)[len(scores) // 2] if scores else 0:g}.", "", f"![{scores_alt}](scores.png)", "",
             "## Questions", "", f"![{rates_alt}](pass_rates.png)", "",
             "| question | passed | most common failure messages (count) |", "|---|---|---|"]
    for key in sorted(results):
        res = results[key]
        common = "<br>".join(f"{n}× {m[:160]}" for m, n in res["messages"].most_common(top)) or "-"
        lines.append(f"| {titles.get(key[1], key[1])} | {res['passed']}/{res['total']} | {common.replace('|', '/')} |")
    sources = {a: json.loads((root / SOURCE / a / f"{a}.ipynb").read_text(encoding="utf-8"))
               for a in (releases or {}) if (root / SOURCE / a / f"{a}.ipynb").exists()}
    pairs = similar_answers(root / SUBMITTED, releases or {}, sources)
    lines += ["", "## Answers identical to another student's", "",
              "Long answers with the same code (comments and spacing aside), not the stub or the reference; "
              "who copied from whom, if anyone, is for you to judge.", ""]
    lines += ["| assignment | student | student | identical answers |", "|---|---|---|---|"] + [
        f"| {a} | {s1} | {s2} | {', '.join(shared)} |" for a, s1, s2, shared in pairs] if pairs else ["None."]
    statuses = read_statuses(root)
    flagged = [(k, r) for k, r in sorted(statuses.items()) if any(w in r.label for w in FLAG_WORDS)]
    lines += ["", "## Flags", "", "Attempts on the grader: each names what the student's answer cells reached for, "
              "forged or doubled records, and calls to the library's own implementation of a graded function.", ""]
    lines += ["| student | assignment | flags | details |", "|---|---|---|---|"] + [
        f"| {s1} | {a} | {r.label} | {_details(r)} |" for (s1, a), r in flagged] if flagged else ["None."]
    lines += ["", "## Status", "", "| student | assignment | status | details |", "|---|---|---|---|"]
    for (student, assignment), result in sorted(statuses.items()):
        lines.append(f"| {student} | {assignment} | {result.label} | {_details(result)} |")
    lines += ["", *prediction_section(root, out_dir, releases, names)]  # names: learners named only if asked
    (out_dir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_html(out_dir / "report.md")
    return out_dir / "report.md"
