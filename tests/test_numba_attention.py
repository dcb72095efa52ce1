"""The fused numba paged decode kernel equals attention over the logical K/V, wherever blocks live.

Every test here but the fallback ones needs numba (the ``fast`` extra, which ``make test``
installs); they skip with the reason without it. They run in one xdist group, so one worker
compiles (or loads from numba's disk cache) the kernel's two versions once; the subprocess tests
come last and load what that worker cached.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib.attention.batch import boundary_lengths, random_paged_batch

pytestmark = pytest.mark.xdist_group("numba")
HALF = (torch.float16, torch.bfloat16)


@pytest.fixture(scope="module")
def na():
    """The module under test, with numba present."""
    pytest.importorskip("numba", reason="numba is not installed: pip install 'pagedkv_lib[fast]'")
    from pagedkv_lib.kernels import fused_decode as numba_attention
    return numba_attention


def reference(batch, scale=None) -> torch.Tensor:
    """The spec: fp32 dense attention of each query over its request's logical K/V."""
    return torch.stack([A.dense_attention(batch.q[b : b + 1].float(), k.float(), v.float(), causal=False,
                                          scale=scale)[0]
                        for b, (k, v) in enumerate(zip(batch.keys, batch.values))])


def assert_matches_reference(out, batch, scale=None):
    atol, rtol = A.TOLERANCES[out.dtype]
    torch.testing.assert_close(out.float(), reference(batch, scale), atol=atol, rtol=rtol)


@pytest.fixture(params=["torch-openmp", "workqueue"])
def pool(request, na, monkeypatch):
    """Run the test's launches on torch's OpenMP threads, then again on numba's workqueue."""
    from pagedkv_lib.kernels import torch_openmp
    if request.param == "torch-openmp" and torch_openmp.parallel_entry() is None:
        pytest.skip("torch's parallel backend here is not OpenMP")
    monkeypatch.setattr(na, "PREFER_TORCH_THREADS", request.param == "torch-openmp")
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("S", [4, 16])
def test_boundary_lengths_match_dense_attention(na, pool, S, group, dtype):
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


def test_moving_blocks_and_renaming_them_in_the_table_changes_nothing(na):
    batch = random_paged_batch([33, 64, 5], shuffle=False, seed=1)
    perm = torch.randperm(batch.k_cache.shape[0], generator=torch.Generator().manual_seed(0))
    k_moved, v_moved = torch.empty_like(batch.k_cache), torch.empty_like(batch.v_cache)
    k_moved[perm], v_moved[perm] = batch.k_cache, batch.v_cache          # block i now lives at perm[i]
    tables = batch.block_tables.clone()
    used = tables >= 0
    tables[used] = perm[tables[used]]
    moved = na.paged_decode_numba(batch.q, k_moved, v_moved, tables, batch.seq_lens)
    torch.testing.assert_close(moved, na.paged_decode_numba(*batch.args()), atol=0, rtol=0)


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=6), S=st.sampled_from([1, 3, 8, 16]),
       num_kv_heads=st.integers(1, 3), group=st.sampled_from([1, 2, 4, 8]), head_dim=st.sampled_from([1, 8, 24]),
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


@settings(max_examples=30, deadline=None)
@given(scores=st.lists(st.floats(-150.0, 0.0, width=32), min_size=1, max_size=70),
       shift=st.floats(-40.0, 40.0, width=32))
def test_the_vectorised_exp_agrees_with_float64_exp(na, scores, shift):
    """The kernel's exp of ``score - shift`` (all <= 0): within 3e-7 relative, or at most 1.6e-38 where
    float64 gives less (the clamp at -87); the sum it returns is the sum of what it wrote."""
    from pagedkv_lib.kernels.numba_kernel import _exp_shifted
    x = np.array(scores, dtype=np.float32) + np.float32(shift)
    y = (x - np.float32(shift)).astype(np.float64)           # the fp32 difference the kernel takes
    out = x.copy()
    total = _exp_shifted(out, len(out), np.float32(shift), np.empty(len(out), dtype=np.int32))
    expected = np.exp(y)
    normal = expected >= 1.7e-38
    np.testing.assert_allclose(out[normal], expected[normal], rtol=3e-7, atol=0)
    assert ((out[~normal] >= 0) & (out[~normal] <= 1.7e-38)).all()
    assert total == pytest.approx(float(out.astype(np.float64).sum()), rel=1e-6)


