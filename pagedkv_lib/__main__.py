"""Command line: ``python -m pagedkv_lib simulate [options]``.

With no options it serves a built-in trace (1,000 ShareGPT-like requests, all arriving at
once) with OPT-13B on a 40 GiB GPU, the PagedAttention paper's setting, under every policy,
and prints where the KV memory went. ``--help`` lists the options; ``--png`` also writes a
figure. Bad input exits with status 2 and a one-line message, including an option that only
works with another one given without it (``--prefixes`` needs ``--prefix-len``,
``--independent-lengths`` needs ``--samples``, ``--dataset`` and ``--requests`` conflict with
``--trace``), and a count too large to build (:data:`OPTION_LIMITS`) before anything is built.
"""
from __future__ import annotations

import argparse
import sys

from .accounting import MODELS
from .sim import PAPER_TOKEN_STATE_SHARE, POLICIES, format_table, run_policies
from .sim.trace_files import MAX_TOKENS

COLUMNS = {"policy": "policy", "share_token_states": "tokens", "paper_share_token_states": "(paper)",
           "share_reservation": "reserved", "share_internal_fragmentation": "internal", "share_external_fragmentation":
           "external", "share_slack": "slack", "sharing_saving": "shared", "mean_batch": "batch",
           "peak_batch": "peak", "preemptions": "preempted", "steps": "steps"}
"""Columns of the printed table and their headings. ``(paper)`` is the token-state share the paper's
Figure 2 reports for the matching system, shown only for a run in that setting (see ``paper_setting``)."""


OPTION_LIMITS = {"requests": (10_000_000, "requests (each costs memory for its arrays and series)"),
                 "num_blocks": (100_000_000, "blocks (the block manager keeps a few entries per block)"),
                 "block_size": (MAX_TOKENS, "tokens, the most a trace file may give"),
                 "prefix_len": (MAX_TOKENS, "tokens, the most a trace file may give"),
                 "prefixes": (MAX_TOKENS, "distinct prefixes")}
"""Largest value, and its unit, of each count option: the command line refuses more with one line,
before it builds a trace or a cache that could not fit in memory."""


def paper_setting(args) -> bool:
    """Whether the options describe the paper's Figure 2 setting closely enough to print its figures
    beside ours: the built-in ShareGPT-like trace, no sampling, beams or shared prefix, OPT-13B."""
    return (args.trace is None and args.dataset in (None, "sharegpt") and args.samples in (None, 1)
            and args.beam == 1 and args.prefix_len is None and args.model == "OPT-13B")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pagedkv_lib", description="pagedkv course tools")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="serve a request trace under KV-cache policies and compare memory use",
                         description="Serve a request trace with continuous batching under a KV-cache budget.")
    src = sim.add_argument_group("trace (default: a built-in ShareGPT-like trace)")
    src.add_argument("--trace", metavar="PATH", help="your own trace, .jsonl or .csv (see pagedkv_lib.sim.trace_files)")
    src.add_argument("--dataset", choices=("sharegpt", "alpaca"), default=None,
                     help="built-in synthetic trace when no --trace is given (default: sharegpt)")
    src.add_argument("--requests", type=int, default=None, help="requests in the built-in trace (default: 1000)")
    src.add_argument("--seed", type=int, default=0, help="seed of the built-in trace and of beam choices")
    src.add_argument("--samples", type=int, default=None, metavar="N",
                     help="parallel sampling: N outputs per prompt (default: 1)")
    src.add_argument("--independent-lengths", action="store_true",
                     help="with --samples: samples draw their own output lengths (default: all run the request's)")
    src.add_argument("--beam", type=int, default=1, metavar="K", help="beam search of width K")
    src.add_argument("--prefix-len", type=int, default=None, metavar="TOKENS",
                     help="prepend a shared prefix of this many tokens (the paper used 80 and 341)")
    src.add_argument("--prefixes", type=int, default=None,
                     help="with --prefix-len: number of distinct shared prefixes (default: 1)")
    src.add_argument("--rate", type=float, default=None, metavar="REQ_PER_S",
                     help="Poisson arrivals at this rate (default: the trace's own times)")
    mem = sim.add_argument_group("server")
    mem.add_argument("--model", default="OPT-13B", help=f"model preset: {', '.join(MODELS)} (default: OPT-13B)")
    mem.add_argument("--gpu-gib", type=float, default=40.0, help="GPU memory in GiB (default: 40)")
    mem.add_argument("--num-blocks", type=int, default=None, help="KV budget as a block count (overrides --gpu-gib)")
    mem.add_argument("--block-size", type=int, default=16, help="tokens per block S (default: 16)")
    mem.add_argument("--policy", default="all", choices=("all",) + POLICIES, help="memory policy (default: all)")
    mem.add_argument("--max-batch", type=int, default=256, help="most sequences running at once (default: 256)")
    mem.add_argument("--step-seconds", type=float, default=0.05, help="seconds per decode step (default: 0.05)")
    out = sim.add_argument_group("output")
    out.add_argument("--png", metavar="PATH", help="also write a figure (memory shares and batch size) here")
    out.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    return parser


