"""Problem set 2's visible checks (the accounting), one function per test cell.

Each ``qN_tests(t, V)`` takes the test cell's record ``t`` and your numbers ``V``, runs the question's
worked examples on your code (or checks that your answer is set and of the right kind), and returns
what the grader's hidden checks reuse.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import Any, Callable, Iterator


def _set(t, name: str) -> Any:
    """Your variable ``name``, after checking that you set it."""
    t.checks.require(t.value(name) is not None, f"Set {name} in the cell above and run it.")
    return t.value(name)


def _count(t, name: str, unit: str) -> int:
    """Your ``name``, checked to be a whole number (an int)."""
    n = _set(t, name)
    t.checks.require(isinstance(n, int) and not isinstance(n, bool), f"{name} should be a whole number of {unit} (an int), got {n!r}")
    return n


def q1_tests(t, V) -> tuple[Any, Callable]:
    """Q1's worked example; returns ``(checks, kv_bytes_per_token)``."""
    checks = t.checks
    kv_bytes = t.yours("kv_bytes_per_token")  # your function: its errors come back as one line
    checks.check_value("kv_bytes_per_token(3, 2, 64, 4)", kv_bytes(3, 2, 64, 4), 3072,
                       misconceptions=[(1536, "That is half: each token stores a key AND a value."),
                                       (24_576, "Looks like bits, not bytes: b is bytes per scalar.")],
                       hint="Multiply all four factors and the 2 for keys and values.")
    return checks, kv_bytes


def q2_tests(t, V) -> tuple[Any, Callable]:
    """Q2's worked examples; returns ``(checks, blocks_needed)``."""
    checks = t.checks
    blocks = t.yours("blocks_needed")  # your function: its errors come back as one line
    rounded_down = "Rounding down drops the last, partly filled block: its tokens need a block too."
    checks.check_value("blocks_needed(15, 4)", blocks(15, 4), 4, misconceptions=[(3, rounded_down)])
    checks.check_value("blocks_needed(16, 4)", blocks(16, 4), 4,
                       misconceptions=[(5, "Off by one at a block boundary: 16 tokens fill 4 blocks of 4 exactly.")])
    checks.check_value("blocks_needed(17, 4)", blocks(17, 4), 5, misconceptions=[(4, rounded_down)])
    checks.check_value("blocks_needed(0, 4)", blocks(0, 4), 0, hint="A request with no tokens holds no blocks.")
    return checks, blocks


@contextlib.contextmanager
def graded_alone(namespace: dict, stand_in: Callable | None = None) -> Iterator[None]:
    """While a Q3 or Q4 test runs, the notebook's ``blocks_needed`` is the library's (or ``stand_in``), so your
    Q2 is not counted twice; yours is put back after, however the test ends."""
    if stand_in is None:
        from ....accounting import blocks_needed as stand_in
    yours = namespace.get("blocks_needed")
    namespace["blocks_needed"] = stand_in
    try:
        yield
    finally:
        namespace["blocks_needed"] = yours


def q3_tests(t, V) -> tuple[Any, Callable]:
    """Q3's worked examples; returns ``(checks, pair)``, where ``pair(lengths, S)`` is your (R, W), checked to be a pair."""
    checks = t.checks
    reserved_and_slack = t.yours("reserved_and_slack")

    def pair(lengths, S):
        got = reserved_and_slack(lengths, S)
        checks.require(isinstance(got, (tuple, list)) and len(got) == 2,
                       f"reserved_and_slack({lengths}, {S}) should return the pair (R, W), got {got!r}")
        return got

    R, W = pair([15, 17, 14], 4)
    checks.require(isinstance(R, int) and R % 4 == 0, f"R = {R!r} should be a whole number of blocks of 4 slots (R % S == 0).")
    checks.check_value("reserved_and_slack([15, 17, 14], 4)", (R, W), (52, 6),
                       misconceptions=[((46, 0), "R counts whole blocks: a partly used block is reserved in full."),
                                       ((6, 52), "The order is (R, W): reserved slots first, then slack.")],
                       hint="R is block_size times the total number of blocks; W is what R holds beyond the tokens.")
    checks.check_value("reserved_and_slack([], 4)", pair([], 4), (0, 0),
                       hint="An empty batch reserves 0 slots and wastes 0; with numpy, an empty array's sum is a float.")
    return checks, pair


_LEDGER_HINTS = {"logical": "Every continuation reads the whole prefix plus its own tail.",
                 "unique": "Stored tokens: the prefix once, plus every tail.",
                 "reserved": "Block size times distinct blocks: the prefix's blocks once, plus each tail's own blocks.",
                 "slack": "W = R - T_unique."}


