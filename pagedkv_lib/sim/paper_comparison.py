"""The simulator's figures beside the PagedAttention paper's (Kwon et al., SOSP 2023).

Two comparisons, each a list of `PaperRow` (percent of memory or of blocks):

* `token_state_rows`: the share of occupied KV memory that holds token states, per policy, against
  the paper's Fig. 2 (Orca Max / Pow2 / Oracle and vLLM; `PAPER_TOKEN_STATE_SHARE`);
* `sharing_rows`: blocks saved by sharing for parallel sampling and beam search (2, 4 and 6
  sequences per request, as the paper ran), against the paper's §6.3 range for the same dataset:
  Alpaca (Fig. 15, `PAPER_SHARING_SAVING`) or ShareGPT (given in its text, `PAPER_SHARING_SHAREGPT`).

`compare_to_paper` runs both for one setting: which dataset's lengths, how many requests, all
queued at once or arriving as a Poisson process, the maximum length (the context ``max`` reserves
and every request is capped at) and the block size. `gap_moves` says, row by row, whether a new
setting moved our figure toward the paper's or away from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..accounting import get_model
from ..validation import check_choice, check_int, check_number
from .simulate import PAPER_SHARING_SAVING, PAPER_TOKEN_STATE_SHARE, run_policies, simulate
from .workloads import Trace, alpaca_like, beam_search, parallel_sampling, poisson_arrivals, sharegpt_like

PAPER_SHARING_SHAREGPT = {"parallel sampling": (0.162, 0.305), "beam search": (0.443, 0.663)}
"""Blocks saved by sharing on ShareGPT in the paper's §6.3 text (range over 2, 4 and 6)."""

DATASETS = {"ShareGPT-like": sharegpt_like, "Alpaca-like": alpaca_like}
"""Trace generators by dataset name; the paper's ranges for sharing depend on the dataset."""

SYSTEMS = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)", "paged": "vLLM"}
"""The paper's name for the system each of our policies stands for (Fig. 2)."""

WIDTHS = (2, 4, 6)
"""Samples per request (parallel sampling) and beam widths the paper ran in §6.3."""


@dataclass(frozen=True)
class PaperRow:
    """One of our figures beside the paper's, in percent; ``paper`` is ``(low, high)``, equal for
    a single figure."""
    figure: str
    ours: float
    paper: tuple[float, float]

    @property
    def gap(self) -> float:
        """Percentage points from our figure to the paper's (its range): 0 inside it, signed
        positive when ours is above."""
        low, high = self.paper
        return self.ours - high if self.ours > high else self.ours - low if self.ours < low else 0.0


@dataclass(frozen=True)
class Setting:
    """What a learner may change; the defaults are the lesson's starting point."""
    dataset: str = "ShareGPT-like"
    requests: int = 300
    arrivals_per_s: float | None = None   # None: every request queued at step 0
    max_length: int = 2048                # tokens: what "max" reserves, and every request's cap
    block_size: int = 16                  # tokens per block

    def __post_init__(self):
        check_choice("dataset", self.dataset, tuple(DATASETS))
        check_int("requests", self.requests, minimum=10, maximum=2000)
        if self.arrivals_per_s is not None:
            check_number("arrivals_per_s", self.arrivals_per_s, low=0.0, high=1e6, low_open=True)
        check_int("max_length", self.max_length, minimum=256, maximum=32768)
        check_int("block_size", self.block_size, minimum=1, maximum=256)


@dataclass(frozen=True)
class Comparison:
    """One setting's rows beside the paper's, and the trace they were run on (its lengths, for the
    lesson's explanations)."""
    setting: Setting
    token_states: list
    sharing: list
    trace: Trace | None = field(default=None, compare=False, repr=False)

    @property
    def rows(self) -> list:
        return self.token_states + self.sharing


def _pct(x: float) -> float:
    return round(100.0 * x, 1)


def token_state_rows(results) -> list[PaperRow]:
    """Fig. 2 rows from `run_policies` results: each policy's ``share_token_states`` beside the
    paper's system (policies the paper did not run, such as ``paged+sharing``, are left out)."""
    return [PaperRow(f"Fig. 2 token states, {SYSTEMS[r.policy]}", _pct(r.summary["share_token_states"]),
                     (_pct(PAPER_TOKEN_STATE_SHARE[r.policy]),) * 2)
            for r in results if r.policy in SYSTEMS]


def sharing_rows(trace, dataset: str, **sim) -> list[PaperRow]:
    """§6.3 rows: blocks saved by sharing (``paged+sharing``'s ``sharing_saving``) for each of
    `WIDTHS`, beside the paper's range for ``dataset``; ``sim`` goes to `simulate`."""
    paper = PAPER_SHARING_SAVING if check_choice("dataset", dataset, tuple(DATASETS)) == "Alpaca-like" \
        else PAPER_SHARING_SHAREGPT
    rows = []
    for method, make in (("parallel sampling", parallel_sampling), ("beam search", beam_search)):
        low, high = paper[method]
        for n in WIDTHS:
            saved = simulate(make(trace, n), "paged+sharing", progress=False, **sim).summary
            rows.append(PaperRow(f"§6.3 blocks saved, {method}, {n}", _pct(saved["sharing_saving"]),
                                 (_pct(low), _pct(high))))
    return rows


def compare_to_paper(setting: Setting = Setting()) -> Comparison:
    """Both comparisons for ``setting`` (OPT-13B on a 40 GiB GPU, as the lesson's simulator)."""
    if not isinstance(setting, Setting):
        raise TypeError(f"setting must be a paper_comparison.Setting, got {type(setting).__name__}")
    trace = DATASETS[setting.dataset](setting.requests, seed=0, max_context=setting.max_length)
    if setting.arrivals_per_s is not None:
        trace = poisson_arrivals(trace, setting.arrivals_per_s)
    model = replace(get_model("OPT-13B"), max_context=setting.max_length)
    sim = {"model": model, "block_size": setting.block_size}
    results = run_policies(trace, tuple(SYSTEMS), progress=False, **sim)
    return Comparison(setting, token_state_rows(results), sharing_rows(trace, setting.dataset, **sim), trace)


def gap_moves(before: Comparison, after: Comparison) -> dict[str, float]:
    """For each row in both: how many percentage points closer to the paper ``after`` is than
    ``before`` (positive: moved toward the paper's figure; negative: away)."""
    old = {r.figure: abs(r.gap) for r in before.rows}
    return {r.figure: round(old[r.figure] - abs(r.gap), 1) for r in after.rows if r.figure in old}
