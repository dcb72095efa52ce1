"""Figures of simulator results: where KV memory goes per policy, and the batch over time.

Both take a non-empty list of :class:`~pagedkv_lib.simulate.SimResult` and draw on a given
matplotlib ``Axes`` (or a new one), so a notebook can place them in its own layout.
"""
from __future__ import annotations

import numpy as np

from .simulate import CATEGORIES, PAPER_TOKEN_STATE_SHARE, SimResult

COLORS = {"token_states": "#2a9d8f", "reservation": "#e9c46a", "internal_fragmentation": "#f4a261",
          "external_fragmentation": "#e76f51", "slack": "#8ab17d"}
"""One color per memory category (free memory is not drawn: shares are of occupied memory)."""


def plot_memory_shares(results, ax=None):
    """Stacked bars: each policy's occupied KV memory split into categories, the paper's
    token-state share marked with a black tick where it reported one."""
    results = _check_results(results)
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.6 + 0.55 * len(results)))
    names = [r.policy for r in results]
    y = np.arange(len(results))
    left = np.zeros(len(results))
    for c in CATEGORIES[:-1]:
        width = np.array([100 * r.summary[f"share_{c}"] for r in results])
        ax.barh(y, width, left=left, color=COLORS[c], label=c.replace("_", " "))
        left += width
    label = "paper: token states"
    for i, r in enumerate(results):
        paper = PAPER_TOKEN_STATE_SHARE.get(r.policy)
        if paper is not None:
            ax.plot([100 * paper] * 2, [i - 0.4, i + 0.4], color="black", lw=2, label=label)
            label = None  # one legend entry for all ticks
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of occupied KV memory (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize="small", frameon=False)
    return ax


def plot_batch_over_time(results, ax=None):
    """Running requests per step for each policy (a larger batch means more tokens per step)."""
    results = _check_results(results)
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    for r in results:
        ax.plot(np.arange(r.num_steps), r.series["running"], lw=1, label=r.policy)
    ax.set_xlabel("step")
    ax.set_ylabel("running requests")
    ax.legend(fontsize="small", frameon=False)
    return ax


def plot_results(results, title: str | None = None):
    """Both panels in one figure; returns the matplotlib ``Figure``."""
    results = _check_results(results)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string or None, got {title!r} ({type(title).__name__})")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 3.2 + 0.55 * len(results) + 3),
                                      gridspec_kw={"height_ratios": [0.6 + 0.55 * len(results), 3]})
    plot_memory_shares(results, top)
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
