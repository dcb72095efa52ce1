"""Static checks of the lessons' predictions: nothing on screen answers a prediction before its commit.

A gate cell (one that calls ``W.ask``) computes what it shows and names the gate by id and question;
its choices, answer and reveal come from the library's answer keys (``pagedkv_lib.lesson.answer_keys``),
so no cell, hidden or not, holds them (``test_lesson_sources_hide_answers`` looks for their words).
"""
from pathlib import Path

import nbformat
import pytest

from conftest import LESSONS as ALL_LESSONS

LESSONS = [p for p in ALL_LESSONS if p.stem in ("01_intuition", "02_math", "03_code")]


def cells(path: Path):
    return nbformat.read(path, as_version=4).cells


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_gate_cells_hold_no_reveal_prose_and_no_cell_holds_reveal_text(path):
    nb = cells(path)
    gates = [i for i, c in enumerate(nb) if c.cell_type == "code" and "W.ask(" in c.source]
    assert len(gates) >= 2, "a lesson needs at least two gated predictions"
    for i in gates:
        assert '"""' not in nb[i].source, f"cell {i}: reveal prose belongs in the gate's answer key"
    for i, c in enumerate(nb):
        assert "reveal-text" not in c.metadata.get("tags", []) and "def reveal_text" not in c.source, (
            f"cell {i} holds reveal text: it belongs in pagedkv_lib.lesson.answer_keys")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_guess_placeholders_and_no_subject_page(path):
    for c in cells(path):
        assert "My guess" not in c.source
        assert "subject page" not in c.source.lower()


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_has_the_structure_parts(path):
    text = "\n".join(c.source for c in cells(path) if c.cell_type == "markdown")
    for part in ("Learner contract", "Prerequisites", "Practice", "What to remember", "Claim review",
                 "Not claimed", "Sources", "cost and latency observability"):
        assert part in text, f"{path.stem} lacks {part!r}"
    assert "W.exercise(" in "\n".join(c.source for c in cells(path))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_code_lines_fit_a_1280_pixel_window(path):
    for c in cells(path):
        if c.cell_type == "code" and "colab-setup" not in c.metadata.get("tags", []):
            assert max(map(len, c.source.splitlines()), default=0) <= 88, c.source[:60]


@pytest.mark.parametrize("path", ALL_LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_its_map_and_lens_and_ends_with_the_research_room(path):
    from pagedkv_lib.lesson.items import lesson

    nb = cells(path)
    opening = next(i for i, c in enumerate(nb) if "learning_map.lens(" in c.source)
    assert opening <= 3 and f'learning_map.show("{path.stem}")' in nb[opening].source
    shown_before = "\n".join(c.source for c in nb[:opening]).lower()
    lens = lesson(path.stem).lens
    assert lens.answer.lower() not in shown_before, "the lens is answered on screen before it is asked"
    assert lens.reveal[:40].lower() not in shown_before
    assert f'research_room("{path.stem}", "claim"' in nb[-1].source
    from pagedkv_lib.lesson.answer_keys import PRACTICE_KEYS
    assert any(k.canvas for k in PRACTICE_KEYS.values() if k.lesson == path.stem and f'"{k.id}"' in
               "\n".join(c.source for c in nb)), "no practice has a canvas"
