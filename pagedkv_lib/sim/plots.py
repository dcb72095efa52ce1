"""The simulator's figures: where each policy's KV memory went, and the batch over time.

Each takes what :func:`~pagedkv_lib.sim.run_policies` returns. Memory categories are drawn in
the course's one palette, :data:`pagedkv_lib.palette.COLORS`, as in the lesson figures.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patheffects import withStroke

from ..figure_text import describe
from ..palette import COLORS, HATCHES, text_on
from .simulate import CATEGORIES, PAPER_TOKEN_STATE_SHARE, SimResult


def plot_memory_shares(results, ax=None, *, paper: bool = True):
    """Stacked bars: each policy's occupied KV memory split into categories, the paper's
    token-state share marked with a black tick where it reported one (``paper=False`` leaves
    the ticks out: they belong to the paper's setting, ShareGPT on OPT-13B, not to any trace).

    ``results`` is a non-empty list of :class:`~pagedkv_lib.sim.SimResult` (what
    ``run_policies`` returns); free memory is not drawn, since shares are of occupied memory.
    """
    results = _check_results(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.6 + 0.55 * len(results)))
    y = np.arange(len(results))
    left = np.zeros(len(results))
    for c in CATEGORIES[:-1]:
        width = np.array([100 * r.summary[f"share_{c}"] for r in results])
        ax.barh(y, width, left=left, color=COLORS[c], ec=text_on(COLORS[c]), lw=0, hatch=HATCHES[c] or None,
                label=c.replace("_", " "))
        left += width
    label = "paper: token states"
    for i, r in enumerate(results):
        share = PAPER_TOKEN_STATE_SHARE.get(r.policy) if paper else None
        if share is not None:
            ax.plot([100 * share] * 2, [i - 0.4, i + 0.4], color="black", lw=2, label=label,
                    path_effects=[withStroke(linewidth=4.5, foreground="white")])  # seen on dark bars too
            label = None  # one legend entry for all ticks
    ax.set_yticks(y, [r.policy for r in results])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of occupied KV memory (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize="small", frameon=False)
    cats = CATEGORIES[:-1]
    describe(ax, "Each policy's occupied KV memory split by category, in percent, one stacked bar per policy"
             + (" (a black tick marks the paper's token-state share where it reported one)." if paper else "."),
             ["policy"] + [f"{c.replace('_', ' ')} (%)" for c in cats]
             + (["paper: token states (%)"] if paper else []),
             [[r.policy] + [f"{100 * r.summary[f'share_{c}']:.1f}" for c in cats]
              + ([_paper_share(r.policy)] if paper else []) for r in results])
    return ax


def _paper_share(policy: str) -> str:
    share = PAPER_TOKEN_STATE_SHARE.get(policy)
    return "not reported" if share is None else f"{100 * share:.1f}"


def plot_batch_over_time(results, ax=None):
    """Running requests per step for each policy (a larger batch means more tokens per step)."""
    results = _check_results(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    for r, style in zip(results, _LINES * len(results)):
        ax.plot(np.arange(r.num_steps), r.series["running"], lw=1.2, label=r.policy, markevery=0.1,
                markersize=4, **style)
    ax.set_xlabel("step")
    ax.set_ylabel("running requests")
    ax.legend(fontsize="small", frameon=False)
    rows = [(r.policy, r.num_steps, r.summary["mean_batch"], r.summary["peak_batch"]) for r in results]
    describe(ax, "Running requests at each step, one line per policy: "
             + "; ".join(f"{p} runs {m:.1f} on average over {n:,} steps (busy steps), at most {k}"
                         for p, n, m, k in rows) + ".",
             ["policy", "steps", "mean running requests (busy steps)", "peak running requests"], rows)
    return ax


_LINES = [dict(color="#004488", ls="-", marker="o"), dict(color="#D55E00", ls="--", marker="s"),
          dict(color="#117733", ls=":", marker="^"), dict(color="#AA4499", ls="-.", marker="D"),
          dict(color="#000000", ls="--", marker="v")]
"""Colour, dash and marker of each policy's line: dash and marker tell them apart without colour."""


def plot_results(results, title: str | None = None, *, paper: bool = True):
    """Both simulator panels in one figure; returns the matplotlib ``Figure``.

    ``paper`` marks the paper's token-state shares (see :func:`plot_memory_shares`)."""
    results = _check_results(results)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string or None, got {title!r} ({type(title).__name__})")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 3.2 + 0.55 * len(results) + 3),
                                      gridspec_kw={"height_ratios": [0.6 + 0.55 * len(results), 3]})
    plot_memory_shares(results, top, paper=paper)
    plot_batch_over_time(results, bottom)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _check_results(results) -> list:
    """``results`` as a list, if it is a non-empty sequence of :class:`SimResult` (what ``run_policies`` returns)."""
    if isinstance(results, SimResult):
        raise TypeError("results must be a list of SimResult (one per bar or line), got a single SimResult; "
                        "wrap it in a list")
    try:
        results = list(results)
    except TypeError:
        raise TypeError(f"results must be a list of SimResult, got {type(results).__name__}") from None
    if not results:
        raise ValueError("results must hold at least one SimResult to plot, got an empty list")
    for i, r in enumerate(results):
        if not isinstance(r, SimResult):
            raise TypeError(f"results[{i}] must be a SimResult (from simulate or run_policies), "
                            f"got {type(r).__name__}")
    return results
