"""Problem set 3's visible checks (a paged KV cache in code), one function per test cell.

Each ``qN_tests(t)`` takes the test cell's record ``t`` and returns the helpers that cell's hidden
cases reuse. When an output is wrong, the message names the known slips that explain it, two at once
if only two together do; when none does, it says which outputs are wrong (requests, heads), never
pointing at a part those outputs show to be right.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Any, Callable

import torch

from ....attention.batch import PagedBatch, random_paged_batch


# -- Q1: the slot mapping -----------------------------------------------------------------------------

_TIMES_S = "the block id counts whole blocks: multiply it by block_size"
_TABLE = "a position's block comes from the block table: the physical blocks are not in order"
_FROM_0 = "slots count from 0: off by one"


def _slot_mistakes(table: list, positions: list, S: int) -> list[tuple[list, str]]:
    """Known wrong slot lists, each slip alone and two at once, each with what to do instead."""
    def said(*slips: str) -> str:
        if len(slips) == 1:
            return slips[0][0].upper() + slips[0][1:] + "."
        return "Two slips at once: " + "; ".join(f"({i}) {slip}" for i, slip in enumerate(slips, 1)) + "."

    return [([table[p // S] + p % S for p in positions], said(_TIMES_S)),
            (list(positions), said(_TABLE)),
            ([table[p // S] * S + p % S + 1 for p in positions], said(_FROM_0)),
            ([table[p // S] + p % S + 1 for p in positions], said(_TIMES_S, _FROM_0)),
            ([p + 1 for p in positions], said(_TABLE, _FROM_0)),
            ([p // S + p % S for p in positions], said(_TIMES_S, _TABLE))]


def q1_tests(t) -> tuple[Any, Callable, Callable]:
    """The worked example of Q1; returns ``(checks, slots, slot_mistakes)`` for the hidden cases."""
    checks = t.checks
    slot_mapping = t.yours("slot_mapping")

    def slots_of(table, positions, S):
        got = slot_mapping(table, positions, S)
        checks.require(isinstance(got, (list, tuple)) and len(got) == len(positions),
                       f"slot_mapping should return one slot per position ({len(positions)}), got {got!r}")
        return list(got)

    checks.check_value("slot_mapping([7, 2, 9], [0, 3, 4, 9], 4)", slots_of([7, 2, 9], [0, 3, 4, 9], 4), [28, 31, 8, 37],
                       misconceptions=_slot_mistakes([7, 2, 9], [0, 3, 4, 9], 4),
                       hint="Position p sits at offset p % S of logical block p // S.")
    return checks, slots_of, _slot_mistakes


# -- Q2 to Q4: the allocator, driven beside the library's and compared after every operation ---------

def _allocator_checks(t) -> tuple[type, Callable]:
    """``(Pair, random_run)``: your allocator and the reference in step, and a random run of them."""
    checks = t.checks
    # The reference is the library's; while grading it is hidden from your kernel, and the grader compares.
    reference = t.reference("pagedkv_lib.blocks.manager", "BlockManager")
    allocator = t.yours("PagedAllocator")
    ids = itertools.count()

    class Pair:
        """Your allocator and the reference, driven in step and compared after every operation."""

        def __init__(self, what, num_blocks, S):
            self.what, self.S = what, S
            self.mine = allocator(num_blocks, S)
            self.ref = None if reference is None else reference(num_blocks, S, enable_prefix_caching=False)
            self.live = []

        def _tokens(self, n):
            return [next(ids) for _ in range(n)]

        def do(self, op, *args):
            call, ref = f"{op}{args}", self.ref
            if op == "allocate":
                self.mine.allocate(*args)
                if ref is not None:
                    ref.add_request(args[0], self._tokens(args[1]))
                self.live.append(args[0])
            elif op == "fork":
                self.mine.fork(*args)
                if ref is not None:
                    ref.fork(*args)
                self.live.append(args[1])
            elif op == "free":
                self.mine.free(*args)
                if ref is not None:
                    ref.free(*args)
                self.live.remove(args[0])
            else:
                mine = checks.plain(self.mine.append(*args))
                self.copies(call, mine, None if ref is None else ref.append_tokens(args[0], self._tokens(args[1])), args[0])
            self.compare(call)

        def copies(self, call, mine, ref, rid):
            checks.require(isinstance(mine, (list, tuple)), f"{self.what}: append should return a list of (src, dst) copies, got {mine!r}")
            if ref is not None and ref and not mine:
                checks.require(False, f"{self.what}: after {call} the request wrote into a partly filled block another "
                               "table also holds: copy-on-write must move it onto a fresh copy first.")
            checks.require(ref is None or len(mine) == len(ref), f"{self.what}: {call} returned {len(mine)} copies; a copy "
                           "is needed only for a shared, partly filled last block.")
            table = [int(b) for b in checks.plain(self.mine.block_table(rid))]
            for src, dst in mine:
                checks.require(dst in table and src not in table,
                               f"{self.what}: after {call} the copy (src, dst) = {(src, dst)!r} should move the request "
                               "from src to its new block dst.")

        def _layout(self, who, table_of, refs):
            tables = {r: [int(b) for b in checks.plain(table_of(r))] for r in self.live}
            shared = {}
            for r, tb in tables.items():
                for i, b in enumerate(tb):
                    shared.setdefault(b, set()).add((r, i))
            return tables, {frozenset(v) for v in shared.values()}, {(r, i): int(checks.plain(refs(b))) for r, tb in tables.items() for i, b in enumerate(tb)}

        def compare(self, call):
            mt, ms, mr = self._layout("yours", self.mine.block_table, self.mine.ref_count)
            if self.ref is not None:
                rt, rs, rr = self._layout("ref", self.ref.block_table, self.ref.ref_count)
                for r in self.live:
                    checks.require(len(mt[r]) == len(rt[r]), f"{self.what}: after {call}, request {r!r} holds {len(mt[r])} "
                                   f"blocks; a request of T tokens holds ceil(T / S) blocks (S = {self.S}).")
                checks.require(ms == rs, f"{self.what}: after {call}, the blocks shared between tables are not the right ones: "
                               "fork shares every block of the parent, and a request's own blocks are its alone.")
                checks.require(mr == rr, f"{self.what}: after {call}, a ref count is off: it counts the tables that hold the block.")
            free = int(checks.plain(self.mine.num_free_blocks()))
            checks.require(self.ref is None or free == self.ref.num_free_blocks, f"{self.what}: after {call}, "
                           f"num_free_blocks() = {free} is not right: a block returns to the pool only when no table holds it.")

        def out_of_blocks(self, op, *args):
            before = self._layout("yours", self.mine.block_table, self.mine.ref_count), self.mine.num_free_blocks()
            try:
                getattr(self.mine, op)(*args)
            except checks.NotWritten:  # a stub has not raised "correctly"
                raise
            except Exception:
                after = self._layout("yours", self.mine.block_table, self.mine.ref_count), self.mine.num_free_blocks()
                checks.require(after == before, f"{self.what}: {op}{args} raised, but changed the allocator first.")
                return
            checks.require(False, f"{self.what}: {op}{args} needs more blocks than are free: it should raise.")

    def random_run(what, seed, ops, forks, appends_after_fork):
        rng = random.Random(seed)
        for S in (1, 2, 4, 16):
            pair, n = Pair(what, 400, S), 0
            for _ in range(ops):
                choice = rng.random()
                if not pair.live or choice < 0.3:
                    pair.do("allocate", f"r{n}", max(1, rng.choice([1, S - 1, S, S + 1, 2 * S, rng.randrange(1, 3 * S + 2)])))
                    n += 1
                elif forks and choice < 0.5:
                    pair.do("fork", rng.choice(pair.live), f"r{n}")
                    n += 1
                elif choice < 0.8 and (appends_after_fork or not forks):
                    pair.do("append", rng.choice(pair.live), rng.choice([1, 1, 1, S, S + 1]))
                elif choice < 0.9:
                    pair.do("free", rng.choice(pair.live))

    return Pair, random_run


def _worked_example(Pair, steps) -> None:
    pair = Pair("worked example", 8, 4)
    for step in steps:
        pair.do(*step)


def q2_tests(t) -> tuple[type, Callable]:
    """Q2's worked example (allocate, append and free); returns ``(Pair, random_run)``."""
    Pair, random_run = _allocator_checks(t)
    _worked_example(Pair, [("allocate", "a", 6), ("append", "a", 2), ("append", "a", 1), ("free", "a")])
    return Pair, random_run