def test_the_vectorised_exp_keeps_nan(na):
    from pagedkv_lib.kernels.numba_kernel import _exp_shifted
    out = np.array([0.0, np.nan, -1.0, -np.inf], dtype=np.float32)
    total = _exp_shifted(out, 4, np.float32(0.0), np.empty(4, dtype=np.int32))
    assert np.isnan(out[1]) and np.isnan(total)
    np.testing.assert_allclose(out[[0, 2]], [1.0, np.exp(-1.0)], rtol=3e-7)
    assert 0 <= out[3] <= 1.7e-38


def test_threads_taking_the_next_program_at_once_each_get_a_different_one(na):
    """``_take_next`` is atomic: numbers taken by all threads at once are 0..n-1, each exactly once."""
    from pagedkv_lib.kernels.numba_kernel import _take_next

    @na.numba.njit(parallel=True)
    def take_all(counter, taken, per_thread):
        for w in na.numba.prange(taken.shape[0]):
            for i in range(per_thread):
                taken[w, i] = _take_next(counter)

    threads = na.numba.get_num_threads()
    counter, taken = np.zeros(1, dtype=np.int64), np.empty((threads, 1_000_000), dtype=np.int64)
    take_all(counter, taken, taken.shape[1])
    assert np.array_equal(np.sort(taken.ravel()), np.arange(taken.size)) and counter[0] == taken.size


@settings(max_examples=25, deadline=None)
@given(lens=st.lists(st.integers(1, 200), min_size=1, max_size=9), seed=st.integers(0, 2**16))
def test_the_result_is_the_same_on_any_number_of_threads_of_either_pool(na, lens, seed):
    """Every request is run once, by one thread, whatever thread takes it: the same bits on 1 and on
    all threads, of torch's pool and of numba's, for batches smaller and larger than the thread count."""
    batch = random_paged_batch(lens, block_size=8, seed=seed)
    numba_threads, torch_threads = na.numba.get_num_threads(), torch.get_num_threads()
    outs = []
    try:
        for prefer_torch in (True, False):
            na.PREFER_TORCH_THREADS = prefer_torch
            for n in sorted({1, max(numba_threads, torch_threads)}):
                na.numba.set_num_threads(min(n, numba_threads))
                torch.set_num_threads(n)
                outs.append(na.paged_decode_numba(*batch.args()))
    finally:
        na.PREFER_TORCH_THREADS = True
        na.numba.set_num_threads(numba_threads)
        torch.set_num_threads(torch_threads)
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert_matches_reference(outs[0], batch)


def test_int32_tables_lists_and_a_strided_cache_are_accepted(na):
    batch = random_paged_batch([7, 20], block_size=4, seed=5)
    expected = na.paged_decode_numba(*batch.args())
    tables32 = batch.block_tables.to(torch.int32)
    torch.testing.assert_close(na.paged_decode_numba(batch.q, batch.k_cache, batch.v_cache, tables32,
                                                     batch.seq_lens), expected)
    torch.testing.assert_close(na.paged_decode_numba(batch.q, batch.k_cache, batch.v_cache,
                                                     batch.block_tables.tolist(), batch.seq_lens.tolist()),
                               expected)
    wide = torch.cat([batch.k_cache, batch.k_cache], dim=3)[..., : batch.k_cache.shape[3]]   # strided view
    assert not wide.is_contiguous()
    torch.testing.assert_close(na.paged_decode_numba(batch.q, wide, batch.v_cache, batch.block_tables,
                                                     batch.seq_lens), expected)


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


def test_warm_up_compiles_and_the_kernel_runs_on_torchs_threads_where_it_can(na, monkeypatch):
    """torch's OpenMP threads where torch's parallel backend is OpenMP; numba's workqueue when told not to."""
    from pagedkv_lib.kernels import torch_openmp
    assert na.warm_up((torch.float32, torch.float16)) >= 0.0
    on_openmp = "parallel backend: OpenMP" in torch.__config__.parallel_info()
    assert (torch_openmp.parallel_entry() is not None) == on_openmp
    assert na.threading_layer() == ("torch-openmp" if on_openmp else "workqueue")
    monkeypatch.setattr(na, "PREFER_TORCH_THREADS", False)
    na.warm_up()
    assert na.threading_layer() == "workqueue"
    assert na.decode_function() is na.paged_decode_numba
    assert na.decode_function(fused=False) is A.paged_decode_online


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


