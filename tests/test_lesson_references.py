"""A reference to a section names one that exists in that lesson and agrees with what it says there
(issue 36: 02's q-shared reveal said "56 (three plain sequences, section 3)" at S = 8, where section 3
computed 52 at S = 4).

Scanned: each lesson's markdown and the prose the library renders in it (`library_prose.rendered_prose`: reveals and
misconceptions, its practices' hints and mistakes, its opening lens), live fields left out. A reference
("section 3", "sections 1, 2 and 5", "Step 2 of section 1") must name a numbered heading of the lesson
(``## 3 · ...``), and a step a bold "Step N" inside that section. An equation ("Eq. 1") must be one a
section heading of this lesson defines (``## 1 · Eq. 1: ...``), or the paragraph names the lesson that
defines it, or writes the formula, and that lesson holds the same formula. A reference inside a citation of another
work ("Kwon et al. 2023 (sections 3-4)") is the other work's and is not checked. What a section says is
checked where it can be read without running anything: the block sizes a paragraph binds ("S = 8") must
be among those the section it cites binds, in its prose or its code, and "the asserts of section 3" needs
an ``assert`` in section 3's code.

The problem sets' markdown (``solutions/*/*.ipynb``) cites lessons by name: "the Code lesson's section 3", "the
Demo lesson, section 6". Such a reference must name a section of that lesson, agree with it as above, and each
code name in backticks in its sentence must be one that section holds; a "section N" that names no lesson is an
error. A set's "Eq. N" is the lesson's that its paragraph names, or else the set's own lesson's (ps2: 02_math),
and a formula written beside it must be that lesson's.
"""
from __future__ import annotations

import re

import nbformat
import pytest

from conftest import LESSONS, REPO
from pagedkv_lib.lesson.items import lesson as lesson_items
from pagedkv_lib.lesson.library_prose import rendered_prose

HEADING = re.compile(r"(?m)^##\s+(\d+)\s+·")
REFERENCE = re.compile(r"\b(?:(Step) (\d+) of )?[Ss]ections? (\d+(?:\.\d+)?(?:(?:, | and |-|–)\d+)*)")
CITATION = re.compile(r"(?:et al\.?|Kwon|paper'?s?)[^()]{0,30}[(,]\s*$|§")
BINDING = re.compile(r"\bS\s*=\s*(\d+)\b")
EQUATION = re.compile(r"\bEq\. (\d+)(?::\s*(\$[^$]+\$))?")
DEFINES = re.compile(r"(?m)^##\s+\d+\s+·\s+Eq\. (\d+):")


def sections(path) -> dict[str, str]:
    """``{"3": text}``: each numbered section's markdown and code, from its heading to the next ``##``."""
    out, current = {}, None
    for cell in nbformat.read(path, as_version=4).cells:
        for piece in re.split(r"(?m)^(?=## )", cell.source):
            m = HEADING.match(piece)
            if m:
                current = m.group(1)
            elif piece.startswith("## "):
                current = None
            if current is not None:
                out[current] = out.get(current, "") + "\n" + piece
    return out


def prose(path) -> list[tuple[str, str]]:
    """``(where, paragraph)`` of the lesson's markdown and of the library's prose rendered in it."""
    out = [(f"cell {c.get('id')}", c.source) for c in nbformat.read(path, as_version=4).cells
           if c.cell_type == "markdown"]
    out += [(where, text) for where, text in rendered_prose(path.stem)
            if not where.startswith("item source")]   # a research-room source item cites the work's own sections
    return [(where, " ".join(para.split())) for where, text in out for para in re.split(r"\n\s*\n", text)]


def _numbers(listed: str) -> list[str]:
    m = re.fullmatch(r"(\d+)[-–](\d+)", listed)
    if m:
        return [str(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)]
    return re.findall(r"\d+(?:\.\d+)?", listed)


