"""The live side of each lesson's last part, "what today's engines do": figures as markdown tables, and controls.

Lesson 03 sets vLLM v1's hash-chained block keys beside the exact prefix tree (:func:`key_sizes`,
:func:`wrong_hit_table`, :func:`measured_wrong_hits`, :func:`crafted_wrong_hit`); lesson 02 counts the KV
cache of hybrid models (:func:`hybrid_rows`); lesson 04 gets one control each for swap against recompute,
chunked prefill and a CPU tier (:func:`preemption_control`, :func:`chunking_control`, :func:`cpu_tier_control`),
and one that serves a busy trace by recompute, by recompute reusing the blocks still cached (vLLM v1's way),
and by swap (:func:`served_preemption_control`; its runs and tables in :mod:`.served_preemption`, re-exported here
for the lesson).
Every figure is computed here from the library, now; the controls are labelled ipywidgets boxes
(present in ipywidgets 7.7 and 8), reachable with the Tab key, each re-running its model on change.
"""
from __future__ import annotations

import random

from .. import accounting as acc
from ..blocks.block_hash import (HASH_BITS, chain_hashes, find_collision, truncated_hash,
                                 wrong_hit_probability)
from ..blocks.hashed_prefix_cache import HashedBlockManager
from ..sim import preemption_cost as pc
from ..sim import workloads
from ..sim.cpu_tier import replay_with_cpu_tier
from ..sim.timed_serving import serve_timed
from .served_preemption import (SERVED_BLOCK_SIZE, SERVED_PREEMPTIONS, busy_trace, served_preemption_results,
                                served_preemption_runs, served_preemption_table, served_preemption_text,
                                time_parts_table)
from . import access
from .views import widget_bundle

LINKS = {f"PCIe 4.0 x16 ({pc.PCIE4_X16_BYTES_PER_S / 1e9:g} GB/s each way)": pc.PCIE4_X16_BYTES_PER_S,
         f"PCIe 5.0 x16 ({pc.PCIE5_X16_BYTES_PER_S / 1e9:g} GB/s each way)": pc.PCIE5_X16_BYTES_PER_S}
"""Host links the preemption control offers, by label (bytes/s one way; constants of :mod:`~..sim.preemption_cost`)."""


# ------------------------------------------------------------------ lesson 03: tree or hash

def key_sizes(tokens, block_size: int, hash_fn: str = "sha256") -> list[dict]:
    """For each full block of ``tokens``: what the exact tree compares to find it (token ids on its
    path, ``tree_ids``) against the bytes of its chained key (``key_bytes``; constant)."""
    keys = chain_hashes(tokens, block_size, hash_fn=hash_fn)
    return [{"block": i, "tree_ids": (i + 1) * block_size, "key_bytes": len(k)} for i, k in enumerate(keys)]


def wrong_hit_table(cache_blocks=(10**4, 10**6, 10**8), lookups: int = 10**12) -> str:
    """Markdown table: chance of at least one wrong hit in ``lookups`` lookups of uncached blocks,
    for 64-bit and 256-bit keys, at each cache size (blocks)."""
    short = HASH_BITS["blake2b-64"]
    rows = [f"| {n:,} | {wrong_hit_probability(n, short, lookups):.3g} | "
            f"{wrong_hit_probability(n, HASH_BITS['sha256'], lookups):.3g} |" for n in cache_blocks]
    return (f"| cached blocks | wrong-hit chance, {short}-bit key | wrong-hit chance, SHA-256 |\n|---|---|---|\n"
            + "\n".join(rows) + f"\n\n({lookups:,} lookups of blocks that are not cached.)")


def measured_wrong_hits(bits: int = 16, cached_blocks: int = 200, lookups: int = 200, trials: int = 500,
                        block_size: int = 4, seed: int = 0) -> dict:
    """The wrong-hit formula put to a seeded experiment, with a key short enough to collide often.

    Each of ``trials`` fills a cache with the ``bits``-bit keys (BLAKE2b, cut short) of ``cached_blocks``
    random blocks of ``block_size`` token ids, then looks up ``lookups`` other random blocks; a trial
    counts if any lookup meets a cached key. Returns the share of such trials (``measured``) beside
    :func:`~..blocks.block_hash.wrong_hit_probability` for the same sizes (``formula``)."""
    short, rng = truncated_hash("blake2b-64", bits), random.Random(seed)

    def random_key():
        return short(None, tuple(rng.randrange(1 << 62) for _ in range(block_size)), ())

    wrong = 0
    for _ in range(trials):
        cached = {random_key() for _ in range(cached_blocks)}
        wrong += any(random_key() in cached for _ in range(lookups))
    return {"bits": bits, "cached_blocks": cached_blocks, "lookups": lookups, "trials": trials,
            "measured": wrong / trials, "formula": wrong_hit_probability(cached_blocks, bits, lookups)}


