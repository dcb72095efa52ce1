"""What one timed serving run measured (:func:`.timed_serving.serve_timed`), and where its time went.

A run's figures for a learner (:meth:`TimedResult.summary`) and its makespan split by what each step paid for
(:meth:`TimedResult.time_parts`; :mod:`.makespan_gap` sets two runs side by side). The loop that fills it in
is :mod:`.timed_serving`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class TimedResult:
    """What :func:`.timed_serving.serve_timed` measured (times in seconds, from the first arrival).

    ``ttft_s[r]`` time to first token; ``finish_s[r]`` when request ``r``'s last token came;
    ``token_gaps_s`` the gap before every generated token after a request's first (inter-token
    latency, stalls included); ``stalled_decodes`` (request, step) pairs where a running
    request waited without a token; ``steps``; ``preempted_swap`` / ``preempted_recompute``
    preemptions of each kind; ``swapped_bytes`` moved over the host link (both ways);
    ``recomputed_tokens`` prefilled again; ``peak_blocks`` most blocks held at once;
    ``reused_tokens`` tokens a re-admitted request found still cached (``prefix_caching``; not in
    ``recomputed_tokens``).

    Where the time went, read-only counts the loop keeps for :meth:`time_parts`: ``prompt_tokens`` in the
    trace, ``prefill_tokens`` prefilled in all (first prefills and again after a recompute), ``idle_s``
    spent waiting for an arrival with nothing to run, the step's constants ``decode_step_s`` (s) and
    ``prefill_token_s`` (s per token) and ``link_bytes_per_s``; ``swapped_tokens`` KV tokens sent out by
    swaps; ``undone_swaps`` swaps out of a request swapped back in during the same step, and
    ``undone_swap_bytes`` the bytes those round trips moved (in, then out again);
    ``admissions_held_steps`` steps in which a request waited for admission while a swapped request
    waited for room (a swapped request resumes before any admission).
    """

    ttft_s: np.ndarray
    finish_s: np.ndarray
    token_gaps_s: np.ndarray
    stalled_decodes: int
    steps: int
    preempted_swap: int
    preempted_recompute: int
    swapped_bytes: int
    recomputed_tokens: int
    peak_blocks: int
    step_tokens_max: int
    reused_tokens: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    idle_s: float = 0.0
    decode_step_s: float = 0.0
    prefill_token_s: float = 0.0
    link_bytes_per_s: float = float("inf")
    swapped_tokens: int = 0
    undone_swaps: int = 0
    undone_swap_bytes: int = 0
    admissions_held_steps: int = 0

    def time_parts(self) -> dict:
        """The makespan split by what each step paid for (seconds; the parts add up to ``makespan_s``).

        A step lasts ``decode_step_s + prefill_tokens * prefill_token_s + moved_bytes / link_bytes_per_s``,
        so over the run: ``weights_s`` (the weights read once a step), ``prompt_prefill_s`` (every prompt
        prefilled once), ``prefill_again_s`` (tokens prefilled again after a recompute, less what the
        prefix cache kept), ``transfer_s`` (swaps, both ways), and ``idle_s`` (no request to run)."""
        return {"weights_s": self.steps * self.decode_step_s,
                "prompt_prefill_s": self.prompt_tokens * self.prefill_token_s,
                "prefill_again_s": (self.prefill_tokens - self.prompt_tokens) * self.prefill_token_s,
                "transfer_s": self.swapped_bytes / self.link_bytes_per_s, "idle_s": self.idle_s}

    def summary(self) -> dict:
        """Headline figures: makespan, TTFT and inter-token latency percentiles, stalls, preemptions."""
        gaps = self.token_gaps_s if len(self.token_gaps_s) else np.zeros(1)
        return {"makespan_s": float(self.finish_s.max()), "mean_ttft_s": float(self.ttft_s.mean()),
                "p99_ttft_s": float(np.percentile(self.ttft_s, 99)), "mean_itl_s": float(gaps.mean()),
                "p99_itl_s": float(np.percentile(gaps, 99)), "max_itl_s": float(gaps.max()),
                "stalled_decodes": self.stalled_decodes, "steps": self.steps,
                "preempted_swap": self.preempted_swap, "preempted_recompute": self.preempted_recompute,
                "swapped_gib": self.swapped_bytes / 2**30, "recomputed_tokens": self.recomputed_tokens,
                "reused_tokens": self.reused_tokens}