def wrong_references(path, said=None) -> list[str]:
    """What is wrong with the section references of lesson ``path`` (or of ``said``, ``(where, paragraph)``
    pairs read as that lesson's)."""
    secs, problems = sections(path), []
    for where, para in (said if said is not None else prose(path)):
        bound = set(BINDING.findall(para))
        for m in REFERENCE.finditer(para):
            if CITATION.search(para[max(0, m.start() - 40):m.start()]):
                continue
            for n in _numbers(m.group(3)):
                if n not in secs:
                    problems.append(f"{where}: {m.group()!r} names no section of {path.stem} (it has {sorted(secs)})")
                    continue
                if m.group(1) and not re.search(rf"\*\*Step {m.group(2)}\b", secs[n]):
                    problems.append(f"{where}: {m.group()!r}: section {n} has no Step {m.group(2)}")
                if re.search(r"asserts of $", para[max(0, m.start() - 12):m.start()]) \
                        and not re.search(r"(?m)^\s*assert\b", secs[n]):
                    problems.append(f"{where}: {m.group()!r}: section {n} holds no assert")
                theirs = set(BINDING.findall(secs[n]))
                if bound and theirs and not bound & theirs:
                    problems.append(f"{where}: {m.group()!r} sits in a paragraph at S = {sorted(bound)}, but section "
                                    f"{n} works at S = {sorted(theirs)}: ...{para[max(0, m.start() - 80):m.end()]}")
    return problems


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_section_reference_exists_and_agrees_with_the_section(path):
    problems = wrong_references(path)
    assert not problems, "\n".join(problems)


def test_the_reveal_that_pinned_an_s8_count_on_section_3_is_caught():
    math = next(p for p in LESSONS if p.stem == "02_math")
    old = ("At S = 8 the prefix no longer fills its last block ... Sharing still cuts the reserved slots from … "
           "(three plain sequences, section 3) to …, but it raises slack")
    assert any("works at S = ['16', '4']" in p for p in wrong_references(math, [("q-shared reveal", old)]))
    assert wrong_references(math, [("x", "as section 9 showed")])[0].startswith("x: 'section 9' names no section")
    assert wrong_references(math, [("x", "Kwon et al. 2023 (sections 8-9)")]) == []
    assert wrong_references(math, [("x", "the asserts of sections 3 and 4")]) == []
    assert wrong_references(math, [("x", "the asserts of section 6")]) == ["x: 'section 6': section 6 holds no assert"]


def _text(path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)


def wrong_equations(path, said=None) -> list[str]:
    """What is wrong with the equation references of lesson ``path`` (or of ``said``, read as its)."""
    defined = {p.stem: set(DEFINES.findall(_text(p))) for p in LESSONS}
    problems = []
    for where, para in (said if said is not None else prose(path)):
        for m in EQUATION.finditer(para):
            if DEFINES.match(para) or CITATION.search(para[max(0, m.start() - 40):m.start()]):
                continue
            n, formula = m.groups()
            owners = [name for name, eqs in defined.items() if n in eqs]
            if path.stem in owners:
                continue
            if not owners:
                problems.append(f"{where}: 'Eq. {n}' is defined by no lesson")
            elif formula:
                written = " ".join(formula.split())
                if not any(written in " ".join(_text(p).split()) for p in LESSONS if p.stem in owners):
                    problems.append(f"{where}: 'Eq. {n}: {formula}' is not the formula of {owners}")
            elif not any(f"`{o}`" in para or f"lesson {o[:2]}" in para for o in owners):
                problems.append(f"{where}: 'Eq. {n}' is {owners}'s: name that lesson or write the formula")
    return problems


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_equation_reference_is_defined_and_says_what_it_says_there(path):
    problems = wrong_equations(path)
    assert not problems, "\n".join(problems)


def test_an_equation_from_elsewhere_must_be_named_or_written_as_it_is_there():
    code = next(p for p in LESSONS if p.stem == "03_code")
    assert wrong_equations(code, [("x", "Eq. 1 of lesson `02_math` per layer")]) == []
    assert wrong_equations(code, [("x", "(Eq. 1: $C_{\\mathrm{tok}} = 2 L H_{kv} d_{\\mathrm{head}} b$)")]) == []
    assert "not the formula" in wrong_equations(code, [("x", "(Eq. 1: $C = L H d b$)")])[0]
    assert "name that lesson" in wrong_equations(code, [("x", "as Eq. 2 says")])[0]
    assert "defined by no lesson" in wrong_equations(code, [("x", "as Eq. 7 says")])[0]


# --- the problem sets' references to the lessons --------------------------------------------------------------------

