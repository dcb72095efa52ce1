"""Matplotlib figures of the course: block tables, slack and capacity (the math notebook).

Each ``plot_*`` function draws on an ``ax`` (or makes one) and returns it. One palette,
:data:`COLORS`, colours a memory category the same way in every figure, the simulator's
(:mod:`pagedkv_lib.sim.plots`) included.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from . import accounting as acc
from .ledger import Ledger

COLORS = {"token_states": "#4C72B0", "reservation": "#CCB974", "internal_fragmentation": "#C44E52",
          "external_fragmentation": "#8172B3", "slack": "#BFBFBF"}
"""One colour per occupied-memory category (:data:`~pagedkv_lib.sim.CATEGORIES` but ``free``), in every figure."""

TOKEN, SLACK = COLORS["token_states"], COLORS["slack"]
SHARED = "#DD8452"
"""Outline of a block shared by more than one block table."""


def _axes(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _draw_block(ax, x, y, filled, S, outline=None, label=None):
    """One block of ``S`` slots at (x, y), left to right; the first ``filled`` slots hold tokens."""
    for s in range(S):
        ax.add_patch(plt.Rectangle((x + s * 0.9 / S, y), 0.9 / S, 0.6, ec="white", lw=0.5,
                                   color=TOKEN if s < filled else SLACK))
    if outline:
        ax.add_patch(plt.Rectangle((x - 0.03, y - 0.05), 0.96, 0.7, fill=False, ec=outline, lw=2))
    if label is not None:
        ax.text(x + 0.45, y + 0.3, label, ha="center", va="center", fontsize=8, color="black",
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))


def plot_block_tables(ledger: Ledger, ax=None):
    """Each request's logical blocks (top rows) and the physical pool they map to (bottom row).

    A logical block is labelled with the physical block id it maps to; physical blocks list the
    requests whose tables hold them. Blue slots hold tokens, grey slots are slack, orange outlines
    mark shared blocks.
    """
    S, fill = ledger.block_size, ledger.block_fill
    users: dict[int, list[str]] = {}
    rows = list(ledger.tables.items())
    ax = _axes(ax, (max(6.0, 0.8 * ledger.num_blocks + 2.5), 1.6 + 0.8 * len(rows)))
    for r, (rid, table) in enumerate(rows):
        y = 1.4 + 0.8 * (len(rows) - 1 - r)
        ax.text(-0.15, y + 0.3, f"{rid}  T={sum(fill[b] for b in table)}", ha="right", va="center", fontsize=9)
        for j, b in enumerate(table):
            users.setdefault(b, []).append(rid)
            _draw_block(ax, j, y, fill[b], S, label=f"->{b}")
    for b in range(ledger.num_blocks):
        shared = len(users.get(b, [])) > 1
        _draw_block(ax, b, 0, fill.get(b, 0), S, outline=SHARED if shared else None, label=str(b))
        ax.text(b + 0.45, -0.12, "\n".join(users.get(b, [])), ha="center", va="top", fontsize=7)
    ax.text(-0.15, 0.3, "physical pool", ha="right", va="center", fontsize=9, weight="bold")
    ax.text(-0.15, 1.4 + 0.8 * len(rows) + 0.1, "logical blocks", ha="right", va="center",
            fontsize=9, weight="bold")
    widest = max([ledger.num_blocks] + [len(t) for _, t in rows])
    ax.set_xlim(-2.2, max(widest, 1) + 0.2)
    ax.set_ylim(-0.2 - 0.15 * max((len(u) for u in users.values()), default=1), 1.4 + 0.8 * len(rows) + 0.3)
    ax.axis("off")
    ax.set_title(f"S={S}: logical {ledger.logical_tokens}, unique {ledger.unique_tokens}, "
                 f"reserved {ledger.reserved_slots}, slack {ledger.slack} (token slots)", fontsize=10)
    return ax


def plot_slack_vs_block_size(lengths: Sequence[int], block_sizes: Sequence[int], ax=None):
    """Measured tail slack per request against the ``(S-1)/2`` prediction, for each block size ``S``."""
    if not len(lengths) or not len(block_sizes):
        raise ValueError(f"need at least one request and one block size, got {len(lengths)} lengths "
                         f"and block_sizes={list(block_sizes)!r}")
    ax = _axes(ax, (6, 3.5))
    measured = [acc.tail_slack(lengths, S) / len(lengths) for S in block_sizes]
    predicted = [acc.expected_slack_per_request(S) for S in block_sizes]
    ax.plot(block_sizes, predicted, "-", color="0.5", label="prediction (S-1)/2")
    ax.plot(block_sizes, measured, "o", color=TOKEN, label=f"measured on {len(lengths)} requests")
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1)  # S=1 has zero slack
    ax.set_ylim(bottom=0)
    ax.set_xlabel("block size S (tokens)")
    ax.set_ylabel("tail slack per request (slots)")
    ax.legend()
    return ax


def plot_kv_capacity(models: Sequence[str], gpu_memory_bytes: int, ax=None, **capacity_kwargs):
    """Horizontal bars: tokens of KV cache that fit beside each model's weights on one GPU."""
    if not len(models):
        raise ValueError("models must name at least one model preset or ModelSpec, got none")
    ax = _axes(ax, (6, 0.45 * len(models) + 1))
    caps = [acc.kv_capacity(m, gpu_memory_bytes, **capacity_kwargs).tokens for m in models]
    y = np.arange(len(models))
    ax.barh(y, caps, color=TOKEN)
    for yi, c in zip(y, caps):
        ax.text(c, yi, f" {c:,}", va="center", fontsize=8)
    ax.set_yticks(y, models)
    ax.invert_yaxis()
    ax.set_xlabel(f"KV-cache tokens on a {gpu_memory_bytes / acc.GiB:.0f} GiB GPU")
    ax.set_xlim(0, max(caps) * 1.25)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e3:,.0f}k"))
    return ax
