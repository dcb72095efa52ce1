"""The serving simulator: continuous batching of a request trace under a KV-cache budget.

Modules, each one idea:

* :mod:`.workloads`: the :class:`Trace` table and synthetic traces (ShareGPT-/Alpaca-like
  lengths, parallel sampling, beam search, shared prefixes, Poisson arrivals);
* :mod:`.trace_files`: a user's own trace from JSONL or CSV;
* :mod:`.simulate`: :func:`simulate` one policy, :func:`run_policies`, sweeps; :mod:`.tables` prints them;
* :mod:`.loop`: the step loop and the :class:`~.loop.KVMemory` interface it drives;
* :mod:`.paged_memory` (with :mod:`.paged_samples`, :mod:`.paged_beams`) and
  :mod:`.contiguous_memory`: the memory policies; :mod:`.token_ids` and :mod:`.events` help them;
* :mod:`.timed_serving`: a serving loop in seconds: chunked prefill under a token budget, decode
  stalls, preemption by swap or recompute (optionally reusing the blocks still cached, as vLLM v1
  does), priced by :mod:`.preemption_cost` (cited constants, the swap/recompute crossover length);
  its result and where the time went in :mod:`.timed_result`; :mod:`.makespan_gap` says why one such run finishes later than another (steps, or preemptions: how
  many, and what each cost);
* :mod:`.cpu_tier`: a CPU tier under the hash-chained prefix cache, replayed on
  :func:`~.workloads.multi_turn_conversations`;
* :mod:`.reference`: the same simulator token by token, the readable version the fast one is
  tested equal to;
* :mod:`.plots`: its figures (imports matplotlib; not loaded by ``import pagedkv_lib.sim``).

Typical use: ``from pagedkv_lib.sim import run_policies, sharegpt_like, load_trace``.
"""
from .simulate import (CATEGORIES, DEFAULT_MAX_STEPS, PAPER_SHARING_SAVING, PAPER_TOKEN_STATE_SHARE, POLICIES,
                       SimResult, arrival_steps, block_size_sweep, compare_policies, kv_budget_blocks, run_policies,
                       simulate)
from .cpu_tier import TierResult, replay_with_cpu_tier
from .preemption_cost import cheaper_preemption, crossover_tokens, recompute_seconds, swap_seconds
from .tables import format_table
from .timed_serving import PREEMPTIONS, TimedResult, serve_timed
from .trace_files import load_trace, save_trace
from .workloads import (ALPACA, PAPER_PREFIX_LENGTHS, SHAREGPT, ConversationTrace, Trace, alpaca_like, beam_search,
                        multi_turn_conversations, parallel_sampling, poisson_arrivals, shared_prefix, sharegpt_like,
                        synthetic, trace_from_lengths)

__all__ = ["CATEGORIES", "DEFAULT_MAX_STEPS", "PAPER_SHARING_SAVING", "PAPER_TOKEN_STATE_SHARE", "POLICIES",
           "SimResult", "arrival_steps", "block_size_sweep", "compare_policies", "format_table", "kv_budget_blocks",
           "run_policies", "simulate", "load_trace", "save_trace", "ALPACA", "PAPER_PREFIX_LENGTHS", "SHAREGPT",
           "Trace", "alpaca_like", "beam_search", "parallel_sampling", "poisson_arrivals", "shared_prefix",
           "sharegpt_like", "synthetic", "trace_from_lengths", "ConversationTrace", "multi_turn_conversations",
           "TierResult", "replay_with_cpu_tier", "cheaper_preemption", "crossover_tokens", "recompute_seconds",
           "swap_seconds", "PREEMPTIONS", "TimedResult", "serve_timed"]
