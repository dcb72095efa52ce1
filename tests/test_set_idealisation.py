"""The sets that grade the ledger's idealised rule say so, with the real manager's count beside it (issue 36).

ps1 Q3 and ps2 Q4 grade "each tail starts in a fresh block", a layout lesson 03 shows a real cache cannot
address. ps1 shows the real manager's table live in a cell of its own; ps2 cannot (the real manager counts
its blocks with the `blocks_needed` that ps2 hides while it grades), so its note states the figures, and
this test computes them."""
from pathlib import Path

import nbformat
import pytest

from pagedkv_lib.ledger import PAGE_BATCH, allocate
from pagedkv_lib.lesson.idealisation import ledger_beside_manager
from pagedkv_lib.lesson.replay import play_paged

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def _cells(name):
    return nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4).cells


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def test_ps1_names_the_idealisation_and_shows_the_real_manager_live_after_q3():
    cells = _cells("ps1_intuition")
    ids = [_grade_id(c) for c in cells]
    text = cells[ids.index("q3_text")].source
    assert "idealisation" in text and "`table[p // S]`" in text
    live = cells[ids.index("q3_tests") + 1]
    assert _grade_id(live) == "q3_real_manager" and live.cell_type == "code"
    assert live.metadata["nbgrader"]["locked"] and not live.metadata["nbgrader"]["grade"]
    assert "ledger_beside_manager(block_size=8)" in live.source


def test_ps2s_figures_for_the_real_manager_are_what_it_computes():
    (text,) = [c.source for c in _cells("ps2_math") if _grade_id(c) == "q4_text"]
    rule, real = allocate(PAGE_BATCH, 8), play_paged(PAGE_BATCH, 8).stats()
    assert rule.reserved_slots == real.reserved_slots
    said = (f"same {real.reserved_slots} reserved slots but stores {real.unique_tokens} token states where this "
            f"rule stores {rule.unique_tokens} (slack {real.slack}, not {rule.slack})")
    assert "idealisation" in text and said in " ".join(text.split())


def test_the_table_puts_both_counts_side_by_side_and_refuses_a_bad_block_size():
    table = ledger_beside_manager(8).data
    rule, real = allocate(PAGE_BATCH, 8), play_paged(PAGE_BATCH, 8).stats()
    assert f"| token states stored | {rule.unique_tokens} | {real.unique_tokens} |" in table
    assert rule.unique_tokens != real.unique_tokens
    with pytest.raises(ValueError, match="block_size must be an integer >= 1, got 0"):
        ledger_beside_manager(0)
