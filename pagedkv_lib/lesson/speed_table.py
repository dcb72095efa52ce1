"""The Code lesson's decode-speed section: the paging gate and its reveal, from a live measurement.

Everything the learner sees about the timing comes from one
:class:`~pagedkv_lib.kernels.timing.DecodeSpeed` measured in the lesson's kernel moments before:
the gate's choices (:data:`PAGING_CHOICES`), its answer (:func:`paging_answer`: the choice, or
tied choices, the measured ratio falls in), and the reveal (:func:`paging_reveal`: the table and
the sentences of :data:`TEXTS`, filled in from the measurement). The gate's answer key
(``answer_keys.code_keys``, gate ``q-paging``) calls these, so nothing of the answer is in the
notebook's source, and no number is measured anywhere but here, now.
"""
from __future__ import annotations

from ..kernels.gpu_timing import GPU_ROWS, gpu_unavailable, measure_gpu_decode_speed
from ..kernels.timing import ROWS as CPU_ROWS, DecodeSpeed, measure_decode_speed
from .claims import cited

__all__ = ["PAGING_CHOICES", "RATIO_RANGES", "PAPER_KERNEL_SLOWDOWN", "TEXTS", "measure_here", "paging_question",
           "paging_answer", "paging_reveal", "rows_markdown", "speed_rows"]

ROWS = {**CPU_ROWS, **GPU_ROWS}
"""Every row's name, on a CPU (:data:`~pagedkv_lib.kernels.timing.ROWS`) or a GPU
(:data:`~pagedkv_lib.kernels.gpu_timing.GPU_ROWS`)."""

_SAME, _SOMEWHAT, _MUCH = 0.95, 1.10, 1.50   # the ratios where "about the same", "somewhat" and "much slower" begin

PAGING_CHOICES = (f"faster than the contiguous read (under {_SAME:.2f}x its time)",
                  f"about the same ({_SAME:.2f}x to {_SOMEWHAT:.2f}x)",
                  f"somewhat slower ({_SOMEWHAT:.2f}x to {_MUCH:.2f}x)",
                  f"much slower (over {_MUCH:.2f}x)")
"""The gate's choices, in order; :data:`RATIO_RANGES` gives the ratios each one means."""

RATIO_RANGES = ((0.0, _SAME), (_SAME, _SOMEWHAT), (_SOMEWHAT, _MUCH), (_MUCH, float("inf")))
"""``[low, high)`` of paged-over-contiguous time ratios for each of :data:`PAGING_CHOICES`."""

CONFIDENCE = 0.9
"""How sure the interval around a measured median ratio is
(:meth:`~pagedkv_lib.kernels.timing.DecodeSpeed.ratio_interval`)."""

PAPER_KERNEL_SLOWDOWN = cited("kernel-slowdown")
"""Kwon et al., SOSP 2023, section 7.1 and Fig. 18a: the paged attention kernel 20-26% slower than
FasterTransformer's contiguous kernel (attention operation only, on a GPU), as registered in
:data:`.claims.CITED`."""

HEADER = ("On this machine, now: {requests} requests, {tokens:,} tokens, {mb:,.1f} MB of K and V per layer; "
          "copy bandwidth {gbs:.1f} GB/s; {where}; medians of {repeats} interleaved rounds. "
          "*Bound*: the least time the method's bytes take at that bandwidth, the bandwidth being the faster "
          "of two copies timed in the same rounds (a plain copy of as many bytes, and the copy-only row), so "
          "no copy takes less than its bound; a method that only reads can.")
QUESTION = ("{paged}, next to {contiguous}, reading the same K and V here ({where}), now: how long does the "
            "paged read take?")
STAND_IN = (" The fused kernels could not run here ({why}), so this asks about torch's two rows, which stand in "
            "for them.")
