"""Matplotlib figures of the course: block tables, slack and capacity (the math notebook), and
live allocator state (block maps of a real ``BlockManager``, contiguous arenas).

Each ``plot_*`` function draws on an ``ax`` (or makes one) and returns it. Colours and hatching come
from :mod:`pagedkv_lib.palette`, shared with the simulator's figures; each function attaches the data it
drew as text (:func:`pagedkv_lib.figure_text.describe`), which a notebook shows beside the image.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from .. import accounting as acc
from ..validation import check_int
from ..blocks.manager import BlockManager
from ..blocks.contiguous import ContiguousArena
from ..ledger import Ledger
from ..figure_text import describe
from ..palette import CACHED, COLORS, HATCHES, OWNERS, SHARED, text_on

TOKEN, SLACK = COLORS["token_states"], COLORS["slack"]


def _axes(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _draw_block(ax, x, y, filled, S, outline=None):
    """One block of ``S`` slots at (x, y), left to right; the first ``filled`` slots hold tokens."""
    for s in range(S):
        token = s < filled
        ax.add_patch(plt.Rectangle((x + s * 0.9 / S, y), 0.9 / S, 0.6, fc=TOKEN if token else SLACK,
                                   ec="white" if token else "0.3", lw=0.5,
                                   hatch=None if token else HATCHES["slack"]))
    if outline:
        ax.add_patch(plt.Rectangle((x - 0.03, y - 0.05), 0.96, 0.7, fill=False, ec=outline, lw=2))


def plot_block_tables(ledger: Ledger, ax=None):
    """Each request's logical blocks (top rows) and the physical pool they map to (bottom row).

    Above each logical block: the physical block id it maps to; above each physical block: its
    id, and below it the requests whose tables hold it. Dark blue slots hold tokens, grey hatched
    slots are slack, thick orange outlines mark shared blocks (see the legend).
    """
    S, fill = ledger.block_size, ledger.block_fill
    users: dict[int, list[str]] = {}
    rows = list(ledger.tables.items())
    ax = _axes(ax, (max(6.0, 0.8 * ledger.num_blocks + 2.5), 2.2 + 0.9 * len(rows)))
    for r, (rid, table) in enumerate(rows):
        y = 1.6 + 0.9 * (len(rows) - 1 - r)
        ax.text(-0.15, y + 0.3, f"{rid}  T={sum(fill[b] for b in table)}", ha="right", va="center",
                fontsize=10)
        for j, b in enumerate(table):
            users.setdefault(b, []).append(rid)
            _draw_block(ax, j, y, fill[b], S)
            ax.text(j + 0.45, y + 0.64, f"-> {b}", ha="center", va="bottom", fontsize=8)
    for b in range(ledger.num_blocks):
        shared = len(users.get(b, [])) > 1
        _draw_block(ax, b, 0, fill.get(b, 0), S, outline=SHARED if shared else None)
        ax.text(b + 0.45, 0.68, str(b), ha="center", va="bottom", fontsize=9, weight="bold")
        ax.text(b + 0.45, -0.1, "\n".join(users.get(b, [])), ha="center", va="top", fontsize=9)
    ax.text(-0.15, 0.3, "physical pool", ha="right", va="center", fontsize=10, weight="bold")
    ax.text(-0.15, 1.6 + 0.9 * len(rows) + 0.05, "logical blocks", ha="right", va="center",
            fontsize=10, weight="bold")
    widest = max([ledger.num_blocks] + [len(t) for _, t in rows])
    ax.set_xlim(-2.3, max(widest, 1) + 0.2)
    tallest = max((len(u) for u in users.values()), default=1)
    ax.set_ylim(-0.25 - 0.3 * tallest, 1.6 + 0.9 * len(rows) + 0.3)
    ax.axis("off")
    ax.legend(handles=[Patch(fc=TOKEN, label="token slot"),
                       Patch(fc=SLACK, ec="0.3", hatch=HATCHES["slack"], label="slack slot"),
                       Patch(fill=False, ec=SHARED, lw=2, label="shared block")],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)
    ax.set_title(f"S={S}: logical {ledger.logical_tokens}, unique {ledger.unique_tokens}, "
                 f"reserved {ledger.reserved_slots}, slack {ledger.slack} (token slots)",
                 fontsize=10, loc="left")
    describe(ax, f"Block tables at block size {S}: " + "; ".join(
        f"{rid} holds {sum(fill[b] for b in table)} tokens in physical blocks {', '.join(map(str, table))}"
        for rid, table in rows) + f". The pool has {ledger.num_blocks} blocks of {S} slots.",
        ["physical block", f"tokens held (of {S})", "slack slots", "held by", "shared"],
        [(b, fill.get(b, 0), S - fill.get(b, 0) if b in users else 0, ", ".join(users.get(b, [])) or "nobody",
          "yes" if len(users.get(b, [])) > 1 else "no") for b in range(ledger.num_blocks)])
    return ax


def plot_slack_vs_block_size(lengths: Sequence[int], block_sizes: Sequence[int], axes=None):
    """Measured tail slack per request against the ``(S-1)/2`` prediction, for each block size ``S``.

    Two panels (pass ``axes`` as a pair, or get a new figure): slack per request in slots on
    log-log axes (``S = 1`` has no slack and no point there), and the measured value's gap from
    the prediction in percent, which shows where the prediction stops holding. Returns the pair.
    """
    if not len(lengths) or not len(block_sizes):
        raise ValueError(f"need at least one request and one block size, got {len(lengths)} lengths "
                         f"and block_sizes={list(block_sizes)!r}")
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True,
                               gridspec_kw={"height_ratios": [3, 2]})
    top, gap = axes
    sizes = np.asarray(block_sizes)
    measured = np.array([acc.tail_slack(lengths, S) / len(lengths) for S in block_sizes])
    predicted = np.array([acc.expected_slack_per_request(S) for S in block_sizes])
    curve = np.geomspace(max(2, sizes.min()), max(2, sizes.max()), 200)
    top.plot(curve, (curve - 1) / 2, "-", color="0.5", label="prediction (S-1)/2")
    pos = measured > 0
    top.plot(sizes[pos], measured[pos], "o", color=TOKEN, label=f"measured on {len(lengths)} requests")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("tail slack per request (slots)")
    top.legend(loc="upper left")
    top.margins(y=0.15)
    ok = predicted > 0
    # the band's dashed edges (#595959, 7:1 on white) mark it; its light fill alone is 1.3:1 (WCAG 1.4.11)
    gap.axhspan(-_BAND, _BAND, fc="0.93", ec="0.35", ls="--", lw=1.2, label=f"within {_BAND}%")
    gap.axhline(0, color="0.5", lw=1)
    gap.plot(sizes[ok], 100 * (measured[ok] / predicted[ok] - 1), "o-", color=TOKEN)
    gap.set_ylabel("measured vs prediction (%)")
    gap.set_xlabel("block size S (tokens)")
    gap.legend(loc="upper left")
    gap.set_xticks(sizes, [str(S) for S in block_sizes])
    gap.margins(y=0.15)
    describe(top, f"Measured tail slack per request on {len(lengths)} requests against the prediction (S-1)/2, "
             f"for block sizes {', '.join(map(str, block_sizes))}; the lower panel is the measured value's "
             f"gap from the prediction in percent (within {_BAND}% shaded).",
             ["block size S", "measured slack per request (slots)", "predicted (S-1)/2", "gap from prediction (%)"],
             [(int(S), float(m), float(p), f"{100 * (m / p - 1):+.1f}" if p > 0 else "no slack at S = 1")
              for S, m, p in zip(sizes, measured, predicted)])
    return top, gap


def _count(v, _=None) -> str:
    """Axis tick of a token count: 0, 500k, 1.5M."""
    return "0" if v == 0 else f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k"


def plot_kv_capacity(models: Sequence[str], gpu_memory_bytes: int, ax=None, **capacity_kwargs):
    """Horizontal bars: tokens of KV cache that fit beside each model's weights on one GPU.

    Each bar is labelled with the model's KV heads and bytes per token, the figures that set it.
    """
    if not len(models):
        raise ValueError("models must name at least one model preset or ModelSpec, got none")
    ax = _axes(ax, (7, 0.6 * len(models) + 1))
    specs = [acc.get_model(m) for m in models]
    caps = [acc.kv_capacity(m, gpu_memory_bytes, **capacity_kwargs).tokens for m in specs]
    y = np.arange(len(models))
    ax.barh(y, caps, color=TOKEN)
    for yi, c in zip(y, caps):
        ax.text(c, yi, f" {c:,}", va="center", fontsize=8)
    heads = ["MLA latent" if m.is_mla else f"{m.num_kv_heads} KV heads" for m in specs]
    ax.set_yticks(y, [f"{m.name}\n{h}, {acc.bytes_per_token(m) / 1024:g} KiB/token"
                      for m, h in zip(specs, heads)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"KV-cache tokens on one {gpu_memory_bytes / acc.GiB:g} GiB GPU")
    ax.set_xlim(0, max(caps) * 1.25)
    ax.xaxis.set_major_formatter(FuncFormatter(_count))
    describe(ax, f"Tokens of KV cache that fit beside each model's weights on one "
             f"{gpu_memory_bytes / acc.GiB:g} GiB GPU, one bar per model: "
             + "; ".join(f"{m.name} {c:,}" for m, c in zip(specs, caps)) + ".",
             ["model", "KV heads", "KiB per token", "KV-cache tokens"],
             [(m.name, h, f"{acc.bytes_per_token(m) / 1024:g}", c) for m, h, c in zip(specs, heads, caps)])
    return ax


# ---------------------------------------------------------------------- live allocator state

_BAND = 5  # percent: the shaded band around the slack prediction
_ROW = 1.0  # block height (data units); a block is S slots wide, one slot = 1 data unit


def _live_blocks(manager: BlockManager, request_ids) -> tuple[list[list[str]], list[int]]:
    """Per physical block: the listed requests whose tables hold it, and the tokens it holds."""
    if isinstance(request_ids, (str, bytes)) or not isinstance(request_ids, Iterable):
        raise TypeError(f"request_ids must be a list of request ids, got {request_ids!r}")
    ids = list(request_ids)
    if len(set(ids)) != len(ids) or len(ids) != manager.num_requests:
        raise ValueError(f"request_ids must list each of the manager's {manager.num_requests} live "
                         f"requests once, got {ids!r}")
    S, N = manager.block_size, manager.num_blocks
    owners: list[list[str]] = [[] for _ in range(N)]
    filled = [0] * N
    for rid in ids:
        T = manager.num_tokens(rid)  # raises UnknownRequestError for an id it does not hold
        for j, b in enumerate(manager.block_table(rid)):
            owners[b].append(rid)
            filled[b] = max(filled[b], min(S, T - j * S))
    for b in manager.free_queue()[1]:
        filled[b] = S  # only full blocks are cached
    return owners, filled


def _block(ax, x, y, S, filled, color, state, gid, hatch_slack=True):
    """One block of ``S`` slots with its lower left at (x, y): tokens (cross-hatched when shared),
    hatched slack, an outline."""
    if filled:
        ax.add_patch(Rectangle((x, y), filled, _ROW, fc=color, ec="white" if state == "shared" else "none",
                               lw=0, hatch=HATCHES["shared"] if state == "shared" else None))
    if filled < S:
        ax.add_patch(Rectangle((x + filled, y), S - filled, _ROW, fc="white", ec="0.6", lw=0,
                               hatch=HATCHES["slack"] if hatch_slack and state != "free" else None))
    if 1 < S <= 32:
        ax.vlines(x + np.arange(1, S), y, y + _ROW, colors="white", lw=0.6)
    ax.add_patch(Rectangle((x, y), S, _ROW, fill=False, lw=2.5 if state == "shared" else 1,
                           ec="black", ls="--" if state == "cached" else "-", gid=gid, zorder=3))


def plot_block_map(manager: BlockManager, request_ids: Sequence[str] | None = None, *,
                   follow: str | None = None, cols: int | None = None, ax=None):
    """The physical blocks of a live :class:`~pagedkv_lib.blocks.manager.BlockManager` as a grid.

    ``request_ids`` lists every live request (their colours follow :data:`OWNERS` in this
    order; default: ``manager.request_ids()``, the order they were added). A block held by one table shows its owner's colour; a block with ref count > 1 is
    orange and cross-hatched, with a thick outline and its ref count beside its id ("0 x3"); a block
    one table holds has its owner's name beside its id ("9 A1"); slack slots are hatched; cached free
    blocks are grey with a dashed outline; free blocks are white. ``follow`` names one request
    whose logical blocks are drawn above the grid with arrows to their physical blocks.
    Each physical block's outline has the gid ``"block:<id>:<used|shared|cached|free>"``.
    """
    if request_ids is None:
        request_ids = manager.request_ids()
    owners, filled = _live_blocks(manager, request_ids)
    S, N = manager.block_size, manager.num_blocks
    cols = check_int("cols", cols, minimum=1) if cols is not None else min(N, 16 if S <= 8 else 8)
    rows = -(-N // cols)
    top = 2.2 if follow is not None else 0.0
    ax = _axes(ax, (min(13.0, 1.5 + cols * max(0.45, 0.1 * S)), 1.3 + 0.75 * rows + 0.5 * top))
    colour = {rid: OWNERS[i % len(OWNERS)] for i, rid in enumerate(request_ids)}
    cached = set(manager.free_queue()[1])
    where = {}
    for b in range(N):
        x, y = (b % cols) * S, -(b // cols) * 1.8 * _ROW
        where[b] = (x, y)
        refs = len(owners[b])
        state = "shared" if refs > 1 else "used" if refs else "cached" if b in cached else "free"
        color = {"shared": SHARED, "used": colour[owners[b][0]] if refs else None,
                 "cached": CACHED, "free": "white"}[state]
        _block(ax, x, y, S, filled[b], color, state, f"block:{b}:{state}")
        label = f"{b} x{refs}" if state == "shared" else f"{b} {owners[b][0]}" if refs else str(b)
        ax.text(x + S / 2, y - 0.12, label, ha="center",
                va="top", fontsize=8, weight="bold" if state == "shared" else "normal")
    if follow is not None:
        _follow_arrows(ax, manager, follow, where, colour[follow], top)
    st = manager.stats()
    ax.set_title(f"S={S}: {st.used_blocks} blocks in use, {sum(len(o) > 1 for o in owners)} shared, "
                 f"{st.cached_free_blocks} cached free, {st.free_blocks - st.cached_free_blocks} free | "
                 f"logical {st.logical_tokens}, unique {st.unique_tokens}, reserved "
                 f"{st.reserved_slots}, slack {st.slack}", fontsize=9)
    _block_legend(ax, colour, any(len(o) > 1 for o in owners), bool(cached))
    _describe_map(ax, manager, request_ids, owners, filled, cached, follow)
    ax.set_xlim(-0.5, cols * S + 0.5)
    ax.set_ylim(-(rows - 1) * 1.8 * _ROW - 0.6, _ROW + 0.5 + top)
    ax.axis("off")
    return ax


def _describe_map(ax, manager, request_ids, owners, filled, cached, follow):
    """The block map as text: each request's block table, then one row per physical block."""
    S = manager.block_size
    tables = "; ".join(f"{rid} ({manager.num_tokens(rid)} tokens) holds blocks "
                       f"{', '.join(map(str, manager.block_table(rid))) or 'none'}" for rid in request_ids)
    arrows = f" Arrows lead from {follow}'s logical blocks to their physical blocks." if follow else ""
    state = lambda b: ("shared" if len(owners[b]) > 1 else "in use" if owners[b]
                       else "cached free" if b in cached else "free")
    describe(ax, f"Physical blocks of {S} slots, {manager.num_blocks} in the pool. {tables}.{arrows}",
             ["physical block", "state", "ref count", f"tokens held (of {S})", "held by"],
             [(b, state(b), len(owners[b]), filled[b] if owners[b] or b in cached else 0,
               ", ".join(owners[b]) or "nobody") for b in range(manager.num_blocks)])


