"""A learner's notebook as HTML that runs none of the learner's script: formgrader's pages and the feedback.

nbgrader renders a hand-in with nbconvert's HTMLExporter on the instructor's own Jupyter server (formgrader's
manual grading, 'formgrade' template) and into the feedback it releases ('feedback' template). Script in that
HTML runs with the instructor's cookies and can call their server's API: read the solutions, change grades,
run code. nbconvert's own ``HTMLExporter.sanitize_html`` does not close it (issue 37, measured with
``tests/browser/test_formgrader_hostile.py``):

- both nbgrader templates render a markdown cell as ``markdown2html | strip_files_prefix``, never through
  ``clean_html``, so raw HTML in a written answer (``<img onerror=...>``, ``<svg onload=...>``, a ``javascript:``
  link) reaches the page whatever ``sanitize_html`` says;
- an image output's ``width`` and ``height`` metadata are written into an unquoted attribute
  (``width={{ width | escape_html }}``), so ``1 onload=...`` adds an event handler; a learner's code makes such
  an output, and autograde runs that code again;
- with ``sanitize_html`` on, nbconvert's ``clean_html`` keeps too few tags for a written answer (no ``p``, no
  headings), so a plain answer would be shown as tags.

``nbgrader_config.py`` turns ``sanitize_html`` on (HTML and Markdown outputs cleaned, JavaScript outputs and
raw cells dropped or cleaned by nbconvert) and puts the functions below in place of nbconvert's filters
``clean_html`` and ``strip_files_prefix``, and :class:`PlainImageSizes` among the exporter's preprocessors.
Whatever is not allowed is escaped, never dropped: the instructor sees the learner's markup as text.
"""
from __future__ import annotations

import re

import bleach
from nbconvert.filters import strip_files_prefix as _strip_files_prefix
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "div", "dl", "dt", "em", "h1", "h2", "h3", "h4",
    "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table",
    "tbody", "td", "tfoot", "th", "thead", "tr", "ul"})
"""What Markdown makes of a written answer, and the tables and code blocks of an output."""
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
CLASSES = frozenset(STANDARD_TYPES.values()) - {""} | {"highlight", "anchor-link", "dataframe"}
"""The class names a written answer or an output may keep: Pygments' token classes (``k``, ``s2``, ``c1``: what
``markdown2html`` puts on highlighted code), its ``highlight`` box, a heading's ``anchor-link`` and pandas'
``dataframe``. Any other class could dress a learner's markup as formgrader's own: its Bootstrap 3 makes
``affix`` and ``modal-backdrop`` fixed layers, which could hold a fake score box over the real one."""
_LANGUAGE = re.compile(r"hl-[a-z0-9+#-]{1,24}\Z")    # a code block's language: hl-python, hl-ipython3
_DATA_IMAGE = re.compile(r"data:image/(png|jpe?g|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z")
_SIZE = re.compile(r"\d{1,5}(\.\d+)?(px|%)?\Z")


def _attribute(tag: str, name: str, value: str) -> bool:
    """Which attributes stay: no event handler, no ``style``, no ``id`` (a learner's id could stand in for one of
    formgrader's own, such as a score box's), a ``class`` only of :data:`CLASSES`. An image's source only as a
    ``data:`` raster image, the way nbconvert embeds outputs and attachments: an image from a web address would
    load when the instructor opens the page (telling its owner when, and from where), and a relative one is a
    GET to the instructor's own server with their cookies. Such an image keeps its ``alt`` text."""
    if name == "class":
        return all(c in CLASSES or _LANGUAGE.match(c) for c in value.split())
    if tag == "a":
        return name in ("href", "title") and not value.strip().lower().startswith("data:")
    if tag == "img":
        if name == "src":
            return bool(_DATA_IMAGE.match(value.strip()))
        return name in ("alt", "title") or (name in ("width", "height") and bool(_SIZE.match(value)))
    return tag in ("td", "th") and name in ("align", "colspan", "rowspan")


def clean_html(html) -> str:
    """``html`` with only :data:`TAGS` and harmless attributes left; every other tag is escaped, shown as text."""
    text = html.decode() if isinstance(html, bytes) else str(html)
    return bleach.clean(text, tags=TAGS, attributes=_attribute, protocols=PROTOCOLS, strip=False)


def clean_markdown_html(html) -> str:
    """nbconvert's ``strip_files_prefix`` and then :func:`clean_html`: in nbgrader's templates this filter follows
    every ``markdown2html`` of a cell or a comment, which no other filter cleans."""
    return clean_html(_strip_files_prefix(html))


def _plain_size(value) -> bool:
    return isinstance(value, (int, float)) or (isinstance(value, str) and bool(_SIZE.match(value)))


class PlainImageSizes(Preprocessor):
    """Drops an output's ``width`` or ``height`` metadata that is not a plain size: nbconvert's templates write
    them unquoted into the ``<img>`` tag, where ``1 onload=...`` would add an event handler."""

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {})
            for level in [meta, *(v for v in meta.values() if isinstance(v, dict))]:
                for key in ("width", "height"):
                    if key in level and not _plain_size(level[key]):
                        del level[key]
        return cell, resources
