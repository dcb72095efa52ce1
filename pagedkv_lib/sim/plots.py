"""The simulator's figures: where each policy's KV memory went, and the batch over time.

Each takes what :func:`~pagedkv_lib.sim.run_policies` returns. Memory categories are drawn in
the course's one palette, :data:`pagedkv_lib.palette.COLORS`, as in the lesson figures.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..palette import COLORS
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
        ax.barh(y, width, left=left, color=COLORS[c], label=c.replace("_", " "))
        left += width
    label = "paper: token states"
    for i, r in enumerate(results):
        share = PAPER_TOKEN_STATE_SHARE.get(r.policy) if paper else None
        if share is not None:
            ax.plot([100 * share] * 2, [i - 0.4, i + 0.4], color="black", lw=2, label=label)
            label = None  # one legend entry for all ticks
    ax.set_yticks(y, [r.policy for r in results])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of occupied KV memory (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize="small", frameon=False)
    return ax


def plot_batch_over_time(results, ax=None):
    """Running requests per step for each policy (a larger batch means more tokens per step)."""
    results = _check_results(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    for r in results:
        ax.plot(np.arange(r.num_steps), r.series["running"], lw=1, label=r.policy)
    ax.set_xlabel("step")
    ax.set_ylabel("running requests")
    ax.legend(fontsize="small", frameon=False)
    return ax


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
