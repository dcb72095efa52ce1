"""Simulator figures: one bar per policy split into the memory categories, one batch line per policy."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from pagedkv_lib.sim.plots import plot_batch_over_time, plot_memory_shares, plot_results  # noqa: E402
from pagedkv_lib.sim import CATEGORIES, run_policies  # noqa: E402
from pagedkv_lib.sim.workloads import alpaca_like, sharegpt_like  # noqa: E402


def test_bars_add_up_to_100_percent_per_policy_and_lines_follow_the_batch():
    import matplotlib.pyplot as plt
    results = run_policies(alpaca_like(60, seed=1), ["max", "paged"], progress=False)
    fig, (top, bottom) = plt.subplots(2, 1)
    plot_memory_shares(results, top)
    plot_batch_over_time(results, bottom)
    assert [t.get_text() for t in top.get_yticklabels()] == ["max", "paged"]
    widths = np.array([[bar.get_width() for bar in container] for container in top.containers])
    assert widths.shape == (len(CATEGORIES) - 1, 2)
    assert np.allclose(widths.sum(axis=0), 100)
    lines = bottom.get_lines()
    assert [line.get_label() for line in lines] == ["max", "paged"]
    assert np.array_equal(lines[1].get_ydata(), results[1].series["running"])
    plt.close(fig)
    plt.close(plot_results(results, title="t"))


def test_plots_refuse_what_is_not_a_list_of_results():
    import pytest

    from pagedkv_lib.sim.workloads import trace_from_lengths
    result = run_policies(trace_from_lengths([10], [5]), ["paged"], num_blocks=10, block_size=4, progress=False)[0]
    for plot in (plot_memory_shares, plot_batch_over_time, plot_results):
        with pytest.raises(ValueError, match="results must hold at least one SimResult to plot, got an empty list"):
            plot([])
        with pytest.raises(TypeError, match="got a single SimResult; wrap it in a list"):
            plot(result)
        with pytest.raises(TypeError, match="results\\[1\\] must be a SimResult .*got Trace"):
            plot([result, trace_from_lengths([10], [5])])


def test_paper_ticks_can_be_left_out():
    results = run_policies(sharegpt_like(30, seed=0), ["max", "paged"], num_blocks=400, block_size=16, progress=False)
    with_ticks = plot_memory_shares(results)
    without = plot_memory_shares(results, paper=False)
    assert len(with_ticks.lines) == 2 and len(without.lines) == 0