def crafted_wrong_hit(block_size: int = 4, bits: int = 16) -> dict:
    """A wrong hit made on purpose: two different first blocks whose ``bits``-bit keys collide.

    Request ``a`` starts with one block, request ``b`` (arriving after ``a``) with the other;
    both continue with the same second block. Returns the two blocks, the tokens ``b`` was served
    from the cache, and whether the manager's invariants still hold (they do: nothing inside the
    manager can see that the states belong to other tokens)."""
    short = truncated_hash("sha256", bits)
    first_a, first_b = find_collision(short, block_size, start=100)
    bm = HashedBlockManager(num_blocks=8, block_size=block_size, hash_fn=short)
    tail = tuple(range(7, 7 + block_size)) + (1,)
    bm.add_request("a", list(first_a + tail))
    hit = bm.add_request("b", list(first_b + tail))
    bm.check_invariants()
    return {"a": first_a, "b": first_b, "hit_tokens": hit, "shared": bm.block_table("a")[0] == bm.block_table("b")[0],
            "bits": bits, "tries": max(first_a[0], first_b[0]) - 100 + 1}


# ------------------------------------------------------------------ lesson 02: hybrid models

def hybrid_rows(models, num_tokens: int, gpu_bytes: int, *, utilization: float = 0.9,
                block_size: int = 16) -> list[dict]:
    """Per model and its all-full-attention twin: bytes per token at ``num_tokens``, and how many
    requests of that length fit a GPU of ``gpu_bytes`` bytes (``utilization`` of it for weights and
    cache, blocks of ``block_size`` tokens); each row also carries the GPU it was counted for."""
    out = []
    for name in models:
        spec = acc.get_model(name)
        for m in (spec, acc.as_full_attention(spec)):
            cap = acc.hybrid_kv_capacity(m, gpu_bytes, num_tokens, weight_bytes=spec.weight_bytes,
                                         utilization=utilization, block_size=block_size)
            out.append({"model": m.name, "c_tok": acc.bytes_per_token(m),
                        "mean_bytes": acc.mean_bytes_per_token(m, num_tokens), "requests": cap.requests,
                        "page_bytes": cap.page_bytes, "blocks": cap.blocks_per_request,
                        "gpu_bytes": gpu_bytes, "utilization": utilization, "block_size": block_size})
    return out


def hybrid_table(rows: list[dict]) -> str:
    """:func:`hybrid_rows` as a markdown table: KiB per token, the blocks one request holds and their size (a
    hybrid model's block holds one group's layers, its twin's every layer), and requests that fit."""
    lines = [f"| {r['model']} | {r['c_tok'] / 1024:,.0f} | {r['mean_bytes'] / 1024:,.1f} | {r['blocks']:,} | "
             f"{r['page_bytes'] / 2**20:,.2f} | {r['blocks'] * r['page_bytes'] / acc.GiB:,.2f} | {r['requests']:,} |"
             for r in rows]
    return ("| model | C_tok (KiB) | KiB per token at this length | blocks per request | MiB per block | "
            "GiB per request | requests that fit |\n|---|---|---|---|---|---|---|\n" + "\n".join(lines))


# ------------------------------------------------------------------ lesson 04: three controls

def preemption_rows(model: str, link_bytes_per_s: float, lengths=(256, 1024, 4096, 16384)) -> list[dict]:
    """Swap and recompute seconds for requests of each length, and which is cheaper."""
    return [{"tokens": T, "swap_s": pc.swap_seconds(T, model, link_bytes_per_s=link_bytes_per_s),
             "recompute_s": pc.recompute_seconds(T, model),
             "cheaper": pc.cheaper_preemption(T, model, link_bytes_per_s=link_bytes_per_s)} for T in lengths]