def _follow_arrows(ax, manager, rid, where, color, top):
    """Request ``rid``'s logical blocks in a row above the grid, an arrow from each to its block."""
    S, T = manager.block_size, manager.num_tokens(rid)
    y = _ROW + top - 0.9
    ax.text(-0.5, y + _ROW / 2, f"{rid}\nlogical", ha="right", va="center", fontsize=9)
    for j, b in enumerate(manager.block_table(rid)):
        x = j * S * 1.25
        _block(ax, x, y, S, min(S, T - j * S), color, "used", f"logical:{j}")
        ax.text(x + S / 2, y + _ROW + 0.05, f"logical {j}", ha="center", va="bottom", fontsize=7)
        bx, by = where[b]
        ax.annotate("", xy=(bx + S / 2, by + _ROW), xytext=(x + S / 2, y),
                    arrowprops=dict(arrowstyle="->", color="black", lw=0.8))


def _block_legend(ax, colour, any_shared, any_cached):
    handles = [Patch(fc=c, label=rid) for rid, c in colour.items()]
    if any_shared:
        handles.append(Patch(fc=SHARED, ec="white", lw=0, hatch=HATCHES["shared"], label="shared (ref count > 1)"))
    handles.append(Patch(fc="white", ec="0.6", hatch=HATCHES["slack"], label="tail slack"))
    if any_cached:
        handles.append(Patch(fc=CACHED, ec="black", ls="--", label="cached free (evictable)"))
    handles.append(Patch(fc="white", ec="black", label="free"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(6, len(handles)),
              fontsize=8, frameon=False)


def plot_contiguous(arena: ContiguousArena, next_request_len: int | None = None, ax=None):
    """A :class:`~pagedkv_lib.blocks.contiguous.ContiguousArena` as one strip of token slots, by category.

    Each run shows its live token states, the slots reserved for tokens still to come, and its
    internal fragmentation; free gaps too short for a waiting request of ``next_request_len``
    tokens are external fragmentation. Each segment's gid is its category; widths are slots.
    """
    cats = arena.categories(next_request_len)  # checks next_request_len
    ax = _axes(ax, (12, 1.6))
    ax.broken_barh([(0, arena.num_slots)], (0, _ROW), fc="white", ec="black", lw=1)
    for rid in arena.request_ids():
        start, size, live, final = arena.placement(rid)
        for cat, a, b in (("token_states", 0, live), ("reservation", live, final),
                          ("internal_fragmentation", final, size)):
            if b > a:
                ax.add_patch(Rectangle((start + a, 0), b - a, _ROW, fc=COLORS[cat], ec=text_on(COLORS[cat]),
                                       lw=0, hatch=HATCHES[cat] or None, gid=cat))
        ax.add_patch(Rectangle((start, 0), size, _ROW, fill=False, ec="black", lw=1.5, zorder=3))
        ax.text(start + size / 2, _ROW + 0.1, rid, ha="center", va="bottom", fontsize=9)
    need = None if next_request_len is None else arena.reservation_for(next_request_len)
    for start, length in arena.gaps():
        cat = "free" if need is None or length >= need else "external_fragmentation"
        ax.add_patch(Rectangle((start, 0), length, _ROW, fc=COLORS.get(cat, "white"), lw=0,
                               ec=text_on(COLORS.get(cat, "#FFFFFF")), hatch=HATCHES[cat] or None, gid=cat))
    reserved = sum(arena.placement(rid)[1] for rid in arena.request_ids())
    ax.set_title(f"runs reserve {reserved} slots: " + ", ".join(
        f"{c.replace('_', ' ')} {v}" for c, v in cats.items()), fontsize=9)
    handles = [Patch(fc=COLORS.get(c, "white"), ec="black", lw=0.5, hatch=HATCHES[c] or None,
                     label=c.replace("_", " ")) for c in cats]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=8,
              frameon=False)
    ax.set_xlim(-0.5, arena.num_slots + 0.5)
    ax.set_ylim(-0.3, _ROW + 0.6)
    ax.axis("off")
    _describe_strip(ax, arena, need, cats)
    return ax


