"""Request traces for the serving simulator: synthetic datasets, sharing patterns, arrivals.

A :class:`Trace` is a table of requests held as numpy arrays (lengths in tokens, times in
seconds). Generators build one; transformations return a new trace with a sharing pattern or
arrival process laid over it; :mod:`.trace_files` reads a user's own trace.

Length distributions. Both datasets in the PagedAttention paper (Kwon et al., SOSP 2023) are
right-skewed, so prompt and output lengths are drawn from log-normal distributions, rounded to
whole tokens, then capped: prompt ``p`` in ``[1, max_context // 2]`` (the long-prompt filter
serving benchmarks apply) and output ``o`` in ``[1, max_context - p]`` so no request outgrows
the context. The log-normal ``mu`` is solved so the *capped* mean hits the target mean; the
spread ``sigma`` is a fixed, documented choice:

=========== ============== ============== ====================================
dataset     prompt mean     output mean    sigma (prompt, output)
=========== ============== ============== ====================================
ShareGPT    161.31 tokens   337.99 tokens  1.0, 0.8 (long conversations, long tail)
Alpaca      19.31 tokens    58.45 tokens   0.5, 0.8 (short instructions)
=========== ============== ============== ====================================

The means are the paper's dataset statistics; the sigmas are ours (the paper shows the
histograms, not parameters), picked so the tails look like its Figure 11.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

import numpy as np

from ..validation import check_int, check_number

SHAREGPT = dict(prompt_mean=161.31, output_mean=337.99, prompt_sigma=1.0, output_sigma=0.8)
"""ShareGPT-like length parameters: target means in tokens and log-normal sigmas."""

ALPACA = dict(prompt_mean=19.31, output_mean=58.45, prompt_sigma=0.5, output_sigma=0.8)
"""Alpaca-like length parameters: target means in tokens and log-normal sigmas."""

PAPER_PREFIX_LENGTHS = (80, 341)
"""Shared prefix lengths in tokens the paper used: a one-shot and a five-shot translation prompt."""


@dataclass(frozen=True, eq=False)
class Trace:
    """A table of ``R`` requests, each with ``n`` output sequences (``n > 1``: parallel sampling).

    * ``prompt_len[r]`` prompt tokens, *including* the shared prefix;
    * ``output_len[r, j]`` tokens sequence ``j`` of request ``r`` generates (shape ``(R, n)``);
    * ``arrival_s[r]`` arrival time in seconds, non-decreasing (first come, first served);
    * ``prefix_id[r]`` the shared prefix the prompt starts with, ``-1`` for none (any integer
      ``>= 0`` names one; ids need not be consecutive); requests with the same id start with the
      same ``prefix_len[r]`` tokens, ``>= 1`` with an id and 0 without (the simulator gives them
      equal token ids, so a prefix cache can share them);
    * ``beam_width`` ``k > 1`` decodes every request with beam search of width ``k``
      (then ``n`` must be 1: the ``k`` beams all run for ``output_len[r, 0]`` tokens);
    * ``max_context`` tokens a request may reach (``prompt + output``), ``None`` when unknown.
    """

    prompt_len: np.ndarray
    output_len: np.ndarray
    arrival_s: np.ndarray
    prefix_id: np.ndarray
    prefix_len: np.ndarray
    beam_width: int = 1
    max_context: int | None = None
    name: str = "trace"

    def __post_init__(self):
        p = _int_array("prompt_len", self.prompt_len, ndim=1, minimum=1)
        R = len(p)
        if R == 0:
            raise ValueError("a trace needs at least one request, got 0")
        o = _int_array("output_len", self.output_len, ndim=2, minimum=1)
        if o.shape[0] != R or o.shape[1] < 1:
            raise ValueError(f"output_len must have shape ({R}, n) with n >= 1, got {o.shape}")
        arrival = np.asarray(self.arrival_s, dtype=np.float64)
        if arrival.shape != (R,) or not np.all(np.isfinite(arrival)) or np.any(arrival < 0):
            raise ValueError(f"arrival_s must hold {R} finite times >= 0 seconds")
        if np.any(np.diff(arrival) < 0):
            first = int(np.argmax(np.diff(arrival) < 0)) + 1
            raise ValueError(f"arrival_s must be non-decreasing; request {first} arrives at {arrival[first]} s, "
                             f"before request {first - 1} at {arrival[first - 1]} s")
        pid, plen = _prefix_arrays(self.prefix_id, self.prefix_len, p)
        k = check_int("beam_width", self.beam_width, minimum=1)
        if k > 1 and o.shape[1] > 1:
            raise ValueError(f"a trace is either beam search (beam_width={k}) or parallel sampling "
                             f"(n={o.shape[1]}), not both")
        if self.max_context is not None:
            ctx = check_int("max_context", self.max_context, minimum=2)
            too_long = p + o.max(axis=1) > ctx
            if np.any(too_long):
                r = int(np.argmax(too_long))
                raise ValueError(f"request {r} needs {p[r] + o[r].max()} tokens, more than max_context={ctx}")
        for field, value in [("prompt_len", p), ("output_len", o), ("arrival_s", arrival),
                             ("prefix_id", pid), ("prefix_len", plen)]:
            value.flags.writeable = False
            object.__setattr__(self, field, value)

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def num_samples(self) -> int:
        """``n``: output sequences per request (1 unless parallel sampling)."""
        return self.output_len.shape[1]

    @property
    def seqs_per_request(self) -> int:
        """Sequences the cache holds per running request: ``n``, or ``k`` under beam search."""
        return max(self.num_samples, self.beam_width)

    @property
    def final_len(self) -> np.ndarray:
        """``(R, n)`` tokens each sequence holds when it finishes (prompt + output)."""
        return self.prompt_len[:, None] + self.output_len

    def describe(self) -> dict:
        """Headline numbers: requests, mean lengths in tokens, sharing pattern, arrival span in seconds."""
        return {"name": self.name, "requests": len(self),
                "mean_prompt_tokens": float(self.prompt_len.mean()),
                "mean_output_tokens": float(self.output_len.mean()),
                "max_tokens": int(self.final_len.max()),
                "samples_per_request": self.num_samples, "beam_width": self.beam_width,
                "prefixes": int(len(np.unique(self.prefix_id[self.prefix_id >= 0]))),
                "arrival_span_s": float(self.arrival_s[-1] - self.arrival_s[0])}


def trace_from_lengths(prompt_len, output_len, *, arrival_s=None, prefix_id=None, prefix_len=None,
               max_context: int | None = None, name: str = "trace") -> Trace:
    """A single-sample trace from per-request lists; arrivals default to 0 s, prefixes to none."""
    p, o = np.asarray(prompt_len), np.asarray(output_len)
    if p.ndim != 1 or o.shape != p.shape:
        raise ValueError(f"prompt_len and output_len must be 1-d and equally long, got shapes {p.shape} and {o.shape}")
    R = len(p)
    arrival = np.zeros(R) if arrival_s is None else arrival_s
    pid = np.full(R, -1) if prefix_id is None else prefix_id
    plen = np.zeros(R, dtype=np.int64) if prefix_len is None else prefix_len
    return Trace(p, o.reshape(R, 1), arrival, pid, plen, max_context=max_context, name=name)


def synthetic(num_requests: int, *, prompt_mean: float, output_mean: float, prompt_sigma: float,
              output_sigma: float, max_context: int = 2048, seed: int = 0, name: str = "synthetic") -> Trace:
    """Log-normal prompt and output lengths (tokens) with the given capped means; all arrive at 0 s.

    Caps: prompt in ``[1, max_context // 2]``, output in ``[1, max_context - prompt]``.
    """
    R = check_int("num_requests", num_requests, minimum=1)
    ctx = check_int("max_context", max_context, minimum=4)
    check_int("seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    max_prompt = ctx // 2
    prompt = _capped_lognormal(rng, R, "prompt_mean", prompt_mean, "prompt_sigma", prompt_sigma, max_prompt)
    # Outputs are capped per request at ctx - prompt; the mean is solved for the median cap.
    output_cap = np.maximum(ctx - prompt, 1)
    output = _capped_lognormal(rng, R, "output_mean", output_mean, "output_sigma", output_sigma,
                               int(np.median(output_cap)))
    output = np.minimum(output, output_cap)
    return trace_from_lengths(prompt, output, max_context=ctx, name=name)


def sharegpt_like(num_requests: int = 1000, *, seed: int = 0, max_context: int = 2048) -> Trace:
    """ShareGPT-like trace: prompts about 161 tokens, outputs about 338, long right tails."""
    return synthetic(num_requests, **SHAREGPT, max_context=max_context, seed=seed, name="sharegpt-like")


def alpaca_like(num_requests: int = 1000, *, seed: int = 0, max_context: int = 2048) -> Trace:
    """Alpaca-like trace: prompts about 19 tokens, outputs about 58."""
    return synthetic(num_requests, **ALPACA, max_context=max_context, seed=seed, name="alpaca-like")


def parallel_sampling(trace: Trace, n: int, *, independent_lengths: bool = False, seed: int = 0) -> Trace:
    """Each request asks for ``n`` samples of one prompt (the prompt's blocks are shareable).

    By default every sample generates the request's output length, as in vLLM's throughput
    benchmark (which ignores end-of-sequence tokens, so each sample runs to the dataset's
    length) and so in the paper's sharing measurements. With ``independent_lengths`` sample 0
    keeps the request's length and the others draw theirs from the trace's own output lengths
    (a bootstrap), capped at the context: samples then finish at different steps, and a long
    sample outliving its siblings keeps the prompt's blocks to itself.
    """
    _check_plain(trace, "parallel_sampling")
    n = check_int("n", n, minimum=1)
    check_int("seed", seed, minimum=0)
    if not isinstance(independent_lengths, bool):
        raise TypeError(f"independent_lengths must be True or False, got {independent_lengths!r}")
    base = trace.output_len[:, 0]
    if not independent_lengths:
        return replace(trace, output_len=np.repeat(base[:, None], n, axis=1), name=f"{trace.name} n={n}")
    extra = np.random.default_rng(seed).choice(base, size=(len(trace), n - 1), replace=True)
    output = np.concatenate([base[:, None], extra], axis=1)
    if trace.max_context is not None:
        output = np.minimum(output, trace.max_context - trace.prompt_len[:, None])
    return replace(trace, output_len=output, name=f"{trace.name} n={n} independent")


def beam_search(trace: Trace, width: int) -> Trace:
    """Each request decodes with beam search of ``width`` beams, all as long as its output."""
    _check_plain(trace, "beam_search")
    k = check_int("width", width, minimum=1)
    return replace(trace, beam_width=k, name=f"{trace.name} beam={k}")


def shared_prefix(trace: Trace, prefix_len: int, *, num_prefixes: int = 1, seed: int = 0) -> Trace:
    """Prepend one of ``num_prefixes`` shared prefixes of ``prefix_len`` tokens to every prompt.

    Models a system prompt or a few-shot example block (the paper used 80 and 341 tokens).
    Each request gets a prefix chosen uniformly at random; outputs that would outgrow
    ``max_context`` are shortened to fit.
    """
    if np.any(trace.prefix_id >= 0):
        raise ValueError(f"trace {trace.name!r} already has shared prefixes")
    L = check_int("prefix_len", prefix_len, minimum=1)
    m = check_int("num_prefixes", num_prefixes, minimum=1)
    check_int("seed", seed, minimum=0)
    prompt = trace.prompt_len + L
    output = trace.output_len
    if trace.max_context is not None:
        if prompt.max() >= trace.max_context:
            raise ValueError(f"prefix_len={L} leaves no room for output: the longest prompt becomes "
                             f"{prompt.max()} tokens, max_context is {trace.max_context}")
        output = np.minimum(output, trace.max_context - prompt[:, None])
    ids = np.random.default_rng(seed).integers(0, m, size=len(trace))
    return replace(trace, prompt_len=prompt, output_len=output, prefix_id=ids,
                   prefix_len=np.full(len(trace), L), name=f"{trace.name} prefix={L}x{m}")


def poisson_arrivals(trace: Trace, rate_per_s: float, *, seed: int = 0) -> Trace:
    """Arrivals as a Poisson process of ``rate_per_s`` requests per second, the first at 0 s."""
    rate = check_number("rate_per_s", rate_per_s, low=0.0, high=math.inf, low_open=True, high_open=True)
    check_int("seed", seed, minimum=0)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(trace))
    gaps[0] = 0.0
    return replace(trace, arrival_s=np.cumsum(gaps), name=f"{trace.name} {rate:g}/s")


@dataclass(frozen=True, eq=False)
class ConversationTrace:
    """Multi-turn conversations as token ids: turn ``k`` of a conversation sends everything so far.

    Request ``r`` (in arrival order) is turn ``turn[r]`` of conversation ``conversation[r]``;
    ``prompts[r]`` is its prompt (the previous turn's prompt and answer, then a new user
    message; turn 0 starts with one of the shared system prompts) and ``answers[r]`` the tokens
    it generates; ``arrival_s[r]`` is non-decreasing.
    """

    prompts: list
    answers: list
    arrival_s: np.ndarray
    conversation: np.ndarray
    turn: np.ndarray
    name: str = "conversations"

    def __len__(self) -> int:
        return len(self.prompts)


def multi_turn_conversations(num_conversations: int = 200, *, turns: tuple[int, int] = (2, 8),
                             system_prompts: int = 4, system_tokens: int = 512, user_mean: float = 60.0,
                             answer_mean: float = 200.0, conversations_per_s: float = 2.0, think_s: float = 30.0,
                             max_context: int = 16384, seed: int = 0) -> ConversationTrace:
    """A seeded multi-turn chat trace, the workload a prefix cache (and a CPU tier under it) serves.

    Each conversation starts at a Poisson rate of ``conversations_per_s``, picks one of
    ``system_prompts`` shared system prompts of ``system_tokens`` tokens, and runs a number of
    turns drawn uniformly from ``turns`` (inclusive); the user thinks an exponential
    ``think_s`` seconds on average between an answer and the next message. User messages and
    answers are log-normal with means ``user_mean`` and ``answer_mean`` tokens (sigma 0.8), and a
    conversation stops early rather than outgrow ``max_context`` tokens. Token ids are drawn
    from a 32,000-token vocabulary; the next turn's prompt is exactly the last prompt, its
    answer and the new message, so a prefix cache can serve all but the new message.
    """
    C = check_int("num_conversations", num_conversations, minimum=1)
    lo, hi = (check_int("turns", t, minimum=1) for t in turns)
    if lo > hi:
        raise ValueError(f"turns must be (fewest, most) with fewest <= most, got {turns!r}")
    P = check_int("system_prompts", system_prompts, minimum=1)
    sys_len = check_int("system_tokens", system_tokens, minimum=0)
    ctx = check_int("max_context", max_context, minimum=sys_len + 2)
    rate = check_number("conversations_per_s", conversations_per_s, low=0.0, high=math.inf, low_open=True,
                        high_open=True)
    think = check_number("think_s", think_s, low=0.0, high=math.inf, high_open=True)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    systems = [rng.integers(0, 32000, sys_len).tolist() for _ in range(P)]
    starts = np.cumsum(rng.exponential(1.0 / rate, size=C))
    users = _capped_lognormal(rng, C * hi, "user_mean", user_mean, "user_sigma", 0.8, ctx).tolist()
    answers = _capped_lognormal(rng, C * hi, "answer_mean", answer_mean, "answer_sigma", 0.8, ctx).tolist()
    rows = []  # (arrival, conversation, turn, prompt, answer)
    for c in range(C):
        context, t = list(systems[int(rng.integers(P))]), float(starts[c])
        for k in range(int(rng.integers(lo, hi + 1))):
            user, answer = users[c * hi + k], answers[c * hi + k]
            if len(context) + user + answer > ctx:
                break
            prompt = context + rng.integers(0, 32000, user).tolist()
            reply = rng.integers(0, 32000, answer).tolist()
            rows.append((t, c, k, prompt, reply))
            context = prompt + reply
            t += float(rng.exponential(think)) if think > 0 else 0.0
    rows.sort(key=lambda row: (row[0], row[1]))
    return ConversationTrace([r[3] for r in rows], [r[4] for r in rows], np.array([r[0] for r in rows]),
                             np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                             name=f"{C} conversations")


def _check_plain(trace: Trace, what: str) -> None:
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a Trace, got {type(trace).__name__}")
    if trace.num_samples > 1 or trace.beam_width > 1:
        raise ValueError(f"{what} needs a trace with one sequence per request; {trace.name!r} has "
                         f"n={trace.num_samples}, beam_width={trace.beam_width}")


def _capped_lognormal(rng, size, mean_name, mean, sigma_name, sigma, cap) -> np.ndarray:
    """Integer draws of ``clip(round(X), 1, cap)``, ``X`` log-normal with ``E[min(X, cap)] = mean``."""
    mean = check_number(mean_name, mean, low=1.0, high=cap, high_open=True)
    sigma = check_number(sigma_name, sigma, low=0.0, high=3.0, low_open=True)
    mu = _mu_for_capped_mean(mean, sigma, cap)
    x = rng.lognormal(mu, sigma, size=size)
    return np.clip(np.rint(x), 1, cap).astype(np.int64)


def _mu_for_capped_mean(mean: float, sigma: float, cap: float) -> float:
    """Solve ``E[min(X, cap)] = mean`` for ``X ~ LogNormal(mu, sigma)`` by bisection on ``mu``.

    ``E[min(X, c)] = exp(mu + sigma^2/2) Phi((ln c - mu - sigma^2)/sigma) + c (1 - Phi((ln c - mu)/sigma))``,
    increasing in ``mu``.
    """
    def phi(z):
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    def capped_mean(mu):
        lc = math.log(cap)
        return (math.exp(mu + sigma**2 / 2) * phi((lc - mu - sigma**2) / sigma)
                + cap * (1.0 - phi((lc - mu) / sigma)))

    lo, hi = -10.0, math.log(cap) + 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if capped_mean(mid) < mean else (lo, mid)
    return (lo + hi) / 2


def _int_array(name, values, *, ndim, minimum) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")
    if arr.dtype == object and arr.size and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                for v in arr.ravel()):
        big = max(arr.ravel(), key=abs)
        raise ValueError(f"{name} must hold integers in [-2**63, 2**63) (int64), got {big}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers (token counts), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=True)
    if arr.size and arr.min() < minimum:
        idx = np.unravel_index(int(np.argmin(arr)), arr.shape)
        where = idx[0] if ndim == 1 else idx
        raise ValueError(f"{name} must be >= {minimum}, got {arr[idx]} at index {where}")
    return arr


def _prefix_arrays(prefix_id, prefix_len, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``prefix_id`` and ``prefix_len`` as checked int64 arrays: one per request, a length with each id, none without."""
    R = len(p)
    pid = _int_array("prefix_id", prefix_id, ndim=1, minimum=-1)
    plen = _int_array("prefix_len", prefix_len, ndim=1, minimum=0)
    if pid.shape != (R,) or plen.shape != (R,):
        raise ValueError(f"prefix_id and prefix_len must have {R} entries each")
    if np.any(plen > p):
        r = int(np.argmax(plen > p))
        raise ValueError(f"prefix_len[{r}] = {plen[r]} exceeds prompt_len[{r}] = {p[r]}")
    if np.any((pid < 0) & (plen > 0)):
        r = int(np.argmax((pid < 0) & (plen > 0)))
        raise ValueError(f"request {r} has prefix_len {plen[r]} but no prefix_id")
    if np.any((pid >= 0) & (plen == 0)):
        r = int(np.argmax((pid >= 0) & (plen == 0)))
        raise ValueError(f"request {r} has prefix_id {pid[r]} but prefix_len 0; a shared prefix needs "
                         f"prefix_len >= 1 (prefix_id -1 means no prefix)")
    _check_prefix_lengths_agree(pid, plen)
    return pid, plen


def _check_prefix_lengths_agree(pid: np.ndarray, plen: np.ndarray) -> None:
    """Every request with prefix id ``g`` must name the same prefix length (one prefix, one length)."""
    has = pid >= 0
    if not np.any(has):
        return
    ids, first = np.unique(pid[has], return_index=True)
    expected = plen[has][first][np.searchsorted(ids, pid[has])]
    bad = np.flatnonzero(has)[plen[has] != expected]
    if len(bad):
        r = int(bad[0])
        want = int(plen[has][first][np.searchsorted(ids, pid[r])])
        raise ValueError(f"request {r} gives prefix {pid[r]} a length of {plen[r]} tokens, "
                         f"an earlier request gave it {want}")