PAGING = ("**Paging's cost here:** {paged} took **{ratio:.2f}x** the time of {contiguous}: the median of the "
          "rounds' ratios, which lies between {q1:.2f}x and {q3:.2f}x with {confidence:.0%} confidence (single "
          "rounds ran from {low:.2f}x to {high:.2f}x).")
TIED = ("That interval spans a boundary between choices, so this machine's noise cannot tell them apart: "
        "each choice it touches counts as right.")
ORDER = ("With the same blocks laid out in logical order, the same kernel took {in_order:.2f}x. The step from "
         "the contiguous row to the in-order row is what following the block table costs; the step from the "
         "in-order row to the shuffled row is what jumping between scattered blocks costs.")
UNMEASURABLE = ("Its {confidence:.0%} interval, {q1:.2f}x to {q3:.2f}x, includes equal times: at this machine's "
                "noise, following the table cost nothing measurable.")
PAPER = ("The paper's GPU kernel took {low:.2f}x to {high:.2f}x the time of FasterTransformer's contiguous "
         "kernel (Kwon et al. 2023, section 7.1, Fig. 18a).")
TORCH = ("**Torch's paged row** took {gap:.1f} ms more than torch's contiguous row. Copying every block once, "
         "K and V (the copy-only row), took {copy:.1f} ms, and torch's paged decode copies only K, so the "
         "copy is at most that much of the gap. The rest is the work around the copy: each step of each request "
         "is about a dozen torch calls, each dispatched from Python; the matmuls read the copied K through a "
         "strided view; the weighted sum of V is an embedding_bag that reads each V row once per query head of "
         "its group; and scores and probabilities go out to memory and back between calls, where a fused "
         "kernel keeps them in registers.")
BELOW = "No attention method reached the bound; the nearest, {best}, reached {share:.0%} of it."
ABOVE = ("{best} reached {share:.0%} of the bound: a pass that only reads can beat a copy, which also "
         "fetches each line it writes and writes it back.")
MISSING = "(The fused rows are missing, so torch's rows stand in for them: {why}.)"
TEXTS = (HEADER, QUESTION, STAND_IN, PAGING, TIED, ORDER, UNMEASURABLE, PAPER, TORCH, BELOW, ABOVE, MISSING)
"""Every sentence of the reveal, as a template filled from the measurement."""


def measure_here(lens, **kwargs) -> DecodeSpeed:
    """The lesson's live measurement of a decode step of ``lens``, where the learner runs it: on a CUDA GPU with
    Triton (:func:`~pagedkv_lib.kernels.gpu_timing.measure_gpu_decode_speed`, fp16) when there is one, else on
    the CPU (:func:`~pagedkv_lib.kernels.timing.measure_decode_speed`, fp32). ``kwargs`` go to either."""
    if gpu_unavailable() is None:
        return measure_gpu_decode_speed(lens, **kwargs)
    return measure_decode_speed(lens, **kwargs)


def paging_question(speed: DecodeSpeed) -> str:
    """The gate's question, naming the two rows it judges (:meth:`~pagedkv_lib.kernels.timing.DecodeSpeed.paging_pair`),
    so that a learner predicts about the rows that decide, the stand-ins included where the fused kernels are
    missing."""
    paged, contiguous = speed.paging_pair()
    question = QUESTION.format(paged=_capital(ROWS[paged]), contiguous=ROWS[contiguous], where=speed.where)
    if speed.kernel_missing is not None:
        question += STAND_IN.format(why=speed.kernel_missing)
    return question


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def paging_answer(speed: DecodeSpeed):
    """The choice the measured ratio falls in; a tuple of choices (each right) where the :data:`CONFIDENCE`
    interval of the median ratio (:meth:`~pagedkv_lib.kernels.timing.DecodeSpeed.ratio_interval`) straddles a
    boundary, so that the machine's noise decides no verdict."""
    low, high = speed.ratio_interval(*speed.paging_pair(), confidence=CONFIDENCE)
    hits = [c for c, (a, b) in zip(PAGING_CHOICES, RATIO_RANGES) if a <= high and low < b]
    return hits[0] if len(hits) == 1 else tuple(hits)