def q3_tests(t) -> Callable:
    """Q3's worked example (fork and ref counts); returns ``random_run``."""
    Pair, random_run = _allocator_checks(t)
    _worked_example(Pair, [("allocate", "a", 6), ("fork", "a", "b"), ("free", "a"), ("free", "b")])
    return random_run


def q4_tests(t) -> Callable:
    """Q4's worked example (copy-on-write); returns ``random_run``."""
    Pair, random_run = _allocator_checks(t)
    _worked_example(Pair, [("allocate", "a", 6), ("fork", "a", "b"), ("append", "b", 1), ("append", "a", 3),
                           ("free", "a"), ("free", "b")])
    return random_run


# -- Q5 and the bonus: paged decode attention -------------------------------------------------------

#: The slips a paged decode is known for, by key: what to do instead.
DECODE_SLIPS = {
    "head mapping": "query head h must read KV head h // G (consecutive query heads share a KV head), not h % H_kv",
    "scale": "scale the scores by 1 / sqrt(D) before the softmax",
    "length": "attend over all seq_lens[b] tokens of request b: the last one is left out",
    "block table": "read request b's blocks through its block table (block_tables[b]), not blocks 0, 1, 2 in order",
}


def _attention(batch: PagedBatch, slips: frozenset) -> torch.Tensor:
    """Attention for each request with the known ``slips`` made (see :data:`DECODE_SLIPS`), ``[B, H_q, D]``.

    Only wrong variants are asked for (``slips`` is never empty), from each request's own K/V, or from
    the cache's first blocks for the slip ``"block table"``.
    """
    B, H_q, D = batch.q.shape
    S, H_kv = batch.k_cache.shape[1], batch.k_cache.shape[2]
    heads = torch.arange(H_q) % H_kv if "head mapping" in slips else torch.arange(H_q) // (H_q // H_kv)
    out = []
    for b in range(B):
        T = int(batch.seq_lens[b]) - ("length" in slips)
        if "block table" in slips:
            blocks = torch.arange(-(-T // S))
            k = batch.k_cache[blocks].reshape(-1, H_kv, D)[:T].float()
            v = batch.v_cache[blocks].reshape(-1, H_kv, D)[:T].float()
        else:
            k, v = batch.keys[b][:T].float(), batch.values[b][:T].float()
        scores = torch.einsum("hd,thd->ht", batch.q[b].float(), k[:, heads]) / (1.0 if "scale" in slips else math.sqrt(D))
        out.append(torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v[:, heads]))
    return torch.stack(out)


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal in shape and, within 1e-4, in every value (allclose alone broadcasts: an empty tensor would pass)."""
    return got.shape == want.shape and bool(torch.allclose(got, want.float(), atol=1e-4, rtol=1e-4, equal_nan=True))


def _listed(items: list, limit: int = 6) -> str:
    shown = ", ".join(str(x) for x in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def wrong_outputs(batch: PagedBatch, wrong: torch.Tensor, are: str = "are wrong", others: str = "right") -> str:
    """What the failing outputs show: which requests (with their lengths) and which query heads are wrong.

    ``wrong [B, H_q]`` is True where an output row differs from the right one (or holds NaN: say so with
    ``are`` and ``others``). Requests whose rows are all right are named too (whatever is wrong spares
    them), and so is what sets the wrong ones apart, when one thing does: a partly filled last block, a
    last block filled exactly, or more than one block.
    """
    S = batch.block_size
    lengths = [int(t) for t in batch.seq_lens]
    bad = [b for b in range(wrong.shape[0]) if wrong[b].any()]
    good = [b for b in range(wrong.shape[0]) if not wrong[b].any()]
    named = lambda rs: _listed([f"{b} (T={lengths[b]})" for b in rs])
    heads = sorted({h for b in bad for h in range(wrong.shape[1]) if wrong[b, h]})
    if not good:
        text = f"the outputs of every request {are}"
    else:
        text = f"the outputs of requests {named(bad)} {are}, those of requests {named(good)} {others} (S={S})"
        for apart, what in [(lambda T: T % S != 0, "ends in a partly filled block"), (lambda T: T % S == 0, "fills its last block"),
                            (lambda T: T > S, "spans more than one block")]:
            if all(apart(lengths[b]) for b in bad) and not any(apart(lengths[b]) for b in good):
                text += f": each wrong one {what}, no right one does"
                break
    if len(heads) < wrong.shape[1]:
        text += f", in query heads {_listed(heads)} only (of {wrong.shape[1]})"
    return text


def decode_diagnosis(checks, what: str, batch: PagedBatch, got: torch.Tensor, right: torch.Tensor,
                     variant: Callable[[frozenset], torch.Tensor], slips: dict[str, str], nan_why: str) -> None:
    """Pass if ``got`` (a paged decode's output for ``batch``) is ``right``; else fail saying what is wrong.

    ``variant(keys)`` is the output with the known slips ``keys`` made; the slips (``slips``, key: what to
    do instead) are tried alone and two at once, and those that explain ``got`` are named. A slip that
    leaves this batch's output right (h % H_kv when G = 1) explains nothing here and is not named.
    Otherwise the message says which requests and heads are wrong, and which are right; ``nan_why`` says
    what can put NaN into an output (the cache's unowned slots hold NaN).
    """
    checks.require(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(right.shape),
                   f"{what}: the output should be a tensor shaped like q {tuple(right.shape)}, got "
                   f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    if _same(got, right):
        return
    checks.name_slips(what, lambda keys: _same(got, (wrong := variant(keys))) and not _same(right, wrong), slips)
    if torch.isnan(got).any():
        checks.require(False, f"{what}: the output holds NaN ({wrong_outputs(batch, torch.isnan(got).any(-1), 'hold NaN', 'do not')}): {nan_why}")
    wrong = ~torch.isclose(got, right.float(), atol=1e-4, rtol=1e-4).all(-1)
    checks.require(False, f"{what}: {wrong_outputs(batch, wrong)}; no known slip ({', '.join(slips)}) explains them, "
                   "alone or two at once.")


def q5_tests(t) -> tuple[Any, Callable, Callable]:
    """Q5's worked example; returns ``(checks, random_paged_batch, decode_check)`` for the hidden batches."""
    checks = t.checks
    paged_decode = t.yours("paged_decode")

    def decode_check(what, batch):
        """Your output for ``batch``, after the checks against plain attention over each request's own K/V."""
        got = paged_decode(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
        checks.require(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(batch.q.shape),
                       f"{what}: paged_decode should return a tensor shaped like q {tuple(batch.q.shape)}, got "
                       f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        got = got.float()
        decode_diagnosis(checks, what, batch, got, _own_attention(batch), lambda keys: _attention(batch, keys), DECODE_SLIPS,
                         "those requests read slots that hold none of their tokens (past their length, table entries of "
                         "-1, or blocks not in their table); such slots hold garbage (NaN) here.")
        return got

    decode_check("the worked example", random_paged_batch([5, 8], block_size=4, num_kv_heads=2, group=2, head_dim=8, seed=1))
    return checks, random_paged_batch, decode_check


def _own_attention(batch: PagedBatch) -> torch.Tensor:
    """Plain attention over each request's own keys and values (``batch.keys``, ``batch.values``): the spec."""
    B, H_q, D = batch.q.shape
    out = []
    for b in range(B):
        k, v = batch.keys[b].float(), batch.values[b].float()
        heads = torch.arange(H_q) // (H_q // k.shape[1])
        scores = torch.einsum("hd,thd->ht", batch.q[b].float(), k[:, heads]) / math.sqrt(D)
        out.append(torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v[:, heads]))
    return torch.stack(out)


#: The slips a Triton paged decode kernel is known for, by key: what to do instead.
KERNEL_SLIPS = {
    "heads served": "program (b, h) serves the consecutive query heads h * GROUP .. h * GROUP + GROUP - 1, not h, h + H_KV, ...",
    "scale": "multiply the scores by scale (1 / sqrt(D)) before the softmax",
}


def _kernel_variant(reference: Callable, batch: PagedBatch, slips: frozenset) -> torch.Tensor:
    """The reference's output with the kernel's known ``slips`` made (see :data:`KERNEL_SLIPS`)."""
    scale = {"scale": 1.0} if "scale" in slips else {}
    if "heads served" not in slips:
        return reference(*batch.args(), **scale).float()
    B, H_q, _ = batch.q.shape
    H_kv = batch.k_cache.shape[2]
    perm = [(i % H_kv) * (H_q // H_kv) + i // H_kv for i in range(H_q)]  # program h serves heads h, h + H_kv, ...
    q = torch.empty_like(batch.q)
    q[:, perm] = batch.q
    return reference(q, *batch.args()[1:], **scale).float()[:, perm]


def launch_paged_decode(kernel, batch: PagedBatch) -> torch.Tensor:
    """The bonus's ``kernel`` run on ``batch``: one program per (request, KV head), float32, on the GPU, or
    on the CPU under ``TRITON_INTERPRET=1``. The output starts as NaN, so a head no program writes stays NaN."""
    import os
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    q, k, v = (x.float().contiguous().to(device) for x in (batch.q, batch.k_cache, batch.v_cache))
    tables, lens = (x.to(torch.int32).contiguous().to(device) for x in (batch.block_tables, batch.seq_lens))
    num_requests, H_q, D = q.shape
    H_kv = k.shape[2]
    out = torch.full_like(q, float("nan"))
    kernel[(num_requests, H_kv)](q, k, v, out, tables, lens, 1 / math.sqrt(D), tables.shape[1],
                                 H_KV=H_kv, GROUP=H_q // H_kv, S=k.shape[1], D=D)
    return out.cpu()


#: The bonus as the grader also runs it alone, outside the learner's notebook (``instructor/grading/kernel_alone.py``):
#: its test cell, its answer cell, the kernel's name, the function that launches it (in this module), and the
#: library's reference the grader compares with (``module:name``; hidden inside the sandbox).
RUN_ALONE = {"test": "bonus_tests", "answer": "bonus_answer", "kernel": "paged_decode_kernel", "launch": "launch_paged_decode",
             "reference": "pagedkv_lib.attention.spec:paged_decode_reference"}


def run_alone_batches(seed: int) -> list[PagedBatch]:
    """Batches shaped as the bonus's hidden ones (block sizes 4, 1 and 16; one to eight query heads per KV
    head; lengths at the block boundaries), drawn from ``seed``: the grader's own, never the notebook's."""
    from ....attention.batch import boundary_lengths
    shapes = [dict(block_size=4, num_kv_heads=2, group=1), dict(block_size=1, num_kv_heads=2, group=4),
              dict(block_size=16, num_kv_heads=1, group=8)]
    return [random_paged_batch(boundary_lengths(s["block_size"]), head_dim=16, seed=seed + i, **s)
            for i, s in enumerate(shapes)]


def bonus_tests(t, namespace: dict) -> tuple[Callable, Callable]:
    """The bonus's worked examples; returns ``(random_paged_batch, kernel_check)`` for the hidden batches.

    ``namespace`` is the notebook's (``globals()`` in the test cell), where your kernel is defined.
    """
    import importlib.util

    checks = t.checks
    if not t.run("triton is installed", lambda: importlib.util.find_spec("triton") is not None):
        raise checks.Skipped("Bonus skipped: triton is not installed here, so the bonus scores 0; "
                             "this costs you nothing (the set is graded out of 26 points).")
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    # The reference is the library's; while grading it is hidden from your kernel, and the grader compares.
    reference = t.reference("pagedkv_lib.attention.spec", "paged_decode_reference")
    t.yours("paged_decode_kernel")  # not written yet: this says so
    checks.require(t.run("paged_decode_kernel is a Triton kernel",
                         lambda: isinstance(namespace["paged_decode_kernel"], (JITFunction, InterpretedFunction))),
                   "paged_decode_kernel should be a Triton kernel: keep the @triton.jit line above its def.")

    def launch(batch):
        return launch_paged_decode(checks.yours_in(namespace, "paged_decode_kernel"), batch)

    def kernel_check(what, batch):
        # in a child process: a kernel that writes outside its tensor kills the child, not your notebook
        got = t.run(f"paged_decode_kernel on {what}", checks.isolated, f"paged_decode_kernel on {what}", launch, batch)
        nan_why = ("a program read slots past its request's length (they hold NaN here) or table entries past its "
                   "blocks, or left a query head unwritten.")
        if reference is None:  # your kernel, while graded: the grader compares
            checks.require(not torch.isnan(got).any(), f"{what}: the output holds NaN: {nan_why}")
            return
        decode_diagnosis(checks, what, batch, got.float(), reference(*batch.args()).float(),
                         lambda keys: _kernel_variant(reference, batch, keys), KERNEL_SLIPS, nan_why)

    kernel_check("the worked example", random_paged_batch([5, 8], block_size=4, num_kv_heads=2, group=2, head_dim=8, seed=1))
    kernel_check("the second worked example", random_paged_batch([3, 17], block_size=4, num_kv_heads=1, group=4, head_dim=8, seed=2))
    return random_paged_batch, kernel_check


# -- Q7: vLLM v1's chained block keys -----------------------------------------------------------------

def toy_block_hash(parent, tokens, extra) -> str:
    """The block hash Q7's checks hand your ``chain_keys``: 16 hex digits of SHA-256 over ``repr`` of its
    inputs (tokens and extra keys read as tuples, so a list or a tuple gives the same key)."""
    import hashlib
    return hashlib.sha256(repr((parent, tuple(tokens), tuple(extra))).encode()).hexdigest()[:16]


_PARTIAL = "only full blocks get a key: a partly filled last block is not cached"
_SALT_ALL = "the salt enters block 0 only: later blocks inherit it through their parent's key"
_UNCHAINED = "each block's parent is the key of the block before it (None for block 0): the keys must chain"


def _chain_variant(tokens, S, salt, *, partial=False, salt_all=False, chained=True) -> list:
    """Keys as a known slip computes them (each keyword one slip, at least one), with :func:`toy_block_hash`."""
    if not (partial or salt_all or not chained):
        raise ValueError("_chain_variant computes slips: set partial, salt_all or chained=False")
    keys, parent = [], None
    for i in range(-(-len(tokens) // S) if partial else len(tokens) // S):
        extra = (salt,) if salt is not None and (i == 0 or salt_all) else ()
        key = toy_block_hash(parent if chained else None, tuple(tokens[i * S:(i + 1) * S]), extra)
        keys.append(key)
        parent = key
    return keys


def _chain_mistakes(tokens, S, salt) -> list[tuple[list, str]]:
    """Known wrong key lists, each slip alone, with what to do instead (a caller drops those equal to the right keys)."""
    return [(_chain_variant(tokens, S, salt, partial=True), _PARTIAL[0].upper() + _PARTIAL[1:] + "."),
           (_chain_variant(tokens, S, salt, salt_all=True), _SALT_ALL[0].upper() + _SALT_ALL[1:] + "."),
           (_chain_variant(tokens, S, salt, chained=False), _UNCHAINED[0].upper() + _UNCHAINED[1:] + ".")]


#: Q7's worked examples: (tokens, block_size, salt, keys), the keys written out (toy_block_hash).
Q7_EXAMPLES = [(list(range(10)), 4, None, ["63a3d466563c59cf", "a75fdf8751aa6b71"]),
               (list(range(10)), 4, "tenant-a", ["2798786bd564b940", "aa4be065b7f8fdbc"])]


def q7_tests(t) -> tuple[Any, Callable, Callable]:
    """The worked examples of Q7; returns ``(checks, keys_of, chain_mistakes)`` for the hidden cases."""
    checks = t.checks
    chain_keys = t.yours("chain_keys")

    def keys_of(tokens, S, salt):
        got = chain_keys(list(tokens), S, toy_block_hash, salt)
        checks.require(isinstance(got, (list, tuple)), f"chain_keys should return a list of keys, got {got!r}")
        return list(got)

    for tokens, S, salt, want in Q7_EXAMPLES:
        checks.check_value(f"chain_keys({tokens}, {S}, toy_block_hash, salt={salt!r})", keys_of(tokens, S, salt), want,
                           misconceptions=[(w, why) for w, why in _chain_mistakes(tokens, S, salt) if w != want],
                           hint="One key per full block; pass the previous key as the parent.")
    return checks, keys_of, _chain_mistakes
