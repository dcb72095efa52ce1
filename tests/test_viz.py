"""Figures draw what the library computes, and explain empty input instead of dividing by zero."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from pagedkv_lib.lesson import viz  # noqa: E402
from pagedkv_lib.accounting import GiB  # noqa: E402
from pagedkv_lib.ledger import PAGE_BATCH, allocate  # noqa: E402


def test_block_table_figure_draws_every_slot_of_every_block():
    led = allocate(PAGE_BATCH, 4)
    ax = viz.plot_block_tables(led)
    slots_in_pool = led.num_blocks * 4
    slots_in_tables = 4 * sum(len(t) for t in led.tables.values())
    outlines = sum(1 for u in set(b for t in led.tables.values() for b in t)
                   if sum(u in t for t in led.tables.values()) > 1)
    assert len(ax.patches) == slots_in_pool + slots_in_tables + outlines
    assert "slack 6" in ax.get_title(loc="left")


def test_block_table_figure_has_a_legend_for_tokens_slack_and_sharing():
    ax = viz.plot_block_tables(allocate(PAGE_BATCH, 4))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["token slot", "slack slot", "shared block"]


def test_slack_figure_plots_one_point_per_block_size_with_slack():
    top, gap = viz.plot_slack_vs_block_size([15, 17, 14], [1, 4, 16])
    assert list(top.lines[1].get_xdata()) == [4, 16]          # S=1 has no slack: no point on a log axis
    assert list(gap.lines[1].get_xdata()) == [4, 16]
    assert top.get_yscale() == "log"                        # no symlog kink


def test_capacity_figure_names_kv_heads_and_reads_its_ticks():
    ax = viz.plot_kv_capacity(["Llama-3-8B", "OPT-13B"], 80 * GiB)
    assert len(ax.patches) == 2
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "8 KV heads, 128 KiB/token" in labels[0] and "40 KV heads, 800 KiB/token" in labels[1]
    assert ax.get_xlabel() == "KV-cache tokens on one 80 GiB GPU"
    ax = viz.plot_kv_capacity(["DeepSeek-V3"], 2048 * GiB)   # 671 B parameters: no single GPU
    assert "MLA latent" in ax.get_yticklabels()[0].get_text()
    assert [viz._count(v) for v in (0, 500_000, 1_000_000, 1_500_000)] == ["0", "500k", "1M", "1.5M"]


@pytest.mark.parametrize("call", [
    lambda: viz.plot_slack_vs_block_size([], [4]),
    lambda: viz.plot_slack_vs_block_size([3], []),
    lambda: viz.plot_kv_capacity([], 80 * GiB),
])
def test_empty_input_is_explained(call):
    with pytest.raises(ValueError, match="at least one"):
        call()


def test_one_palette_colours_a_category_alike_in_every_figure():
    """The block-table slots and the simulator's share bars draw token states and slack in the same colours."""
    import numpy as np
    from matplotlib.colors import to_rgba

    from pagedkv_lib.sim import CATEGORIES, run_policies, trace_from_lengths
    from pagedkv_lib.sim.plots import plot_memory_shares
    assert set(viz.COLORS) == set(CATEGORIES) - {"free"}
    assert len(set(viz.COLORS.values())) == len(viz.COLORS)
    slots = {p.get_facecolor() for p in viz.plot_block_tables(allocate(PAGE_BATCH, 4)).patches if p.get_fill()}
    assert slots == {to_rgba(viz.COLORS["token_states"]), to_rgba(viz.COLORS["slack"])}
    results = run_policies(trace_from_lengths([10], [5]), ["paged"], num_blocks=10, block_size=4, progress=False)
    ax = plot_memory_shares(results)
    bars = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
    assert bars == {c.replace("_", " "): to_rgba(viz.COLORS[c]) for c in CATEGORIES[:-1]}
    assert np.isclose(sum(c.patches[0].get_width() for c in ax.containers), 100)

