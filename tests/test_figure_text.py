"""Every figure of the course carries its data as text: an alt text, and a table beside the image."""
import html
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedkv_lib import figure_text  # noqa: E402
from pagedkv_lib.accounting import GiB  # noqa: E402
from pagedkv_lib.ledger import PAGE_BATCH, allocate  # noqa: E402

IDS = [r.id for r in PAGE_BATCH]


def tables(page: str) -> list[list[list[str]]]:
    """The body rows of each table of ``page``, as lists of cell texts."""
    out = []
    for body in re.findall(r"<tbody>(.*?)</tbody>", page):
        out.append([[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
                    for row in re.findall(r"<tr>(.*?)</tr>", body)])
    return out


def test_describe_refuses_rows_that_do_not_fit_the_columns_and_an_empty_summary():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"rows\[1\] has 1 cells, but there are 2 columns"):
        figure_text.describe(ax, "two columns", ["a", "b"], [(1, 2), (3,)])
    with pytest.raises(ValueError, match="summary must be a non-empty sentence"):
        figure_text.describe(ax, " ", ["a"], [])
    assert figure_text.figure_html(fig) is None, "an undescribed figure gets no text of ours"
    plt.close(fig)


def test_the_html_has_the_alt_text_a_captioned_table_and_the_title_as_it_stands_when_shown():
    fig, ax = plt.subplots()
    ax.bar([0, 1], [3, 5])
    figure_text.describe(ax, 'Two bars: "a" 3 and b 5.', ["bar", "height"], [("a", 3), ("b", 5)])
    ax.set_title("retitled <later>")
    page = figure_text.figure_html(fig)
    alt = re.search(r'alt="([^"]*)"', page).group(1)
    assert html.unescape(alt) == 'retitled <later>. Two bars: "a" 3 and b 5.'
    assert '<th scope="col">bar</th>' in page and '<th scope="row">a</th>' in page
    assert "<caption>retitled &lt;later&gt;</caption>" in page and "<summary>" in page
    assert tables(page) == [[["a", "3"], ["b", "5"]]]
    assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', page)
    plt.close(fig)


def test_the_block_tables_figure_lists_every_physical_block_and_who_holds_it():
    from pagedkv_lib.lesson import viz
    led = allocate(PAGE_BATCH, 4)
    ax = viz.plot_block_tables(led)
    rows = tables(figure_text.figure_html(ax.figure))[0]
    assert len(rows) == led.num_blocks
    assert rows[0] == ["0", "4", "0", "A1, A2, A3", "yes"]
    assert sum(int(r[1]) for r in rows) == led.unique_tokens and sum(int(r[2]) for r in rows) == led.slack
    assert "A2 holds 17 tokens in physical blocks 0, 1, 2, 4, 5" in figure_text.alternative(ax.figure)
    plt.close(ax.figure)


def test_the_block_map_text_agrees_with_the_manager():
    from pagedkv_lib.lesson import replay, viz
    manager = replay.play_paged(PAGE_BATCH, 4, num_blocks=16)
    ax = viz.plot_block_map(manager, IDS, follow="A2")
    rows = tables(figure_text.figure_html(ax.figure))[0]
    assert len(rows) == manager.num_blocks
    for b, state, refs, tokens, holders in rows:
        assert int(refs) == manager.ref_count(int(b))
        assert state == ("shared" if int(refs) > 1 else "in use" if int(refs) else "free")
    assert sum(int(r[3]) for r in rows) == manager.stats().unique_tokens
    assert "Arrows lead from A2's logical blocks" in figure_text.alternative(ax.figure)
    plt.close(ax.figure)


def test_each_panel_of_a_composite_figure_brings_its_own_table():
    from pagedkv_lib.lesson import replay, viz
    arena = replay.play_contiguous(PAGE_BATCH, "max", 32, steps=1, num_slots=112)
    paged = replay.play_paged(PAGE_BATCH, 4, share=False, num_blocks=28)
    shared = replay.play_paged(PAGE_BATCH, 4, num_blocks=28)
    fig = viz.plot_three_ways(arena, paged, shared, IDS, next_request_len=20)
    strip, *maps = tables(figure_text.figure_html(fig))
    assert sum(int(r[2]) for r in strip) == arena.num_slots     # runs and gaps cover the strip
    assert [len(m) for m in maps] == [28, 28]
    plt.close(fig)


def test_the_capacity_and_slack_figures_carry_their_numbers():
    from pagedkv_lib import accounting as acc
    from pagedkv_lib.lesson import viz
    ax = viz.plot_kv_capacity(["Llama-3-8B", "OPT-13B"], 80 * GiB)
    rows = tables(figure_text.figure_html(ax.figure))[0]
    assert rows[1][0] == "OPT-13B" and rows[1][3] == f"{acc.kv_capacity('OPT-13B', 80 * GiB).tokens:,}"
    plt.close(ax.figure)
    top, _ = viz.plot_slack_vs_block_size([15, 17, 14], [1, 4, 16])
    rows = tables(figure_text.figure_html(top.figure))[0]
    assert [r[0] for r in rows] == ["1", "4", "16"] and rows[0][3] == "no slack at S = 1"
    plt.close(top.figure)


def test_a_revealed_course_figure_is_html_with_its_text_and_the_png_beside_it():
    from pagedkv_lib.lesson import reveal, viz
    bundle = reveal.rendered(lambda: viz.plot_block_tables(allocate(PAGE_BATCH, 4)).figure)._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    assert 'alt="S=4: logical 46' in bundle["text/html"]
    fig, ax = plt.subplots()
    assert type(reveal.rendered(fig)).__name__ == "Image", "a figure of the learner's own stays a plain PNG"


def test_ipython_shows_a_described_figure_as_html_and_a_plain_one_without():
    from IPython.core.formatters import DisplayFormatter
    from pagedkv_lib.lesson import viz
    shown = DisplayFormatter()
    ax = viz.plot_block_tables(allocate(PAGE_BATCH, 4))
    data, _ = shown.format(ax.figure)
    assert "text/html" in data and 'alt="S=4: logical 46' in data["text/html"]
    fig, _ = plt.subplots()
    assert "text/html" not in shown.format(fig)[0] or not shown.format(fig)[0]["text/html"]
    plt.close("all")


def test_the_class_report_figures_carry_their_numbers_in_their_alt_text(tmp_path):
    from pagedkv_lib.course.instructor.reporting.class_report import _figures
    results = {("ps2_math", "q1_tests"): {"passed": 1, "total": 2}, ("ps2_math", "q2_tests"): {"passed": 2, "total": 2}}
    scores_alt, rates_alt = _figures(tmp_path, [0.0, 7.0, 7.0], results, {"q2_tests": "Q2: blocks [needed]"})
    assert scores_alt.endswith("3 grade rows: 0 points, 1; 7 points, 2")
    assert rates_alt == r"Pass rate per question: q1\_tests 50%; Q2 100%"
    assert (tmp_path / "scores.png").exists() and (tmp_path / "pass_rates.png").exists()
