"""A CPU tier under the GPU prefix cache: hit rates of a multi-turn conversation trace.

The GPU prefix cache (:class:`~pagedkv_lib.blocks.hashed_prefix_cache.HashedBlockManager`) keeps a
freed full block until allocation evicts it. A host-memory tier (SGLang's HiCache, vLLM's and
LMCache's CPU offloading) keeps a copy of what the GPU evicts, named by the same chain key, in
an LRU of ``cpu_blocks`` blocks. A prompt then reuses

1. its GPU hit: the cached blocks from the first, up to the first GPU miss;
2. then, block by block, whatever either tier still holds: a block found in the CPU tier is
   loaded over the host link (``cpu_hit_tokens``); one the GPU still holds after a miss
   counts as a GPU hit (``gpu_hit_tokens``);

and computes the rest. Chain keys are what make the tier cheap: the tier stores a key per
block, and the lookup needs no tokens.

The replay: requests in arrival order, each admitted whole (prompt), then its answer
appended, and kept until ``max_running`` later requests have been admitted (or until blocks
run out, oldest first). The GPU's behaviour does not depend on the tier (the manager computes
the loaded blocks' places as it would computed ones), so a larger tier sees the same accesses
and, being LRU, holds a superset: CPU hits never fall as ``cpu_blocks`` grows.
"""
from __future__ import annotations

import functools
from collections import OrderedDict, deque
from dataclasses import dataclass

from ..accounting import blocks_needed
from ..blocks.block_hash import BlockHashFn, chain_hashes, get_hash_fn
from ..blocks.hashed_prefix_cache import HashedBlockManager
from ..errors import OutOfBlocksError
from ..validation import check_int
from .workloads import ConversationTrace


@dataclass(frozen=True)
class TierResult:
    """Prompt tokens served by each tier, and what the CPU tier evicted (tokens and blocks)."""

    prompt_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    gpu_evictions: int
    cpu_evictions: int

    @property
    def gpu_hit_rate(self) -> float:
        return self.gpu_hit_tokens / self.prompt_tokens

    @property
    def cpu_hit_rate(self) -> float:
        return self.cpu_hit_tokens / self.prompt_tokens

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens not computed again (either tier)."""
        return (self.gpu_hit_tokens + self.cpu_hit_tokens) / self.prompt_tokens


def replay_with_cpu_tier(trace: ConversationTrace, *, gpu_blocks: int, cpu_blocks: int, block_size: int = 16,
                         max_running: int = 16, hash_fn: str | BlockHashFn = "blake2b-64") -> TierResult:
    """Replay ``trace`` on a GPU prefix cache of ``gpu_blocks`` with a CPU tier of ``cpu_blocks`` under it.

    ``hash_fn``: a name in :data:`~pagedkv_lib.blocks.block_hash.HASH_FUNCTIONS` or a block hash function.
    """
    if not isinstance(trace, ConversationTrace):
        raise TypeError(f"trace must be a ConversationTrace (sim.workloads.multi_turn_conversations), "
                        f"got {type(trace).__name__}")
    S = check_int("block_size", block_size, minimum=1)
    cpu_cap = check_int("cpu_blocks", cpu_blocks, minimum=0)
    max_running = check_int("max_running", max_running, minimum=1)
    gpu_cap = check_int("gpu_blocks", gpu_blocks, minimum=1)
    longest = max(len(p) + len(a) for p, a in zip(trace.prompts, trace.answers))
    if blocks_needed(longest, S) > gpu_cap:
        raise ValueError(f"gpu_blocks={gpu_blocks} is too small: a request of {longest} tokens needs "
                         f"{blocks_needed(longest, S)} blocks of {S}")
    # Each prompt is hashed once: the tier check below computes its keys, and the manager's admission
    # reads them back from this memo (it holds the longest request's keys, so none is dropped in between).
    once = functools.lru_cache(maxsize=blocks_needed(longest, S))(get_hash_fn(hash_fn))
    bm = HashedBlockManager(gpu_cap, S, hash_fn=once)
    tier: OrderedDict = OrderedDict()  # chain key -> None, least recently used first
    counts = dict(cpu_evictions=0)

    def keep_copy(key) -> None:
        if cpu_cap:
            tier[key] = None
            tier.move_to_end(key)
            if len(tier) > cpu_cap:
                tier.popitem(last=False)
                counts["cpu_evictions"] += 1

    cache = bm.prefix_cache
    cache.on_evict = keep_copy
    live: deque[str] = deque()
    prompt_tokens = gpu_hits = cpu_hits = 0
    for r, (prompt, answer) in enumerate(zip(trace.prompts, trace.answers)):
        keys = chain_hashes(prompt, S, hash_fn=cache.hash_fn)[:(len(prompt) - 1) // S]
        i = 0
        while i < len(keys) and cache.cached_block(keys[i]) is not None:
            i += 1
        gpu_run = i
        while i < len(keys):
            if keys[i] in tier:
                tier.move_to_end(keys[i])
                cpu_hits += S
            elif cache.cached_block(keys[i]) is not None:
                gpu_hits += S
            else:
                break
            i += 1
        gpu_hits += gpu_run * S
        prompt_tokens += len(prompt)
        rid = f"r{r}"
        _with_room(bm, live, lambda: bm.add_request(rid, prompt))
        _with_room(bm, live, lambda: bm.append_tokens(rid, answer))
        live.append(rid)
        if len(live) > max_running:
            bm.free(live.popleft())
    return TierResult(prompt_tokens, gpu_hits, cpu_hits, bm.stats().evictions, counts["cpu_evictions"])


def _with_room(bm: HashedBlockManager, live: deque, op) -> None:
    """Run ``op``; while blocks run out, finish the oldest live request first."""
    while True:
        try:
            op()
            return
        except OutOfBlocksError:
            bm.free(live.popleft())