def _ledger_mistakes(P, tails, S):
    """{key: [(wrong value, why)]}: the prefix stored per request, and tails packed into the prefix's last block."""
    up = lambda n: -(-n // S)
    per_request = S * sum(up(P + n) for n in tails)
    packed = S * up(P + sum(tails)) if tails else 0
    return {"unique": [(sum(P + n for n in tails), "That stores the prefix once per continuation: store it once.")],
            "reserved": [(per_request, "That reserves the prefix once per continuation: its blocks are shared."),
                         (packed, "Each tail starts in fresh blocks: tails are not packed into the prefix's last block.")],
            "slack": [(per_request - sum(P + n for n in tails), "That counts the prefix once per continuation.")]}


def q4_tests(t, V) -> tuple[Callable, Callable]:
    """Q4's worked examples; returns ``(ledger, check_ledger)``: your function, and the check of one of its results."""
    checks = t.checks
    ledger = t.yours("shared_prefix_ledger")

    def check_ledger(args, want, got):
        checks.require(isinstance(got, dict) and set(want) <= set(got),
                       f"shared_prefix_ledger{args} should return a dict with keys {sorted(want)}, got {got!r}")
        wrong = _ledger_mistakes(*args)
        for key in ("logical", "unique", "reserved", "slack"):
            mistakes = [(v, why) for v, why in wrong.get(key, []) if v != want[key]]
            checks.check_value(f"shared_prefix_ledger{args}[{key!r}]", got[key], want[key], hint=_LEDGER_HINTS[key],
                               misconceptions=mistakes)

    check_ledger((12, [3, 5, 2], 4), {"logical": 46, "unique": 22, "reserved": 28, "slack": 6}, ledger(12, [3, 5, 2], 4))
    check_ledger((12, [3, 5, 2], 8), {"logical": 46, "unique": 22, "reserved": 40, "slack": 18}, ledger(12, [3, 5, 2], 8))
    return ledger, check_ledger


def q5_tests(t, V) -> tuple[Any, int]:
    """Q5: ``gpu_blocks`` is a positive whole number."""
    n = _count(t, "gpu_blocks", "blocks")
    t.checks.require(n > 0, f"gpu_blocks = {n}: your GPU leaves room for the KV cache after the weights, so some blocks fit.")
    return t.checks, n


def q6_tests(t, V) -> tuple[Any, float, int, int]:
    """Q6: ``expected_slack_slots`` lies between 0 and a block per request; returns ``(checks, it, requests, S)``."""
    x = _set(t, "expected_slack_slots")
    t.checks.require(isinstance(x, numbers.Real) and not isinstance(x, bool),
                     f"expected_slack_slots should be a number of token slots, got {x!r}")
    n, S = V.q6_requests, V.q6_block_size
    t.checks.require(0 <= x < n * S, f"expected_slack_slots = {x}: each request's slack lies between 0 and S - 1 slots.")
    return t.checks, x, n, S


def q7_tests(t, V) -> tuple[Any, int]:
    """Q7: ``fp8_tokens`` is a whole number of the right order of magnitude (when your Q1 is right)."""
    checks = t.checks
    n = _count(t, "fp8_tokens", "tokens")
    try:  # with a slip in Q1 the range below would count it twice; the grader follows it through instead
        q1_right = checks.plain(t.yours("kv_bytes_per_token")(3, 2, 64, 4)) == 3072
    except Exception:
        q1_right = False
    checks.require(not q1_right or 10**4 < n < 10**8, f"fp8_tokens = {n} is off by orders of magnitude: a token of "
                   "these models takes tens to hundreds of kB of cache.")
    return checks, n


def q9_tests(t, V) -> tuple[Any, int, int]:
    """Q9: ``hybrid_blocks`` and ``hybrid_requests`` are whole numbers, the blocks at least a full-attention
    group's; returns ``(checks, hybrid_blocks, hybrid_requests)``."""
    checks = t.checks
    blocks, requests = _count(t, "hybrid_blocks", "blocks"), _count(t, "hybrid_requests", "requests")
    checks.require(blocks >= -(-V.q9_tokens // V.q9_block_size), f"hybrid_blocks = {blocks}: each full-attention "
                   "group alone keeps every block of the request, none of which falls out of a window.")
    checks.require(requests > 0, f"hybrid_requests = {requests}: your memory holds at least one such request.")
    return checks, blocks, requests