def preemption_text(model: str, link_bytes_per_s: float) -> str:
    """Markdown: the crossover length and a table of both costs (the preemption control's output)."""
    return preemption_table(model, link_bytes_per_s, pc.crossover_tokens(model, link_bytes_per_s=link_bytes_per_s))


def which_is_cheaper(cross: int, max_tokens: int = pc.MAX_CROSSOVER_TOKENS) -> str:
    """In words, what a crossover length ``cross`` (tokens, from ``preemption_cost.crossover_tokens`` searched
    up to ``max_tokens``) says about swap and recompute."""
    if cross == 0:
        return "swap is cheaper at every length"
    if cross >= max_tokens:
        return f"recompute is cheaper at every length up to {max_tokens:,} tokens"
    return f"recompute is cheaper below **{cross:,} tokens**, swap from there on"


def preemption_table(model: str, link_bytes_per_s: float, cross: int) -> str:
    """:func:`preemption_text` for a crossover length ``cross`` (tokens) found already."""
    head = (f"**{model}**, link {link_bytes_per_s / 1e9:g} GB/s each way, prefill at "
            f"{pc.DEFAULT_FLOPS_PER_S / 1e12:g} TFLOP/s: {which_is_cheaper(cross)}."
            f"\n\n| tokens | swap out and back (ms) | recompute (ms) | cheaper |\n|---|---|---|---|\n")
    return head + "\n".join(f"| {r['tokens']:,} | {1e3 * r['swap_s']:,.1f} | {1e3 * r['recompute_s']:,.1f} | "
                            f"{r['cheaper']} |" for r in preemption_rows(model, link_bytes_per_s))


def chunking_runs(trace, token_budget: int, num_blocks: int) -> dict[str, dict]:
    """``trace`` served with whole prompts and with chunked prefill under ``token_budget`` (tokens per
    step): each run's :meth:`~..sim.timed_serving.TimedResult.summary`, by ``"whole prompts"`` and ``"chunked"``."""
    return {name: serve_timed(trace, num_blocks=num_blocks, token_budget=token_budget,
                              chunked_prefill=chunked).summary()
            for name, chunked in (("whole prompts", False), ("chunked", True))}


def chunking_text(trace, token_budget: int, num_blocks: int) -> str:
    """Markdown: the same trace served without and with chunked prefill under ``token_budget``."""
    return chunking_table(chunking_runs(trace, token_budget, num_blocks), token_budget, len(trace), num_blocks)


