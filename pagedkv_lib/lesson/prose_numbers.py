"""Finding the numbers of a lesson's prose, and which of them need no source.

:func:`numbers_in` lists the numbers of a markdown cell (or of prose the library renders) that a reader
would take as a claim: not those inside code, a date, a reference's number (section 3, Eq. 2, PCIe 4.0), or
a formula's constants (its docstring lists each rule). :mod:`.claims` then asks of each number it returns
whether it is live, cited or a registered fact.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Number", "NUMBER", "numbers_in", "plain_prose"]


@dataclass(frozen=True)
class Number:
    """One number found in a markdown cell: its value, its text and where it stands."""
    value: float
    text: str
    cell: str
    start: int
    context: str


NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])"
                     r"|(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_CODE = re.compile(r"`[^`]*`")
_WORD = re.compile(r"[\w.\-'/]+")
_REFERENCE = re.compile(
    r"(?:\bEqs?\.|\bFigs?\.|\bFigure|§|\b[Ss]ections?|\b[Ll]essons?|\b[Ss]teps?\b|\bTable|\bps|\bPCIe)"
    r"\s*(?:\d+(?:\.\d+)?\s*(?:[-–,]|and)?\s*)*$")
_CITATION_YEAR = re.compile(r"(?:et al\.,?|\b[A-Z]{3,}|\()\s*$")
_LESSON_NAME = re.compile(r"^0\d_[a-z]")
_MATH = re.compile(r"\$\$.+?\$\$|\$.+?\$", re.S)
# Outside $...$ (the library's plain-text prose): a constant joined to a one-letter variable by an operator
# (S - 1, 2^b, n / 2^b, 2P), a bound 0 before "and S - 1", a count 0, 1, 2, ..., a percentile's name.
_OPERAND = re.compile(r"(?:(?<![A-Za-z])[A-Za-z]|\))\s*[-+*/^]\s*$")
_OPERAND_AFTER = re.compile(r"\s*[-+*/^]\s*[A-Za-z](?![A-Za-z])|[A-Z](?![\w])")
_COMPARED = re.compile(r"(?:[<>=]=?|[≤≥])\s*$")  # "ref count > 1", "at S = 1": a 0 or 1 as a bound or identity
_ZERO_BOUND = re.compile(r"\b(?:exactly|above|below)\s+$")  # "above 0 but below ...": 0 as a bound, as after ">"
_BOUND = re.compile(r"(?:,|\s+and|\s+to)\s+[A-Za-z]\s*-\s*1\b")
_COUNTING = re.compile(r"\b0, 1, 2(?:, 3)?, (?:\.\.\.|…)")
_PERCENTILE = re.compile(r"(?:st|nd|rd|th) percentile")
_LATEX = re.compile(r"\\[A-Za-z]+|\{|\}")


def _math_exempt(segment: str, offset: int) -> bool:
    """Inside a formula with variables, a constant (the 1 of S-1) is part of the formula.

    0 and 1 in any formula are bounds and identities ($0$ to $S-1$, $r = 0$). Another number is a
    claim when the formula is all numbers (``\\lceil 10/4 \\rceil = 3``) or when it
    is the value given to a variable at the formula's end (``S = 4``)."""
    bare = _LATEX.sub(" ", segment.strip("$"))
    if re.match(r"[01](?![\d.])", segment[offset:]):
        return True
    if not re.search(r"[A-Za-z]", bare):
        return False
    before, after = segment[:offset], segment[offset:]
    tail = re.match(r"\d+(?:\.\d+)?\s*\$*$", after)
    return not (re.search(r"=\s*$", before) and tail)


def plain_prose(markdown: str) -> str:
    """Markdown with headings' and ordered lists' leading numbers blanked, whitespace collapsed."""
    text = re.sub(r"(?m)^(\s*#+\s*)\d+(?=\s*·)", r"\1#", markdown)
    text = re.sub(r"(?m)^(\s*)\d+\.(?=\s)", r"\1•", text)
    return re.sub(r"\s+", " ", text)


def numbers_in(markdown: str, cell: str = "") -> list[Number]:
    """The numbers of a markdown text that are claims, with the exempt ones left out.

    Exempt, and nothing else: a heading's leading number (``## 2 · ...``) and an ordered list's
    marker (``3. ``); a number right after a reference word (Eq., Fig., §, section, lesson, Step,
    Table, ps) or a standard's name that its version follows (``PCIe 4.0``) and the range or list it
    starts (``sections 4.1-4.4``); a year (1900-2099) after
    "et al.", an all-capitals venue (``SOSP 2023``) or "("; a number inside a name that starts with
    a letter (``Llama-3-8B``, ``A1``, ``fp16``) or a lesson's name (``03_code``); a constant inside
    a formula with variables (see `_math_exempt`); a date (``2026-12-01``); a number inside inline
    code that is a call or keyword argument to type (``the_lab.set(block_size=8)``); outside a formula's
    dollars, a constant joined to a one-letter variable by an operator (``S - 1``, ``2^b``, ``2P``), a 0
    bounding a range that ends at ``S - 1``, the count ``0, 1, 2, ...``, a percentile's name (``99th
    percentile``) and a 0 or 1 after a comparison or equals sign (``ref count > 1``, ``at S = 1``), a bound
    or identity as 0 and 1 are in a formula, as is a 0 after "exactly", "above" or "below" (``above 0``). Numbers written
    as words ("three requests") are not found. Whitespace is collapsed first, so a phrase may wrap
    across lines."""
    text = plain_prose(markdown)
    spans = [(m.start(), m.end()) for m in _MATH.finditer(text)]
    dates, code = list(_DATE.finditer(text)), list(_CODE.finditer(text))
    counting = [(c.start(), c.end()) for c in _COUNTING.finditer(text)]
    found = []
    for m in NUMBER.finditer(text):
        start, num = m.start(), m.group()
        value = float(num.replace(",", ""))
        before = text[max(0, start - 40):start]
        word = _word_at(text, start)
        if word and (word[0].isalpha() or word[0] == "_" or _LESSON_NAME.match(word)):
            continue
        if _REFERENCE.search(before):
            continue
        if 1900 <= value <= 2099 and "." not in num and _CITATION_YEAR.search(before):
            continue
        if any(d.start() <= start < d.end() for d in dates) or any(a <= start < b for a, b in counting):
            continue
        after = text[m.end():m.end() + 16]
        if _OPERAND.search(text[max(0, start - 4):start]) or _OPERAND_AFTER.match(after) \
                or (value == 0 and _BOUND.match(after)) or _PERCENTILE.match(after) \
                or (value in (0, 1) and "." not in num and _COMPARED.search(text[max(0, start - 4):start])) \
                or (num == "0" and _ZERO_BOUND.search(text[max(0, start - 9):start])):
            continue
        if any(c.start() < start < c.end() and re.search(r"\w\(|\w=", c.group()) for c in code):
            continue
        inside = next(((a, b) for a, b in spans if a <= start < b), None)
        if inside and _math_exempt(text[inside[0]:inside[1]], start - inside[0]):
            continue
        found.append(Number(value, num, cell, start, text[max(0, start - 50):m.end() + 50]))
    return found


def _word_at(text: str, start: int) -> str:
    """The name-like word (letters, digits, ``_ . - ' /``) that holds position ``start``."""
    left = start
    while left > 0 and re.match(r"[\w.\-'/]", text[left - 1]):
        left -= 1
    m = _WORD.match(text, left)
    return m.group().strip(".-'") if m else ""
