"""The Demo lesson's simulator beside the paper: rows, gaps, what moved, and its bad input."""
import pytest

from pagedkv_lib.lesson import claims
from pagedkv_lib.lesson.paper_view import PaperBench, comparison_table, moved_summary
from pagedkv_lib.sim.paper_comparison import (WIDTHS, PaperRow, Setting, compare_to_paper,
                                              gap_moves)

SMALL = Setting(dataset="Alpaca-like", requests=40)


@pytest.fixture(scope="module")
def small():
    return compare_to_paper(SMALL)


def test_gap_is_zero_inside_the_range_and_signed_outside():
    assert PaperRow("x", 7.0, (6.1, 9.8)).gap == 0
    assert PaperRow("x", 12.0, (6.1, 9.8)).gap == pytest.approx(2.2)
    assert PaperRow("x", 18.7, (20.4, 20.4)).gap == pytest.approx(-1.7)


def test_rows_stand_beside_the_registered_figures(small):
    assert len(small.token_states) == 4 and len(small.sharing) == 2 * len(WIDTHS)
    cited = {v for c in claims.CITED for v in c.values}
    for row in small.rows:
        assert set(row.paper) <= cited, row
        assert 0.0 <= row.ours <= 100.0


def test_sharing_rows_use_the_datasets_own_range(small):
    alpaca = claims.cited("sharing-parallel-alpaca").values
    assert small.sharing[0].paper == alpaca


def test_a_change_of_block_size_moves_only_what_it_touches(small):
    bigger = compare_to_paper(Setting(dataset="Alpaca-like", requests=40, block_size=8))
    moves = gap_moves(small, bigger)
    max_row = "Fig. 2 token states, Orca (Max)"
    assert moves[max_row] == 0                     # contiguous runs know no blocks
    assert moves["Fig. 2 token states, vLLM"] > 0  # less tail slack: toward the paper's
    text = comparison_table(bigger, small)
    assert "closer to the paper" in text and "no change" in text
    assert "Toward the paper: Fig. 2 token states, vLLM" in moved_summary(bigger, small)


def test_the_bench_says_what_moved_from_its_second_run():
    bench = PaperBench()
    first = bench.show(SMALL).data
    assert "(first run)" in first and "On the simulator, now:" in first
    second = bench.show(SMALL).data
    assert "No figure moved" in second


@pytest.mark.parametrize("bad, word", [
    (dict(dataset="LMSYS"), "dataset"), (dict(requests=0), "requests"),
    (dict(max_length=10), "max_length"), (dict(block_size=0), "block_size"),
    (dict(arrivals_per_s=-1.0), "arrivals_per_s")])
def test_a_bad_setting_names_its_argument(bad, word):
    with pytest.raises((ValueError, TypeError), match=word):
        Setting(**bad)


def test_compare_refuses_what_is_not_a_setting():
    with pytest.raises(TypeError, match="setting"):
        compare_to_paper({"dataset": "Alpaca-like"})
