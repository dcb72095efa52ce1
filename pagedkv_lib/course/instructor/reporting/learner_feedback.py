"""Feedback pages for learners: the failure messages written for them, nothing of the hidden tests.

nbgrader writes ``feedback/<student>/<assignment>/<notebook>.html``; the preprocessors below run inside
it (see ``nbgrader_config.py``) and :func:`polish` then edits each page: long lines wrap, each test in the
summary is named by its question, and no script is fetched from a CDN (math is shown as plain text).
"""
from __future__ import annotations

import html as html_lib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from ....errors import PagedKVError
from ...protocol import PASS_MIME
from ..course_layout import AUTOGRADED, FEEDBACK, SUBMITTED, cached_releases, nbgrader
from ..intake.collect_notebooks import release_notebooks

_WRAP_CSS = ("<style>pre, .output_text pre, .output_error pre { white-space: pre-wrap; "
             "overflow-wrap: anywhere; }</style>")
# WCAG 2.1 AA on nbgrader's feedback page (Bootstrap 3 and Pygments' default colours, checked by axe-core in
# tests/browser/test_accessibility.py): text at least 4.5:1 on the code background (#f5f5f5) and on white, the
# panel headings' "(Top)" links white on blue (4.5:1), and links inside text underlined.
_CONTRAST_CSS = "<style>" + " ".join(f"{sel} {{ {rule} !important; }}" for sel, rule in (
    ("a", "color: #23527c"), ("a.anchor-link, p a, li a", "text-decoration: underline"),
    ("div.nbgrader_cell .panel-heading a", "color: #fff"),
    ("div.nbgrader_cell .panel-heading a", "text-decoration: underline"),
    (".highlight .c, .highlight .ch, .highlight .cm, .highlight .c1, .highlight .cs, .highlight .cpf",
     "color: #2b5a5a"),
    (".highlight .ow, .highlight .nd", "color: #7a1fb8"), (".highlight .ne", "color: #a3302a"),
    (".highlight .nl", "color: #5c5c00"), (".highlight .cp", "color: #7a4f00"), (".highlight .gi", "color: #006400"),
    (".highlight .go, .highlight .ni", "color: #555"), (".highlight .se", "color: #86491a"),
    (".highlight .si", "color: #84475f"))) + "</style>"
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.DOTALL)
_TEX = [(r"\\mathrm\{([^{}]*)\}", r"\1"), (r"\\text\{([^{}]*)\}", r"\1"), (r"\\lceil", "⌈"),
        (r"\\rceil", "⌉"), (r"\\sum_i", "Σᵢ "), (r"\\sum", "Σ"), (r"\\times", "×"), (r"\\bmod", "mod"),
        (r"\\dots", "…"), (r"\\,", " "), (r"_\{([^{}]*)\}", r"_\1"), (r"\\([A-Za-z]+)", r"\1"), (r"[{}]", "")]


def tex_as_text(tex: str) -> str:
    """Inline TeX as readable plain text: ``C_{\\mathrm{tok}} = 2\\,L`` becomes ``C_tok = 2 L``."""
    for pattern, repl in _TEX:
        tex = re.sub(pattern, repl, tex)
    return re.sub(r"\s+", " ", tex).strip()


def concise_errors(nb):
    """Cut every error output of a notebook down to its last line (``AssertionError: message``).

    Feedback should tell learners what went wrong, not show the hidden test lines a traceback quotes.
    """
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
            out.get("data", {}).pop(PASS_MIME, None)  # keep the marker's text, not its grader payload
    return nb


class ConciseErrors(Preprocessor):
    """nbconvert preprocessor applying :func:`concise_errors` (used for feedback)."""

    enabled = Bool(True)  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb, resources):
        return concise_errors(nb), resources