def trace_from_options(args):
    """The trace the options describe: a file or a built-in dataset, then the sharing and arrival options."""
    from .sim import load_trace, workloads
    _check_option_pairs(args)
    if args.trace:
        trace = load_trace(args.trace)
    else:
        make = workloads.alpaca_like if args.dataset == "alpaca" else workloads.sharegpt_like
        trace = make(1000 if args.requests is None else args.requests, seed=args.seed)
    if args.prefix_len is not None:
        prefixes = 1 if args.prefixes is None else args.prefixes
        trace = workloads.shared_prefix(trace, args.prefix_len, num_prefixes=prefixes, seed=args.seed)
    if args.samples is not None and (args.samples != 1 or args.independent_lengths):
        trace = workloads.parallel_sampling(trace, args.samples, independent_lengths=args.independent_lengths,
                                            seed=args.seed)
    if args.beam != 1:
        trace = workloads.beam_search(trace, args.beam)
    if args.rate is not None:
        trace = workloads.poisson_arrivals(trace, args.rate, seed=args.seed)
    return trace


def _check_option_pairs(args) -> None:
    """Refuse an option that would be silently ignored because the option it modifies is missing, and a
    count too large to build (samples and beams beyond ``--max-batch`` could never run together)."""
    for name, (limit, unit) in OPTION_LIMITS.items():
        value = getattr(args, name)
        if value is not None and value > limit:
            raise ValueError(f"--{name.replace('_', '-')} {_show_count(value)} is too large: at most {limit:,} {unit}")
    for flag, value in (("--samples", args.samples), ("--beam", args.beam)):
        if value is not None and value > args.max_batch:
            raise ValueError(f"{flag} {_show_count(value)} runs more sequences per request than --max-batch "
                             f"{args.max_batch} lets run at once")
    if args.prefixes is not None and args.prefix_len is None:
        raise ValueError(f"--prefixes {args.prefixes} needs --prefix-len TOKENS (the length of the shared prefixes)")
    if args.independent_lengths and (args.samples is None or args.samples < 2):
        got = "none" if args.samples is None else f"--samples {args.samples}"
        raise ValueError(f"--independent-lengths needs --samples N with N >= 2 (samples to draw lengths for), "
                         f"got {got}")
    if args.trace:
        for flag, value in (("--dataset", args.dataset), ("--requests", args.requests)):
            if value is not None:
                raise ValueError(f"{flag} {value} picks a built-in trace, but --trace {args.trace} was given; "
                                 f"use one or the other")


def _show_count(value: int) -> str:
    """An integer option as typed, shortened if it is very long."""
    text = str(value)
    return text if len(text) <= 20 else f"{text[:12]}... ({len(text)} digits)"


def simulate_command(args) -> int:
    trace = trace_from_options(args)
    policies = POLICIES if args.policy == "all" else [args.policy]
    results = run_policies(trace, policies, model=args.model, gpu_memory_gib=args.gpu_gib,
                           num_blocks=args.num_blocks, block_size=args.block_size, max_batch=args.max_batch,
                           step_seconds=args.step_seconds, seed=args.seed, progress=not args.no_progress)
    d = trace.describe()
    print(f"trace {d['name']}: {d['requests']} requests, mean prompt {d['mean_prompt_tokens']:.1f} tokens, "
          f"mean output {d['mean_output_tokens']:.1f} tokens")
    print(f"model {args.model}, KV budget {results[0].capacity_tokens:,} token slots "
          f"({results[0].capacity_tokens // args.block_size:,} blocks of {args.block_size})")
    print("share of occupied KV memory, averaged over steps: token states, reserved for future tokens, internal and\n"
          "external fragmentation, paged tail slack; blocks saved by sharing; mean and peak running requests")
    paper = paper_setting(args)
    rows = [dict(r.summary, paper_share_token_states=PAPER_TOKEN_STATE_SHARE.get(r.policy) if paper else None)
            for r in results]
    print(format_table(rows, list(COLUMNS), COLUMNS))
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        from .sim.plots import plot_results
        fig = plot_results(results, title=f"{d['name']} on {args.model}", paper=paper)
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return simulate_command(args)
    except (ValueError, TypeError, OSError) as e:  # bad input: option values, trace files, missing files
        message = " ".join(str(e).split())  # one line, whatever the exception's text holds
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