def test_compare_decode_times_gives_a_median_per_method(na):
    from pagedkv_lib.kernels.timing import compare_decode_times
    times = compare_decode_times((40, 17, 64), num_kv_heads=2, group=2, head_dim=16, repeats=3)
    assert set(times) == {"contiguous (SDPA per request)", "contiguous (batched, padded)", "torch paged",
                          "fused paged"}
    assert all(t > 0 for t in times.values())


def _run(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("prefer_torch_threads", [True, False])
def test_two_python_threads_launching_at_once_are_safe(na, prefer_torch_threads):
    """workqueue aborts the process on concurrent launches; the launch lock serialises them (both pools)."""
    proc = _run(f"""
        import threading, torch
        from pagedkv_lib.kernels import fused_decode as numba_attention
        from pagedkv_lib.kernels.fused_decode import paged_decode_numba, threading_layer
        from pagedkv_lib.attention.batch import random_paged_batch
        numba_attention.PREFER_TORCH_THREADS = {prefer_torch_threads}
        batch = random_paged_batch([300, 7, 129] * 4, seed=0)
        expected = paged_decode_numba(*batch.args())
        results = []
        def work():
            results.extend(torch.equal(paged_decode_numba(*batch.args()), expected) for _ in range(20))
        threads = [threading.Thread(target=work) for _ in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(len(results), all(results), threading_layer() == "workqueue")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["60", "True", str(not prefer_torch_threads)]


def test_a_process_forked_after_a_launch_can_launch_again(na):
    """A fork after a launch and a parallel torch op works: the child, where torch's OpenMP pool
    would never answer, runs on numba's workqueue (which, unlike numba's omp layer, survives forks)."""
    proc = _run("""
        import multiprocessing as mp, torch
        from pagedkv_lib.kernels.fused_decode import paged_decode_numba, threading_layer
        from pagedkv_lib.kernels.numba_kernel import torch_thread_entry
        from pagedkv_lib.attention.batch import random_paged_batch
        batch = random_paged_batch([50, 3], seed=0)
        expected = paged_decode_numba(*batch.args())
        torch.randn(500, 500) @ torch.randn(500, 500)          # torch's own threads ran too
        def child(queue):
            out = paged_decode_numba(*batch.args())
            queue.put((threading_layer(), torch.equal(out, expected)))
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        p = ctx.Process(target=child, args=(queue,))
        p.start()
        p.join(120)
        print(threading_layer(), p.exitcode, *queue.get(timeout=5))
        print("loaded from the disk cache:", torch_thread_entry(False).cache_hits > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["torch-openmp 0 workqueue True", "loaded from the disk cache: True"]


def test_a_fork_while_another_thread_launches_gives_a_child_that_can_launch(na):
    """The fork waits for the running launch, so the child never inherits a held launch lock."""
    proc = _run("""
        import multiprocessing as mp, threading, torch
        from pagedkv_lib.kernels.fused_decode import paged_decode_numba
        from pagedkv_lib.attention.batch import random_paged_batch
        batch = random_paged_batch([900, 400, 70] * 4, seed=0)
        expected = paged_decode_numba(*batch.args())
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
            p.join(30)
            exits.append((p.exitcode, queue.get(timeout=5) if p.exitcode == 0 else None))
        stop.set()
        busy.join()
        print(exits)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([(0, True)] * 3)


def test_without_numba_the_library_imports_and_falls_back_in_one_line():
    proc = _run("""
        import sys, warnings
        sys.modules["numba"] = None                      # import numba now raises ImportError
        import pagedkv_lib.tinylm, pagedkv_lib.kernels.timing
        from pagedkv_lib.kernels import fused_decode as NA
        from pagedkv_lib.attention import spec as A
        print(NA.NUMBA_MISSING is not None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = NA.decode_function()
            times = pagedkv_lib.kernels.timing.compare_decode_times((8, 5), num_kv_heads=1, group=2,
                                                                   head_dim=4, repeats=1)
        print(fn is A.paged_decode_online, sorted(times) == sorted(["contiguous (SDPA per request)",
              "contiguous (batched, padded)", "torch paged"]))
        print(len(caught), all(len(str(w.message).splitlines()) == 1 for w in caught))
        print(caught[0].message)
        try:
            NA.paged_decode_numba(None, None, None, None, None)
        except ImportError as exc:
            print("ImportError:", exc)
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["True", "True True", "2 True"]
    assert "numba is not installed" in lines[3] and "pip install 'pagedkv_lib[fast]'" in lines[3]
    assert "paged_decode_online" in lines[3]
    assert lines[4].startswith("ImportError: numba is not installed") and "[fast]" in lines[4]