def chunking_table(runs: dict[str, dict], token_budget: int, requests: int, num_blocks: int) -> str:
    """:func:`chunking_text` for runs made already (:func:`chunking_runs`)."""
    rows = [f"| {name} | {s['stalled_decodes']:,} | {s['steps']:,} | {1e3 * s['p99_itl_s']:,.1f} | "
            f"{1e3 * s['max_itl_s']:,.1f} | {s['mean_ttft_s']:,.2f} |" for name, s in runs.items()]
    return (f"Token budget {token_budget:,} per step, {requests:,} requests, {num_blocks:,} blocks.\n\n"
            "| prefill | stalled decodes | steps | p99 gap between tokens (ms) | longest gap (ms) | mean TTFT (s) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))


def cpu_tier_text(trace, gpu_blocks: int, cpu_blocks: int) -> str:
    """Markdown: prompt tokens served by the GPU cache, the CPU tier, and computed, for one tier size."""
    return cpu_tier_summary(replay_with_cpu_tier(trace, gpu_blocks=gpu_blocks, cpu_blocks=cpu_blocks),
                            gpu_blocks, cpu_blocks)


def cpu_tier_summary(r, gpu_blocks: int, cpu_blocks: int) -> str:
    """:func:`cpu_tier_text` for a replay made already (``r``, from :func:`~..sim.cpu_tier.replay_with_cpu_tier`)."""
    return (f"GPU cache {gpu_blocks:,} blocks, CPU tier {cpu_blocks:,} blocks: of {r.prompt_tokens:,} prompt tokens, "
            f"**{r.gpu_hit_rate:.1%}** from the GPU cache, **{r.cpu_hit_rate:.1%}** loaded from the CPU tier, "
            f"**{1 - r.hit_rate:.1%}** computed (hit rate {r.hit_rate:.1%}).")


class Control:
    """Labelled boxes and a live markdown output that ``render(*values)`` fills on every change.

    Shown as the widget where a front end can draw one, and as the same markdown everywhere
    (:func:`~.views.widget_bundle`); ``text()`` is that markdown for the boxes' current values."""

    def __init__(self, boxes, render, after=None):
        """``after``: the gate (:class:`~.gates.Gate`) whose answer this control would show; until it is
        committed the boxes are disabled and the output says to commit first."""
        import ipywidgets as w
        self.boxes, self.render, self.output = list(boxes), render, w.Output()
        self.shut = after is not None and not after.committed
        for b in self.boxes:
            b.observe(self._show, names="value")
            b.disabled = self.shut
        self.box = access.control(w.VBox([*self.boxes, self.output]))   # keys stay in it; it reflows
        self._show()
        if self.shut:
            after.when_committed(self._open)

    def _open(self) -> None:
        self.shut = False
        for b in self.boxes:
            b.disabled = False
        self._show()

    def text(self) -> str:
        if self.shut:
            return ("*Commit your prediction above first: this control opens then* "
                    "(where it cannot be drawn, run this cell again after the commit).")
        return self.render(*[b.value for b in self.boxes])

    def _show(self, _change=None) -> None:
        from IPython.display import display
        self.shown = self.text()   # kept: rendering may run a whole simulation
        self.output.clear_output(wait=True)
        with self.output:
            display(access.markdown(self.shown))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {**widget_bundle(self.shown, lambda: self), "text/markdown": self.shown}


_STYLE = {"description_width": "16em"}


def preemption_control(model: str = "OPT-13B", after=None):
    """A model dropdown and a host-link dropdown; shows :func:`preemption_text` once gate ``after`` is committed."""
    import ipywidgets as w
    names = [*acc.MODELS, *acc.HYBRID_MODELS]
    m = w.Dropdown(options=[n for n in names if acc.get_model(n).weight_bytes is not None], value=model,
                   description="model", style=_STYLE)
    link = w.Dropdown(options=list(LINKS), description="host link", style=_STYLE)
    return Control([m, link], lambda name, label: preemption_text(name, LINKS[label]), after)


def chunking_control(trace, num_blocks: int = 20000, token_budget: int = 2048, after=None):
    """A token-budget box (tokens per step); shows :func:`chunking_text` for ``trace`` once gate ``after`` is committed."""
    import ipywidgets as w
    low = int((trace.prompt_len + trace.output_len[:, 0]).max())   # the longest request, prefilled whole
    budget = w.BoundedIntText(value=max(token_budget, low), min=low, max=65536, step=256,
                              description="token budget per step", style=_STYLE)
    return Control([budget], lambda b: chunking_text(trace, b, num_blocks), after)


def cpu_tier_control(trace, gpu_blocks: int = 1500, cpu_blocks: int = 0, after=None):
    """A CPU-tier size box (blocks); shows :func:`cpu_tier_text` for ``trace`` once gate ``after`` is committed."""
    import ipywidgets as w
    size = w.BoundedIntText(value=cpu_blocks, min=0, max=100000, step=500, description="CPU tier (blocks)",
                            style=_STYLE)
    return Control([size], lambda c: cpu_tier_text(trace, gpu_blocks, c), after)


def served_preemption_control(trace, after=None):
    """A host-link dropdown; shows :func:`served_preemption_text` for ``trace`` once gate ``after`` is committed."""
    import ipywidgets as w
    link = w.Dropdown(options=list(LINKS), description="host link", style=_STYLE)
    return Control([link], lambda label: served_preemption_text(trace, LINKS[label]), after)


def conversations(num_conversations: int = 100, seed: int = 0):
    """The multi-turn chat trace lesson 04's CPU-tier control replays (:func:`~..sim.workloads.multi_turn_conversations`)."""
    return workloads.multi_turn_conversations(num_conversations, seed=seed)


__all__ = ["LINKS", "Control", "key_sizes", "wrong_hit_table", "measured_wrong_hits", "crafted_wrong_hit",
           "hybrid_rows", "hybrid_table", "preemption_rows", "preemption_text", "preemption_table",
           "which_is_cheaper", "SERVED_PREEMPTIONS", "busy_trace", "served_preemption_results",
           "served_preemption_runs", "served_preemption_table", "served_preemption_text", "time_parts_table",
           "chunking_runs", "chunking_text", "chunking_table", "cpu_tier_text", "cpu_tier_summary",
           "preemption_control", "chunking_control", "cpu_tier_control", "served_preemption_control", "conversations"]
