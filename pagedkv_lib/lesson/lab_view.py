"""The interactive labs of the Demo lesson, as widgets around :mod:`pagedkv_lib.lesson.lab` and the simulator.

:class:`AllocationLab`: pick a trace, type a block size, set sharing; predict which effect is
largest in token slots; after the commit see the block map, the ledger, the contiguous comparison,
the explanation and the verdict. Every control change plays the new configuration at once
(so its figures are checked), then re-arms the gate: nothing about it shows until a new commit.

:class:`SimulatorLab`: run the serving simulator's policies on a chosen trace (progress bar),
predict how many times larger the paged batch is than the contiguous ``"max"`` batch, then see
``pagedkv_lib.sim.plots.plot_results``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from . import access, viz, gates as W
from ..figure_text import describe
from ..palette import HATCHES, text_on
from ..validation import check_choice, check_int
from .record import Slot
from .views import Shown
from .lab import DESCRIPTIONS, EFFECTS, TRACES, LabRun, explain, ledger_table, run_lab
from ..sim import POLICIES, alpaca_like, format_table, parallel_sampling, run_policies, sharegpt_like
from ..sim.plots import plot_results
from .gates import Gate

MAP_LIMIT = 160
"""Most pool blocks drawn as a block map; larger pools get one row of blocks per sequence."""

SAVED_COMMITS = 8
"""Commits of one lab saved with the notebook (each needs an output slot made when the lab cell ran);
later ones stay in the kernel's record (``gates.record()``)."""


class _Slotted(Shown):
    """A lab shown with its slots under it; each armed gate takes the first empty one. A lab is its own
    widget view (its ``box``)."""

    slots: list

    def _slot(self) -> Slot | None:
        return next((s for s in self.slots if s.empty), None)

    @property
    def widget(self):
        return self

    def shown_slots(self) -> list:
        return self.slots