class PlainMath(Preprocessor):
    """Write markdown math as plain text in code spans, so the page needs no MathJax (and no CDN)."""

    enabled = Bool(True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = _MATH.sub(lambda m: f"`{tex_as_text(m.group(1) or m.group(2))}`", cell.source)
        return cell, resources


def question_titles(release: dict) -> dict:
    """``{test grade_id: "Q1 (2 points): ..."}``: the heading above each test cell of a released notebook."""
    titles, heading = {}, ""
    for cell in release["cells"]:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "markdown" and source.lstrip().startswith("#"):
            heading = source.strip().splitlines()[0].lstrip("#").strip()
        if meta.get("grade") and meta.get("grade_id"):
            titles[meta["grade_id"]] = tex_as_text(heading) if heading else meta["grade_id"]
    return titles


def polish(page: str, titles: dict) -> str:
    """Wrap long lines, name tests by question, drop every external script (MathJax's CDN), and meet
    WCAG 2.1 AA contrast and the page's language (:data:`_CONTRAST_CSS`)."""
    page = re.sub(r"<script[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>", "", page)
    page = re.sub(r"<script[^>]*>(?:(?!</script>).)*MathJax(?:(?!</script>).)*</script>", "", page, flags=re.DOTALL)
    for gid, title in titles.items():
        page = page.replace(f'<a href="#{gid}">Test cell</a>', f'<a href="#{gid}">{html_lib.escape(title)}</a>')
        page = page.replace(f'<a href="#{gid}">Written response</a>',
                            f'<a href="#{gid}">{html_lib.escape(title)} (written)</a>')
    page = re.sub(r"<html(?![^>]*\blang=)", '<html lang="en"', page, count=1)   # for screen readers
    # the score is the page's title: an H1 (nbgrader draws an H4 above the notebook's own H1s, which
    # puts the heading levels out of order for a screen reader's list of headings)
    page = score_as_h1(page)
    return page.replace("</head>", _WRAP_CSS + _CONTRAST_CSS + _SCORE_CSS + "\n</head>", 1)


class _ScoreHeading(HTMLParser):
    """Where the page's score heading is: the first ``<h4>`` whose own text holds "(Score: ", read as HTML (a
    pattern over the text could run from one heading's start tag to another's end)."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.starts = [0]
        for line in page.split("\n"):
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.open, self.text, self.found = None, [], None
        self.feed(page)
        self.close()

    def _offset(self) -> int:
        line, col = self.getpos()
        return self.starts[line - 1] + col

    def handle_starttag(self, tag, attrs):
        if tag == "h4" and self.found is None:
            at = self._offset()
            self.open, self.text = (at, at + len(self.get_starttag_text())), []

    def handle_data(self, data):
        if self.open is not None:
            self.text.append(data)

    def handle_endtag(self, tag):
        if tag == "h4" and self.open is not None:
            if self.found is None and "(Score: " in "".join(self.text):
                self.found = (*self.open, self._offset())
            self.open = None


def score_as_h1(page: str) -> str:
    """``page`` with its score heading (nbgrader's ``<h4>``) made its ``<h1 class="feedback-score">``; as it was
    if it has none."""
    found = _ScoreHeading(page).found
    if found is None:
        return page
    start_tag, inner_start, end_tag = found
    return (page[:start_tag] + '<h1 class="feedback-score">' + page[inner_start:end_tag] + "</h1>"
            + page[page.index(">", end_tag) + 1:])


_SCORE_CSS = "<style>h1.feedback-score { font-size: 18px; margin: 10px 0; }</style>"
"""The score heading keeps the size nbgrader gave it as an H4."""


#: The line a feedback page opens with when the notebook was graded on other numbers than it showed.
OTHER_NUMBERS = ("Your answers were checked on your own numbers, which the set-up cell below shows; the notebook "
                 "you handed in showed other numbers, so answers worked from those may be marked wrong.")
_NUMBER_ROW = re.compile(r"^\s*V\.\w+\s*=.*$", re.M)


def shown_numbers(nb: dict) -> list[str]:
    """The ``V.name = value`` rows the set-up cell's output shows (the learner's numbers); [] if none."""
    for cell in nb.get("cells", []):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
            text = "".join(t if isinstance(t, str) else "".join(t) for out in cell.get("outputs", [])
                           for t in [out.get("data", {}).get("text/plain", out.get("text", ""))])
            return [row.strip() for row in _NUMBER_ROW.findall(text)]
    return []


def numbers_note(submitted: dict, graded: dict) -> str | None:
    """:data:`OTHER_NUMBERS` when the handed-in notebook showed numbers the graded copy (run on the learner's
    own key) does not: a key left out, or another's pasted. It names nobody, not even whose key it was."""
    shown, own = shown_numbers(submitted), shown_numbers(graded)
    return OTHER_NUMBERS if shown and own and shown != own else None


def _numbers_note_for(page: Path, course_dir: Path) -> str | None:
    """The note for the feedback page ``feedback/<student>/<assignment>/<notebook>.html``, from its notebooks."""
    student, assignment, name = page.parent.parent.name, page.parent.name, page.stem + ".ipynb"
    copies = [Path(course_dir) / folder / student / assignment / name for folder in (SUBMITTED, AUTOGRADED)]
    try:
        submitted, graded = (json.loads(path.read_text(encoding="utf-8")) for path in copies)
    except (OSError, ValueError):  # no copy to compare (a page for a notebook the grader made): no note
        return None
    return numbers_note(submitted, graded)


def polish_all(feedback_dir: Path, releases: dict, course_dir: Path | None = None, pages=None) -> list[Path]:
    """Polish every ``feedback/<student>/<assignment>/*.html`` page in place (or only ``pages``); return the pages.
    With ``course_dir``, a page whose notebook was graded on other numbers than it showed says so under its title."""
    pages = sorted(Path(feedback_dir).glob("*/*/*.html") if pages is None else pages)
    for page in pages:
        release = releases.get(page.parent.name)
        titles = question_titles(release) if release else {}
        text = polish(page.read_text(encoding="utf-8"), titles)
        note = _numbers_note_for(page, course_dir) if course_dir is not None else None
        if note:
            text = text.replace("</h1>", f'</h1>\n<p class="numbers-note" role="note">{html_lib.escape(note)}</p>', 1)
        page.write_text(text, encoding="utf-8")
    return pages


def feedback(course_dir=".") -> list[Path]:
    """Write HTML feedback for every autograded submission into ``feedback/``; return the pages.

    One learner's notebook that nbgrader cannot turn into a page costs that learner's page only: every
    other page is still written and polished, then PagedKVError names each learner left without one."""
    root = Path(course_dir)
    graded = sorted({(p.parent.parent.name, p.parent.name) for p in (root / AUTOGRADED).glob("*/*/*.ipynb")})
    names, errors = sorted({a for _, a in graded}), []
    # a page left from an earlier run is not this run's: it neither stands for a page nbgrader failed to
    # write now nor is polished a second time (its styles would be added again)
    earlier = {p: p.stat().st_mtime_ns for p in (root / FEEDBACK).glob("*/*/*.html")}
    for name in names:
        try:
            nbgrader("generate_feedback", name, "--force", course_dir=root)
        except PagedKVError as err:   # nbgrader goes on past a bad notebook, then exits non-zero
            errors.append(str(err)[-1500:])
    written = [p for p in (root / FEEDBACK).glob("*/*/*.html") if earlier.get(p) != p.stat().st_mtime_ns]
    pages = polish_all(root / FEEDBACK, release_notebooks(cached_releases(root, names)), root, written)
    made = {(p.parent.parent.name, p.parent.name) for p in pages}
    if missing := [f"{s}/{a}" for s, a in graded if (s, a) not in made]:
        raise PagedKVError(f"feedback written for the others ({len(pages)} pages); none for {', '.join(missing)}"
                           + ("\n" + "\n".join(errors) if errors else ""))
    if errors:
        raise PagedKVError("\n".join(errors))
    return pages
