"""A reference to a section names one that exists in that lesson and agrees with what it says there
(issue 36: 02's q-shared reveal said "56 (three plain sequences, section 3)" at S = 8, where section 3
computed 52 at S = 4).

Scanned: each lesson's markdown and the prose the library renders in it (its gates' reveals and
misconceptions, its practices' hints and mistakes, its opening lens), live fields left out. A reference
("section 3", "sections 1, 2 and 5", "Step 2 of section 1") must name a numbered heading of the lesson
(``## 3 · ...``), and a step a bold "Step N" inside that section. A reference inside a citation of another
work ("Kwon et al. 2023 (sections 3-4)") is the other work's and is not checked. What a section says is
checked where it can be read without running anything: the block sizes a paragraph binds ("S = 8") must
be among those the section it cites binds, in its prose or its code.
"""
from __future__ import annotations

import re
import string

import nbformat
import pytest

from conftest import LESSONS
from pagedkv_lib.lesson.answer_keys import GATE_KEYS, PRACTICE_KEYS
from pagedkv_lib.lesson.items import lesson as lesson_items

HEADING = re.compile(r"(?m)^##\s+(\d+)\s+·")
REFERENCE = re.compile(r"\b(?:(Step) (\d+) of )?[Ss]ections? (\d+(?:\.\d+)?(?:(?:, | and |-|–)\d+)*)")
CITATION = re.compile(r"(?:et al\.?|Kwon|paper'?s?)[^()]{0,30}[(,]\s*$|§")
BINDING = re.compile(r"\bS\s*=\s*(\d+)\b")


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


def _blank(template: str) -> str:
    return "".join(lit + ("…" if field is not None else "") for lit, field, *_ in string.Formatter().parse(template))


def prose(path) -> list[tuple[str, str]]:
    """``(where, paragraph)`` of the lesson's markdown and of the library's prose rendered in it."""
    name = path.stem
    out = [(f"cell {c.get('id')}", c.source) for c in nbformat.read(path, as_version=4).cells
           if c.cell_type == "markdown"]
    lens = lesson_items(name).lens
    out += [(f"{lens.id} reveal", lens.reveal)] + [(f"{lens.id} misconception", m) for m in lens.mistakes.values()]
    for key in GATE_KEYS.values():
        if key.lesson == name:
            out += [(f"{key.id} reveal", _blank(t)) for t in key.texts]
            out += [(f"{key.id} misconception", m) for m in key.mistakes.values()]
    for key in PRACTICE_KEYS.values():
        if key.lesson == name:
            out += [(f"{key.id} hint", h) for h in (*key.hints, *key.mistake_texts)]
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