def _describe_strip(ax, arena, need, cats):
    """The contiguous strip as text: one row per run and per free gap, left to right."""
    rows = []
    for rid in arena.request_ids():
        start, size, live, final = arena.placement(rid)
        rows.append((f"run {rid}", start, size, f"{live} token states, {final - live} reserved for tokens to come, "
                                                 f"{size - final} internal fragmentation"))
    for start, length in arena.gaps():
        kind = "free" if need is None or length >= need else "external fragmentation"
        rows.append(("gap", start, length, kind))
    rows.sort(key=lambda r: r[1])
    describe(ax, f"One strip of {arena.num_slots} token slots, runs and gaps left to right; slots by category: "
             + ", ".join(f"{c.replace('_', ' ')} {v}" for c, v in cats.items()) + ".",
             ["segment", "first slot", "slots", "what it holds"], rows)


def plot_three_ways(arena: ContiguousArena, paged: BlockManager, shared: BlockManager,
                    request_ids: Sequence[str], next_request_len: int | None = None):
    """The same requests stored contiguously, paged, and paged with a shared prefix; one figure.

    All three strips use one scale of token slots, so their lengths compare memory directly.
    Returns the figure; its first three axes are the panels (contiguous, paged, shared).
    """
    width = max(arena.num_slots, paged.num_blocks * paged.block_size,
                shared.num_blocks * shared.block_size)
    fig, axes = plt.subplots(3, 1, figsize=(12, 6.6))
    plot_contiguous(arena, next_request_len, ax=axes[0])
    axes[0].set_title(f"contiguous, policy {arena.policy!r} (max_len {arena.max_len}): "
                      + axes[0].get_title(), fontsize=9)
    for ax, manager, name in ((axes[1], paged, "paged"), (axes[2], shared, "paged, prefix shared")):
        plot_block_map(manager, request_ids, cols=manager.num_blocks, ax=ax)
        ax.set_title(f"{name}, " + ax.get_title(), fontsize=9)
    for ax in axes:
        ax.set_xlim(-0.5, width + 0.5)
    fig.tight_layout()
    return fig