def paging_reveal(speed: DecodeSpeed) -> list[str]:
    """What the gate shows after the commit: :func:`rows_markdown`, then the sentences of :data:`TEXTS`."""
    paged, contiguous = speed.paging_pair()
    ratios = speed.round_ratios(paged, contiguous)
    s = speed.seconds
    q1, q3 = speed.ratio_interval(paged, contiguous, confidence=CONFIDENCE)
    said = [PAGING.format(paged=ROWS[paged], contiguous=ROWS[contiguous], ratio=speed.paging_ratio(),
                          q1=q1, q3=q3, low=ratios[0], high=ratios[-1], confidence=CONFIDENCE)]
    if isinstance(paging_answer(speed), tuple):
        said[0] += " " + TIED
    if "fused in order" in s:
        said.append(ORDER.format(in_order=speed.ratio("fused in order", "fused contiguous")))
        low, high = speed.ratio_interval("fused in order", "fused contiguous", confidence=CONFIDENCE)
        if low <= 1.0 <= high:
            said[-1] += " " + UNMEASURABLE.format(q1=low, q3=high, confidence=CONFIDENCE)
    if speed.kernel_missing is None:
        fewest, most = PAPER_KERNEL_SLOWDOWN.values                 # percent slower
        said.append(PAPER.format(low=1 + fewest / 100, high=1 + most / 100))
    if "torch paged" in s:
        said.append(TORCH.format(gap=(s["torch paged"] - s["torch contiguous"]) * 1e3, copy=s["copy"] * 1e3))
    share = {key: speed.share_of_bound(key) for key in s if key != "copy"}
    best = max(share, key=share.get)
    said.append((BELOW if share[best] < 1 else ABOVE).format(best=ROWS[best], share=share[best]))
    if speed.kernel_missing is not None:
        said.append(MISSING.format(why=speed.kernel_missing))
    return [rows_markdown(speed), "\n\n".join(said)]


def rows_markdown(speed: DecodeSpeed) -> str:
    """:data:`HEADER`, then :func:`speed_rows`: the table the reveal shows."""
    header = HEADER.format(requests=len(speed.lens), tokens=sum(speed.lens), mb=speed.read_bytes / 1e6,
                           gbs=speed.copy_bytes_per_s / 1e9, where=speed.where, repeats=speed.repeats)
    return "\n".join([header, "", *speed_rows(speed)])


def speed_rows(speed: DecodeSpeed, *, spread: bool = False) -> list[str]:
    """A Markdown table's lines: each method's median time (ms), the bound on it (ms), the share of the bound
    it reached, and its time over the contiguous row's (median of the rounds' ratios).

    ``spread`` adds, after each ratio, its :data:`CONFIDENCE` interval and the range of single rounds (the
    benchmark's table).
    """
    contiguous = speed.paging_pair()[1]
    spread_head = f" ({CONFIDENCE:.0%} interval; range of rounds)" if spread else ""
    lines = [f"| method | median ms | bound ms | share of the bound | time / {ROWS[contiguous]}, median of rounds"
             f"{spread_head} |", "|---|---:|---:|---:|---:|"]
    for key, seconds in speed.seconds.items():
        ratio = f"{speed.ratio(key, contiguous):.2f}x"
        if spread:
            (q1, q3), rounds = speed.ratio_interval(key, contiguous, CONFIDENCE), speed.round_ratios(key, contiguous)
            ratio += f" ({q1:.2f}-{q3:.2f}; {rounds[0]:.2f}-{rounds[-1]:.2f})"
        lines.append(f"| {ROWS[key]} | {seconds * 1e3:.2f} | {speed.bound_seconds(key) * 1e3:.2f} | "
                     f"{speed.share_of_bound(key):.0%} | {ratio} |")
    return lines
