"""The fused paged decode kernel equals attention over the logical K/V, wherever blocks live, and is
safe to import anywhere: no process-wide change, and any failure of numba's falls back to torch.

The kernel tests need numba (the ``fast`` extra, which ``make test`` installs) and skip without it.
They run in one xdist group, so one worker compiles (or loads from numba's disk cache) the
kernel's two versions; the subprocess tests load what it cached.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import threading
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention.batch import boundary_lengths, random_paged_batch
from pagedkv_lib.kernels import fused_decode as FD

pytestmark = pytest.mark.xdist_group("numba")


@pytest.fixture(scope="module")
def na():
    """The module under test, its compiled kernel ready (the tests below would pass on the fallback too)."""
    pytest.importorskip("numba", reason="numba is not installed: python -m pip install numba")
    for dtype in (torch.float32, torch.float16):
        assert FD.kernel_unavailable(dtype) is None
    return FD


def reference(batch, scale=None) -> torch.Tensor:
    """The spec: fp32 dense attention of each query over its request's logical K/V."""
    return torch.stack([A.dense_attention(batch.q[b : b + 1].float(), k.float(), v.float(), causal=False,
                                          scale=scale)[0]
                        for b, (k, v) in enumerate(zip(batch.keys, batch.values))])


def assert_matches_reference(out, batch, scale=None):
    atol, rtol = A.TOLERANCES[out.dtype]
    torch.testing.assert_close(out.float(), reference(batch, scale), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("S", [4, 16])
def test_boundary_lengths_match_dense_attention(na, S, group, dtype):
    batch = random_paged_batch(boundary_lengths(S), block_size=S, group=group, dtype=dtype, seed=S + group)
    out = na.paged_decode_numba(*batch.args())
    assert out.dtype == dtype and out.shape == batch.q.shape
    assert_matches_reference(out, batch)


@pytest.mark.parametrize("garbage", [float("nan"), 1e30, -1e30, float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_garbage_in_unused_slots_and_padding_never_leaks(na, garbage, dtype):
    if dtype == torch.bfloat16 and abs(garbage) == 1e30:
        garbage = garbage / 1e10           # 1e30 is no bf16 edge case; keep a large finite value
    batch = random_paged_batch([1, 15, 16, 17, 40], block_size=16, garbage=garbage, spare_blocks=5,
                               extra_columns=3, dtype=dtype, seed=3)
    out = na.paged_decode_numba(*batch.args())
    assert torch.isfinite(out).all()
    assert_matches_reference(out, batch)


def test_moving_blocks_and_renaming_them_in_the_table_changes_no_bit(na):
    batch = random_paged_batch([33, 64, 5], shuffle=False, seed=1)
    perm = torch.randperm(batch.k_cache.shape[0], generator=torch.Generator().manual_seed(0))
    k_moved, v_moved = torch.empty_like(batch.k_cache), torch.empty_like(batch.v_cache)
    k_moved[perm], v_moved[perm] = batch.k_cache, batch.v_cache          # block i now lives at perm[i]
    tables = batch.block_tables.clone()
    used = tables >= 0
    tables[used] = perm[tables[used]]
    moved = na.paged_decode_numba(batch.q, k_moved, v_moved, tables, batch.seq_lens)
    assert torch.equal(moved, na.paged_decode_numba(*batch.args()))


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=6), S=st.sampled_from([1, 3, 8, 16]),
       num_kv_heads=st.integers(1, 3), group=st.sampled_from([1, 2, 4, 6, 8]), head_dim=st.sampled_from([1, 8, 24]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       shuffle=st.booleans(), scale=st.one_of(st.none(), st.floats(0.01, 3.0)), seed=st.integers(0, 99))
def test_matches_paged_decode_online_on_random_batches(na, lens, S, num_kv_heads, group, head_dim, dtype,
                                                       shuffle, scale, seed):
    batch = random_paged_batch(lens, block_size=S, num_kv_heads=num_kv_heads, group=group, head_dim=head_dim,
                               dtype=dtype, shuffle=shuffle, seed=seed)
    out = na.paged_decode_numba(*batch.args(), scale=scale)
    online = A.paged_decode_online(*batch.args(), scale=scale)
    atol, rtol = A.TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), online.float(), atol=2 * atol, rtol=2 * rtol)
    if dtype == torch.float32:
        torch.testing.assert_close(out, reference(batch, scale), atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(lens=st.lists(st.integers(1, 200), min_size=1, max_size=9), seed=st.integers(0, 2**16))
def test_the_result_is_the_same_bits_on_one_thread_and_on_two(na, lens, seed):
    """Every request is run once, by one thread, whichever takes it: the same bits on 1 and 2 threads,
    for batches smaller and larger than the thread count."""
    batch = random_paged_batch(lens, block_size=8, seed=seed)
    threads = torch.get_num_threads()
    outs = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outs.append(na.paged_decode_numba(*batch.args()))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert_matches_reference(outs[0], batch)


@settings(max_examples=20, deadline=None)
@given(lens=st.lists(st.integers(1, 90), min_size=1, max_size=5), S=st.sampled_from([1, 4, 16]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), ahead=st.sampled_from([1, 3, 16, 1000]),
       seed=st.integers(0, 999))
def test_asking_for_rows_ahead_changes_no_bit(na, lens, S, dtype, ahead, seed):
    """A prefetch only says when memory arrives: any distance, or none, gives the same bits."""
    from pagedkv_lib.kernels import prefetch
    batch = random_paged_batch(lens, block_size=S, dtype=dtype, seed=seed)
    outs = []
    for distance in (0, ahead):
        with mock.patch.object(prefetch, "PREFETCH_TOKENS", distance):
            outs.append(na.paged_decode_numba(*batch.args()))
    assert torch.equal(outs[0], outs[1])


def test_each_pass_asks_for_each_heads_part_of_the_rows_ahead_once_through_the_table(na, tmp_path):
    """Every prefetch both kernels make, recorded (a fresh compile, ``prefetch_to_l2`` replaced by a call back
    into Python, numba's bounds checks on): with full blocks of 16 tokens, exactly KV head h's D values of each
    token 16 to T - 1, in K and in V, once each; fp32 and bf16 (its 16-bit patterns) for the paged kernel, fp32
    for the twin. Tables without a padding column and distances up to 1,000 never index a table past a
    request's last block, and every distance gives the same bits."""
    proc = _run(f"""
        import ctypes, os
        os.environ.update(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR={str(tmp_path)!r})
        import torch
        from unittest import mock
        from numba import njit
        from pagedkv_lib.attention.batch import random_paged_batch
        from pagedkv_lib.kernels import contiguous_decode as CD, fused_decode as FD, prefetch
        seen = []
        record = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(lambda a, n: seen.append((a, n)))
        prefetch.prefetch_to_l2 = njit(lambda address, num_bytes: record(address, num_bytes))
        torch.set_num_threads(1)
        ahead, lens, S, H, D = prefetch.PREFETCH_TOKENS, [64, 32, 48], 16, 2, 32

        def expected(caches, row_of):
            return sorted((c.data_ptr() + row_of(b, t) * H * D * c.element_size() + h * D * c.element_size(),
                           D * c.element_size())
                          for c in caches for b, T in enumerate(lens) for t in range(ahead, T) for h in range(H))
        for dtype in (torch.float32, torch.bfloat16):
            batch = random_paged_batch(lens, block_size=S, num_kv_heads=H, head_dim=D, dtype=dtype,
                                       extra_columns=0, seed=1)
            seen.clear()
            FD.paged_decode_numba(*batch.args())
            tables = batch.block_tables
            print(sorted(seen) == expected((batch.k_cache, batch.v_cache),
                                           lambda b, t: int(tables[b, t // S]) * S + t % S))
        keys, values = CD.packed_kv(batch.keys).float(), CD.packed_kv(batch.values).float()
        seen.clear()
        CD.contiguous_decode_numba(batch.q.float(), keys, values, batch.seq_lens)
        print(sorted(seen) == expected((keys, values), lambda b, t: sum(lens[:b]) + t))
        batch = random_paged_batch([37, 16, 5, 63], block_size=4, extra_columns=0, seed=3)
        keys, values = CD.packed_kv(batch.keys), CD.packed_kv(batch.values)
        outs = set()
        for distance in (0, 1, 4, 17, 1000):
            with mock.patch.object(prefetch, "PREFETCH_TOKENS", distance):
                paged = FD.paged_decode_numba(*batch.args())
                twin = CD.contiguous_decode_numba(batch.q, keys, values, batch.seq_lens)
            outs.add((paged.numpy().tobytes(), twin.numpy().tobytes()))
        print(len(outs), FD.kernel_unavailable(), CD.contiguous_kernel_unavailable())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True", "True", "True", "1 None None"], proc.stdout


def assert_the_compiled_check_agrees(fd, q, cache, tables, seq_lens, given_tables):
    """``tables_fit`` accepts (int64 ``tables``) exactly what ``check_decode_inputs`` accepts, and
    ``_checked_tables`` on ``given_tables`` returns what that check returns or raises its error."""
    from pagedkv_lib.attention.validation import check_decode_inputs
    from pagedkv_lib.kernels.table_bounds import tables_fit

    def checked(block_tables):
        try:
            return check_decode_inputs(q, cache, cache, block_tables, seq_lens)
        except ValueError as exc:
            return exc
    if tables.shape[0] == seq_lens.shape[0] == q.shape[0]:             # what tables_fit is given to judge
        fits = tables_fit(tables.numpy(), seq_lens.numpy(), cache.shape[0], cache.shape[1])
        assert fits == (not isinstance(checked(tables), Exception))
    expected = checked(given_tables)
    if isinstance(expected, Exception):
        with pytest.raises(ValueError, match=re.escape(str(expected))):
            fd._checked_tables(q, cache, cache, given_tables, seq_lens)
    else:
        assert all(torch.equal(a, b) for a, b in zip(fd._checked_tables(q, cache, cache, given_tables, seq_lens),
                                                      expected))


@settings(max_examples=200, deadline=None)
@given(lens=st.lists(st.integers(-1, 30), max_size=5), S=st.integers(0, 5), extra=st.integers(-2, 2),
       num_blocks=st.integers(0, 9), form=st.sampled_from(["int64", "int32", "list"]), data=st.data())
def test_the_compiled_bounds_check_accepts_what_check_decode_inputs_accepts(na, lens, S, extra, num_blocks, form, data):
    """The launch's one compiled pass over the tables (``tables_fit``) accepts exactly the batches that
    ``check_decode_inputs`` accepts; what it refuses, or cannot take (int32, lists), gets that check's own error."""
    width = max(0, max((math.ceil(t / S) for t in lens if t > 0 and S), default=0) + extra)
    ids = data.draw(st.lists(st.lists(st.integers(0, max(num_blocks - 1, 0)), min_size=width, max_size=width),
                             min_size=len(lens), max_size=len(lens)))
    if ids and width and data.draw(st.booleans()):                  # one entry out of bounds, used or padding
        row, col = data.draw(st.integers(0, len(lens) - 1)), data.draw(st.integers(0, width - 1))
        ids[row][col] = data.draw(st.sampled_from([-2, -1, num_blocks, num_blocks + 1]))
    tables = torch.tensor(ids, dtype=torch.int64).reshape(len(lens), width)
    given_tables = {"int64": tables, "int32": tables.int(), "list": ids}[form]
    assert_the_compiled_check_agrees(na, torch.zeros(len(lens), 2, 4), torch.zeros(num_blocks, S, 1, 4), tables,
                                     torch.tensor(lens, dtype=torch.int64), given_tables)


@pytest.mark.parametrize("ids, lens, num_blocks, S, batch", [
    ([[0, -1]], [5], 3, 4, 1), ([[0, 3]], [5], 3, 4, 1), ([[0, -1]], [4], 3, 4, 1), ([[0, 3]], [4], 3, 4, 1),
    ([[0, 1]], [0], 3, 4, 1), ([[0, 1]], [-1], 3, 4, 1), ([[0, 1]], [9], 3, 4, 1), ([[0, 1]], [8], 3, 4, 1),
    ([[0]], [1], 3, 0, 1), ([[0]], [1], 0, 4, 1), ([[]], [1], 3, 4, 1), ([[0], [1]], [1], 3, 4, 2),
    ([[0]], [1, 1], 3, 4, 1), ([[0]], [1], 3, 4, 2), ([], [], 3, 4, 0), ([[2**62]], [1], 3, 4, 1),
], ids=["-1 used", "num_blocks used", "-1 padding", "num_blocks padding", "T 0", "T -1", "capacity + 1",
        "capacity", "S 0", "no blocks", "no columns", "fewer lengths", "more lengths", "q batch", "empty", "huge id"])
def test_the_compiled_bounds_check_on_its_edges(na, ids, lens, num_blocks, S, batch):
    tables = torch.tensor(ids, dtype=torch.int64).reshape(len(ids), -1 if ids and ids[0] else 0)
    assert_the_compiled_check_agrees(na, torch.zeros(batch, 2, 4), torch.zeros(num_blocks, S, 1, 4), tables,
                                     torch.tensor(lens, dtype=torch.int64), tables)


def test_python_threads_launching_at_once_each_get_their_own_result(na):
    batch = random_paged_batch([300, 7, 129] * 4, seed=0)
    expected = na.paged_decode_numba(*batch.args())
    results = []

    def work():
        results.extend(torch.equal(na.paged_decode_numba(*batch.args()), expected) for _ in range(10))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 30


def test_int32_tables_lists_and_a_strided_cache_are_accepted(na):
    batch = random_paged_batch([7, 20], block_size=4, seed=5)
    expected = na.paged_decode_numba(*batch.args())
    tables32 = batch.block_tables.to(torch.int32)
    assert torch.equal(na.paged_decode_numba(batch.q, batch.k_cache, batch.v_cache, tables32, batch.seq_lens),
                       expected)
    assert torch.equal(na.paged_decode_numba(batch.q, batch.k_cache, batch.v_cache, batch.block_tables.tolist(),
                                             batch.seq_lens.tolist()), expected)
    wide = torch.cat([batch.k_cache, batch.k_cache], dim=3)[..., : batch.k_cache.shape[3]]   # strided view
    assert not wide.is_contiguous()
    assert torch.equal(na.paged_decode_numba(batch.q, wide, batch.v_cache, batch.block_tables, batch.seq_lens),
                       expected)


def test_nan_inside_a_request_stays_in_that_request(na):
    """Fast math keeps NaN semantics: a NaN key a request owns poisons its output, as in the spec."""
    batch = random_paged_batch([9, 12], block_size=4, seed=2)
    first_block = int(batch.block_tables[0, 1])
    batch.k_cache[first_block, 0, 0, 0] = float("nan")            # token 4 of request 0, KV head 0
    out = na.paged_decode_numba(*batch.args())
    ref = A.paged_decode_gather(*batch.args())
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.isnan(out[0, :2]).all() and torch.isfinite(out[1]).all()


def test_an_empty_batch_gives_an_empty_result(na):
    batch = random_paged_batch([3], seed=0)
    q = batch.q[:0]
    out = na.paged_decode_numba(q, batch.k_cache, batch.v_cache, batch.block_tables[:0], batch.seq_lens[:0])
    assert out.shape == q.shape


def _bad_calls(batch):
    q, k, v, tables, lens = batch.args()
    yield "lengths past the table", (q, k, v, tables, lens + 100), {}
    yield "zero length", (q, k, v, tables, lens * 0), {}
    yield "block id outside the cache", (q, k, v, torch.full_like(tables, k.shape[0]), lens), {}
    yield "float tables", (q, k, v, tables.float(), lens), {}
    yield "dtype mismatch", (q.double(), k, v, tables, lens), {}
    yield "q/cache dtype mismatch", (q.half(), k, v, tables, lens), {}
    yield "heads not a multiple", (q[:, :3], k, v, tables, lens), {}
    yield "batch mismatch", (q[:1], k, v, tables, lens), {}
    yield "negative scale", (q, k, v, tables, lens), {"scale": -1.0}
    yield "nan scale", (q, k, v, tables, lens), {"scale": float("nan")}
    yield "lengths past the table and a negative scale", (q, k, v, tables, lens + 100), {"scale": -1.0}
    yield "float tables and a nan scale", (q, k, v, tables.float(), lens), {"scale": float("nan")}
    yield "on another device, lengths past the table", (q.to("meta"), k.to("meta"), v.to("meta"), tables,
                                                         lens + 100), {}


def test_bad_arguments_raise_what_the_torch_version_raises(na):
    batch = random_paged_batch([5, 9], block_size=4, seed=0)
    for what, args, kwargs in _bad_calls(batch):
        with pytest.raises((TypeError, ValueError)) as torch_error:
            A.paged_decode_online(*args, **kwargs)
        with pytest.raises(torch_error.type) as numba_error:
            na.paged_decode_numba(*args, **kwargs)
        assert str(numba_error.value) == str(torch_error.value), what


def test_tensors_off_the_cpu_are_refused_with_what_to_do(na):
    batch = random_paged_batch([5], block_size=4, seed=0)
    q, k, v = (t.to("meta") for t in batch.args()[:3])
    with pytest.raises(ValueError, match=r"runs on the CPU.*\['meta'\].*\.cpu\(\)"):
        na.paged_decode_numba(q, k, v, batch.block_tables, batch.seq_lens)


def test_after_warm_up_no_call_compiles_anything(na):
    """warm_up readies every version a call needs: calls of each cache dtype add no compiled signature."""
    from pagedkv_lib.kernels.numba_kernel import decode_request
    na.warm_up((torch.float32, torch.float16, torch.bfloat16))
    compiled = list(decode_request.signatures)
    assert len(compiled) == 2                                     # fp32, and the 16-bit patterns
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        na.paged_decode_numba(*random_paged_batch([40, 3], block_size=16, dtype=dtype, seed=1).args())
    assert list(decode_request.signatures) == compiled


def test_tinylm_generates_the_same_tokens_with_the_fused_kernel(na):
    from pagedkv_lib.tinylm import TinyConfig, TinyLM, encode, generate_paged
    model = TinyLM(TinyConfig(num_layers=2, max_seq_len=128), seed=1)
    prompts = [encode("paged attention "), encode("paged kv"), encode("a different prompt")]
    kwargs = dict(num_samples=2, temperature=0.8, seed=3, block_size=4)
    torch_run = generate_paged(model, prompts, 12, **kwargs)
    fused_run = generate_paged(model, prompts, 12, decode=na.paged_decode_numba, **kwargs)
    for torch_gens, fused_gens in zip(torch_run.generations, fused_run.generations):
        for a, b in zip(torch_gens, fused_gens):
            assert a.tokens == b.tokens
            torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=1e-4)


def test_tinylm_refuses_a_decode_that_is_not_a_function():
    from pagedkv_lib.tinylm import TinyConfig, TinyLM, generate_paged
    model = TinyLM(TinyConfig(num_layers=1, max_seq_len=64))
    with pytest.raises(TypeError, match="decode must be a paged decode function.*'numba'"):
        generate_paged(model, [[1, 2, 3]], 2, decode="numba")




def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


def test_a_process_forked_while_another_thread_launches_can_launch(na):
    """Nothing is shared between launches, so a child forked mid-launch (after parallel torch ops too)
    launches on its own and gets the same bits."""
    proc = _run("""
        import multiprocessing as mp, threading, torch
        from pagedkv_lib.kernels.fused_decode import paged_decode_numba
        from pagedkv_lib.attention.batch import random_paged_batch
        batch = random_paged_batch([900, 400, 70] * 4, seed=0)
        expected = paged_decode_numba(*batch.args())
        torch.randn(500, 500) @ torch.randn(500, 500)          # torch's own threads ran too
        stop = threading.Event()
        def launch_forever():
            while not stop.is_set():
                paged_decode_numba(*batch.args())
        busy = threading.Thread(target=launch_forever)
        busy.start()
        def child(queue):
            queue.put(torch.equal(paged_decode_numba(*batch.args()), expected))
        ctx = mp.get_context("fork")
        exits = []
        for _ in range(3):
            queue = ctx.Queue()
            p = ctx.Process(target=child, args=(queue,), daemon=True)    # a hung child dies with us
            p.start()
            p.join(60)
            exits.append((p.exitcode, queue.get(timeout=5) if p.exitcode == 0 else None))
        stop.set()
        busy.join()
        print(exits)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([(0, True)] * 3)


def test_importing_and_running_changes_nothing_process_wide_and_needs_no_fork_hooks(na):
    """As on Windows (no fork, no ``os.register_at_fork``): the library imports without numba, and a launch
    starts no numba threading layer."""
    proc = _run("""
        import os, sys, torch                        # torch itself registers fork hooks on Linux
        del os.register_at_fork, os.fork
        import pagedkv_lib.tinylm, pagedkv_lib.kernels.timing
        from pagedkv_lib.kernels import fused_decode as FD
        from pagedkv_lib.attention.batch import random_paged_batch
        print("numba" in sys.modules)
        batch = random_paged_batch([50, 3], seed=0)
        out = FD.paged_decode_numba(*batch.args())
        from numba.np.ufunc import parallel
        print(FD.kernel_unavailable(), parallel._is_initialized, tuple(out.shape))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["False", "None False (2, 4, 16)"]
    assert proc.stderr == ""


FALLBACK = """
    import sys, warnings, torch
    {setup}
    from pagedkv_lib.attention import fast as F
    from pagedkv_lib.attention.batch import random_paged_batch
    from pagedkv_lib.kernels import fused_decode as FD, timing
    batch = random_paged_batch([8, 5, 17], seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [FD.paged_decode_numba(*batch.args()) for _ in range(3)]
        speed = timing.measure_decode_speed((8, 5), num_kv_heads=1, group=2, head_dim=4, repeats=1)
    print(all(torch.equal(out, F.paged_decode_online_fast(*batch.args())) for out in outs))
    print("fused shuffled" in speed.seconds, FD.kernel_unavailable() == str(caught[0].message).split("; using")[0])
    print(len(caught), len(str(caught[0].message).splitlines()))
    print(caught[0].message)
"""


@pytest.mark.parametrize("setup, says", [
    ('sys.modules["numba"] = None', "numba is not installed"),            # import numba raises ImportError
    ("import numba.core.dispatcher as d\n"
     "    def fail(self, sig): raise numba.core.errors.LoweringError('no llvm.prefetch here')\n"
     "    import numba; d.Dispatcher.compile = fail", "LoweringError: no llvm.prefetch here"),
    ("import numba.core.dispatcher as d\n"
     "    def fail(self, sig): raise OSError('no space left on device')\n"
     "    d.Dispatcher.compile = fail", "OSError: no space left on device"),
], ids=["no numba", "lowering error", "any other error"])
def test_any_failure_of_numba_falls_back_to_torch_and_says_so_once_in_one_line(setup, says):
    proc = _run(FALLBACK.format(setup=setup))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["True", "False True", "1 1"]
    assert says in lines[3] and "using pagedkv_lib.attention.fast.paged_decode_online_fast instead" in lines[3]