def plot_tables(run: LabRun, ax=None):
    """One row per sequence: its blocks left to right, own blocks blue, shared (ref count > 1)
    orange and cross-hatched, tail slack hatched. For pools too large for :func:`pagedkv_lib.lesson.viz.plot_block_map`."""
    m, S = run.manager, run.block_size
    ids = run.request_ids
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 1.4 + 0.22 * len(ids)))
    rows = []
    for row, rid in enumerate(ids):
        T, table = m.num_tokens(rid), m.block_table(rid)
        spans = {True: [], False: []}
        for j, b in enumerate(table):
            spans[m.ref_count(b) > 1].append((j * S, min(S, T - j * S)))
        ax.broken_barh(spans[False], (row - 0.4, 0.8), fc=viz.TOKEN)
        ax.broken_barh(spans[True], (row - 0.4, 0.8), fc=viz.SHARED, ec=text_on(viz.SHARED), lw=0,
                       hatch=HATCHES["shared"])
        ax.broken_barh([(T, len(table) * S - T)], (row - 0.4, 0.8), fc="white", ec="0.5", hatch=HATCHES["slack"])
        rows.append((rid, T, len(table), len(spans[True]), len(table) * S - T))
    ax.set_yticks(range(len(ids)), ids, fontsize=8)
    ax.set_ylim(len(ids) - 0.5, -0.5)
    ax.set_xlabel("token slots of each block table, in logical order")
    ax.set_title(f"S={S}: each sequence's blocks ({m.stats().used_blocks:,} blocks in use)", fontsize=10,
                 pad=22)
    ax.legend(handles=[Patch(fc=viz.TOKEN, label="own block"),
                       Patch(fc=viz.SHARED, ec=text_on(viz.SHARED), hatch=HATCHES["shared"],
                             label="shared block (ref count > 1)"),
                       Patch(fc="white", ec="0.5", hatch=HATCHES["slack"], label="tail slack")],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    describe(ax, f"Each of the {len(ids)} sequences' block tables at block size {S}, one row each: its own "
             "blocks, the blocks it shares with other tables, and its tail slack.",
             ["sequence", "tokens", "blocks in its table", "of them shared", "tail slack (slots)"], rows)
    return ax


def block_map_figure(run: LabRun):
    """The chosen run's block map (a grid of the pool) when small enough, else :func:`plot_tables`."""
    m, S = run.manager, run.block_size
    if m.num_blocks <= MAP_LIMIT:
        cols = max(1, min(m.num_blocks, int(7.5 / max(0.45, 0.1 * S))))  # about 9 inches wide
        first = run.request_ids[0]
        follow = first if 1.25 * len(m.block_table(first)) <= cols else None  # its row must fit
        ax = viz.plot_block_map(m, run.request_ids, follow=follow, cols=cols)
    else:
        ax = plot_tables(run)
    ax.figure.tight_layout()
    return ax.figure


def slots_figure(run: LabRun):
    """Token slots reserved for the same sequences: contiguous (three policies) against paged."""
    rows = []
    for policy, arena in run.contiguous.items():
        c = arena.categories()
        rows.append((f"contiguous, {policy}", c["token_states"],
                     c["reservation"] + c["internal_fragmentation"] + c["external_fragmentation"]))
    for name, m in (("paged, nothing shared", run.unshared), ("paged, sharing", run.manager)):
        if name.endswith("nothing shared") or run.sharing:
            st = m.stats()
            rows.append((f"{name} (S={run.block_size})", st.unique_tokens, st.slack))
    fig, ax = plt.subplots(figsize=(8, 1.3 + 0.4 * len(rows)))
    y = list(range(len(rows)))
    stored = [r[1] for r in rows]
    unused = [r[2] for r in rows]
    paged = [name.startswith("paged") for name, _, _ in rows]
    ax.barh(y, stored, color=viz.TOKEN, label="token states stored")
    for yi, u, s, p in zip(y, unused, stored, paged):
        cat = "slack" if p else "internal_fragmentation"
        ax.barh(yi, u, left=s, color=viz.COLORS[cat], ec=text_on(viz.COLORS[cat]), lw=0, hatch=HATCHES[cat])
    for yi, s, u in zip(y, stored, unused):
        ax.text(s + u, yi, f" {s + u:,}", va="center", fontsize=9)
    ax.set_yticks(y, [r[0] for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.18 * max(s + u for s, u in zip(stored, unused)))
    ax.set_xlabel(f"token slots reserved for the {len(run.request_ids)} sequences "
                  f"(context {run.context:,} tokens)")
    ax.legend(handles=[Patch(fc=viz.TOKEN, label="token states stored"),
                       Patch(fc=viz.COLORS["internal_fragmentation"], ec=text_on(viz.COLORS["internal_fragmentation"]),
                             hatch=HATCHES["internal_fragmentation"], label="contiguous: reserved, never used"),
                       Patch(fc=viz.SLACK, ec=text_on(viz.SLACK), hatch=HATCHES["slack"], label="paged: tail slack")],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    describe(ax, f"Token slots reserved for the same {len(run.request_ids)} sequences, one bar per layout: "
             + "; ".join(f"{name} reserves {s + u:,} ({s:,} stored, {u:,} unused)" for name, s, u in rows) + ".",
             ["layout", "token states stored", "reserved but unused", "reserved in all"],
             [(name, s, u, s + u) for name, s, u in rows])
    fig.tight_layout()
    return fig


class AllocationLab(_Slotted):
    """Controls, a gated prediction, and (after the commit) what the block manager did."""

    def __init__(self, trace: str = "A1-A3 batch", block_size: int = 16, sharing: bool = True, n: int = 4):
        import ipywidgets as w
        style = {"description_width": "13em"}
        wide = w.Layout(width="36em")
        self.trace = w.Dropdown(options=list(TRACES), value=trace, description="trace", style=style, layout=wide)
        # Number boxes, not sliders: ipywidgets' slider handle has no accessible name (WCAG 4.1.2), and a
        # number box is typed or stepped with the arrow keys. Each applies on Enter or when focus leaves it.
        narrow = w.Layout(width="20em")
        self.block_size = w.BoundedIntText(value=block_size, min=1, max=64, description="block size S (tokens)",
                                           style=style, layout=narrow)
        self.sharing = w.Checkbox(value=sharing, description="sharing (prefix cache and forks)", indent=False)
        self.n = w.BoundedIntText(value=n, min=2, max=8, description="n (samples or beams)", style=style,
                                  layout=narrow)
        self.about = w.HTML()
        self.gate_box = w.VBox()
        self.status = access.announcer()   # reads out each rebuild in one line
        self.box = access.control(w.VBox([self.trace, self.block_size, self.n, self.sharing, self.about,
                                          self.status, self.gate_box]))
        self.run: LabRun | None = None
        self.gate: Gate | None = None
        self.slots = [Slot() for _ in range(SAVED_COMMITS)]
        for control in (self.trace, self.block_size, self.sharing, self.n):
            control.observe(self._arm, names="value")
        self._arm()

    def _arm(self, change=None) -> None:
        """Play the configuration now (checks run headless), and ask for a fresh prediction."""
        run = run_lab(self.trace.value, self.block_size.value, self.sharing.value, self.n.value)
        question = (f"{self.trace.value}, S = {run.block_size}, sharing {'on' if run.sharing else 'off'}"
                    f"{f', n = {run.n}' if run.trace in ('parallel sampling', 'beam search') else ''}. "
                    "Which effect is largest, in token slots, once every sequence is complete?")
        self.run = run
        self.gate = W.arm(Gate("lab-effect", question, choices=EFFECTS, answer=run.dominant,
                               reveal=[lambda: block_map_figure(run), ledger_table(run),
                                       lambda: slots_figure(run), explain(run)]))
        self.gate.slot = self._slot()
        self.about.value = f"<i>This trace:</i> {DESCRIPTIONS[run.trace]}."
        self.gate_box.children = (self.gate.widget.box,)
        if change is not None:
            access.announce(self.status, rebuilt(", ".join(f"{k} {v}" for k, v in self.state().items())))

    def set(self, **controls) -> "AllocationLab":
        """Move controls from code (``trace=``, ``block_size=``, ``sharing=``, ``n=``); each re-arms.

        Every value is checked before any control moves (a number box would clamp a bad one silently).
        """
        for name, value in controls.items():
            if name == "trace":
                check_choice("trace", value, TRACES)
            elif name in ("block_size", "n"):
                box = getattr(self, name)
                check_int(name, value, minimum=box.min, maximum=box.max)
            elif name == "sharing":
                if not isinstance(value, bool):
                    raise TypeError(f"sharing must be True or False, got {value!r}")
            else:
                raise TypeError(f"unknown control {name!r}; the controls are trace, block_size, sharing, n")
        for name, value in controls.items():
            getattr(self, name).value = value
        return self

    def commit(self, choice: str) -> None:
        """Commit a prediction from code, as :func:`pagedkv_lib.lesson.gates.commit` does."""
        W.commit(self.gate.id, choice)

    def state(self) -> dict:
        """The controls as they stand (trace, block size, sharing, n): what a demo state hands on."""
        run = self.run
        state = {"trace": run.trace, "block size S": run.block_size, "sharing": "on" if run.sharing else "off"}
        if run.trace in ("parallel sampling", "beam search"):
            state["n"] = run.n
        return state

    def ask(self, folder=None):
        """The Demo lesson's research room on this lab's state (and your prediction, once committed)."""
        from .room import research_room
        return research_room("04_demo", "lab", lab=self, folder=folder)

    def text(self) -> str:
        return ("ALLOCATION LAB (without widgets, change controls with this object's "
                ".set(trace=..., block_size=..., sharing=..., n=...))\n" + self.gate.text())


SIM_REQUESTS, SAMPLED_REQUESTS, SAMPLES = 300, 150, 2
"""Requests in each of the simulator lab's traces; in the sampled one, prompts and the samples each one asks for."""

PAPER_TRACE = f"ShareGPT-like, {SIM_REQUESTS} requests"
"""The trace the simulator lab opens on, the one its figure sets beside the paper's."""

SIM_TRACES = {
    PAPER_TRACE: lambda: sharegpt_like(SIM_REQUESTS, seed=0),
    f"Alpaca-like, {SIM_REQUESTS} requests": lambda: alpaca_like(SIM_REQUESTS, seed=0),
    f"ShareGPT-like, {SAMPLED_REQUESTS} requests x {SAMPLES} samples":
        lambda: parallel_sampling(sharegpt_like(SAMPLED_REQUESTS, seed=0), SAMPLES),
}
"""Traces the simulator lab offers: every request queued at step 0, OPT-13B on a 40 GiB GPU."""


def rebuilt(what: str) -> str:
    """The one line a screen reader reads when a lab has been rebuilt for ``what`` (its new controls)."""
    return f"Rebuilt for {what}. A new prediction is open below; nothing is shown until you commit it."


def batch_ratio(results) -> float:
    """Mean running batch of ``"paged"`` over that of ``"max"`` (how many times larger)."""
    by = {r.policy: r.summary["mean_batch"] for r in results}
    return by["paged"] / by["max"]


class SimulatorLab(_Slotted):
    """Run the five policies on a chosen trace, gate the batch-size prediction, then show the figure."""

    def __init__(self, trace: str = PAPER_TRACE):
        import ipywidgets as w
        check_choice("trace", trace, tuple(SIM_TRACES))
        self.trace = w.Dropdown(options=list(SIM_TRACES), value=trace, description="trace",
                                layout=w.Layout(width="32em"))
        self.progress = w.Output()
        self.gate_box = w.VBox()
        self.status = access.announcer()   # reads out each rebuild in one line
        self.box = access.control(w.VBox([self.trace, self.progress, self.status, self.gate_box]))
        self.results, self.gate = None, None
        self.slots = [Slot() for _ in SIM_TRACES]
        self.trace.observe(self._arm, names="value")
        self._arm()

    def _arm(self, change=None) -> None:
        from tqdm.auto import tqdm
        name = self.trace.value
        trace, results = SIM_TRACES[name](), []
        with self.progress:
            for policy in tqdm(POLICIES, desc=f"simulating {name}", leave=False):
                results += run_policies(trace, [policy], progress=False)
            self.progress.clear_output()  # the closed bar would leave a dangling widget view
        self.results = results
        ratio = batch_ratio(results)
        rows = [{k: r.summary[k] for k in ("policy", "mean_batch", "peak_batch", "preemptions",
                                            "share_token_states")} for r in results]
        self.gate = W.arm(Gate(
            "sim-batch", f"{name}: how many times larger is the mean running batch under 'paged' "
            "than under 'max'?", number="x", answer=round(ratio, 1), tolerance=0.25,
            reveal=[lambda: plot_results(results, name, paper=name == PAPER_TRACE),
                    "```\n" + format_table(rows) + "\n```", _sim_note(results, ratio)]))
        self.gate.slot = self._slot()
        self.gate_box.children = (self.gate.widget.box,)
        if change is not None:
            access.announce(self.status, rebuilt(f"trace {name}"))

    def commit(self, value) -> None:
        """Commit a prediction from code, as :func:`pagedkv_lib.lesson.gates.commit` does."""
        W.commit(self.gate.id, value)

    def text(self) -> str:
        return "SIMULATOR LAB (without widgets, choose a trace with SimulatorLab(trace))\n" + self.gate.text()


def _sim_note(results, ratio: float) -> str:
    by = {r.policy: r.summary for r in results}
    n = by["paged"]["requests"]
    return (f"The paged batch is {ratio:.1f}x max's: a contiguous server that reserves the whole "
            "context for every sequence runs few requests at once, while paged memory holds only "
            "what each sequence has written. With every request queued at step 0 the paged runs "
            f"preempt about once per request ({by['paged']['preemptions']:,} preemptions for {n:,} "
            "requests): admission fills the cache, then growing sequences need blocks that are not "
            "there. A larger batch is more sequences per step, not a measured speed.")