SETS = sorted((REPO / "solutions").glob("*/*.ipynb"))
NAMED = re.compile(r"\b[Tt]he (Intuition|Math|Code|Demo) lesson(?:'s|,)? ?$")
NAMED_ANYWHERE = re.compile(r"\b[Tt]he (Intuition|Math|Code|Demo) lesson\b")
SET_EQUATION = re.compile(r"\bEq\. (\d+)(?:[:,]\s*(\$[^$]+\$))?")


def lesson_called(name: str):
    """The lesson whose route section is ``name`` ("Code": 03_code)."""
    return next(p for p in LESSONS if lesson_items(p.stem).section == name)


def _own_lesson(set_path):
    """The lesson a set practises: ps2_math's is 02_math."""
    return next(p for p in LESSONS if p.stem.split("_")[1] == set_path.stem.split("_")[1])


def set_prose(path) -> list[tuple[str, str]]:
    """``(where, paragraph)`` of a set's markdown, white space collapsed."""
    return [(f"{path.stem} cell {c.get('id')}", " ".join(para.split()))
            for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
            for para in re.split(r"\n\s*\n", c.source)]


def _formula(text: str) -> str:
    return re.sub(r"\\[,;!]|\\cdot|\s|\$", "", text)


def wrong_set_references(path, said=None) -> list[str]:
    """What is wrong with the lesson references of set ``path`` (or of ``said``, read as its)."""
    problems = []
    for where, para in (said if said is not None else set_prose(path)):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*(])", para):
            for m in REFERENCE.finditer(sentence):
                named = NAMED.search(sentence[:m.start()])
                if not named:
                    problems.append(f"{where}: {m.group()!r} names no lesson (write 'the Code lesson's section 3')")
                    continue
                lesson = lesson_called(named.group(1))
                problems += wrong_references(lesson, [(where, sentence[named.end():])])[:1]
                sec = sections(lesson).get(m.group(3), "")
                problems += [f"{where}: {m.group()!r} of {lesson.stem} does not hold `{name}`"
                             for name in re.findall(r"`([\w.]+)`", sentence)
                             if sec and name.split(".")[-1] not in sec]
        for m in SET_EQUATION.finditer(para):
            named = NAMED_ANYWHERE.search(para)
            lesson = lesson_called(named.group(1)) if named else _own_lesson(path)
            n, formula = m.groups()
            if n not in DEFINES.findall(_text(lesson)):
                problems.append(f"{where}: 'Eq. {n}' is not an equation of {lesson.stem}")
            elif formula and _formula(formula) not in _formula(_text(lesson)):
                problems.append(f"{where}: 'Eq. {n}, {formula}' is not the formula of {lesson.stem}")
    return problems


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_every_reference_of_a_problem_set_to_a_lesson_exists_and_agrees(path):
    problems = wrong_set_references(path)
    assert not problems, "\n".join(problems)


def test_a_wrong_reference_in_a_problem_set_is_caught():
    ps2, ps3, ps4 = (next(p for p in SETS if p.stem.startswith(k)) for k in ("ps2", "ps3", "ps4"))
    assert wrong_set_references(ps4, [("x", "The server preempts a request (the Demo lesson, section 6).")]) == []
    assert "names no section of 04_demo" in wrong_set_references(ps4, [("x", "(the Demo lesson, section 9).")])[0]
    assert "names no lesson" in wrong_set_references(ps4, [("x", "as section 6 shows.")])[0]
    moved = "The Code lesson's section 2 shows the library's version (`pagedkv_lib.attention.triton_decode`)."
    assert "does not hold `pagedkv_lib.attention.triton_decode`" in wrong_set_references(ps3, [("x", moved)])[0]
    assert wrong_set_references(ps2, [("x", "for Eq. 1, $C_{\\mathrm{tok}} = 2\\,L\\,H_{kv}\\,d_{\\mathrm{head}}\\,b$, r")]) == []
    assert "not the formula" in wrong_set_references(ps2, [("x", "for Eq. 1, $C = L\\,H\\,b$, r")])[0]
    assert "not an equation of 02_math" in wrong_set_references(ps2, [("x", "as Eq. 7 says")])[0]
    assert "not an equation of 04_demo" in wrong_set_references(ps2, [("x", "Eq. 1 of the Demo lesson")])[0]
