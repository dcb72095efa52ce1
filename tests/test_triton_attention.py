"""The Triton paged decode kernels, single-pass and partitioned, equal attention over the logical K/V, wherever blocks live.

Without a GPU the kernel runs under Triton's CPU interpreter. ``triton.jit`` picks the
interpreter when a function is *defined* (Triton's helpers when triton is first imported), so
this module sets ``TRITON_INTERPRET=1`` at collection, before it imports triton; the ``tri``
fixture fails with a clear message if something in this process imported triton earlier. That the kernels
compile for real GPUs, without one, is ``test_triton_compile.py``'s.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention.spec import TOLERANCES, paged_decode_gather, paged_decode_reference
from pagedkv_lib.attention.batch import random_paged_batch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

BF16_INTERPRETER_BUG = ("Triton's CPU interpreter computes bf16 tl.dot wrongly "
                        "(upstream triton-lang/triton issue #11584); bf16 is checked on a GPU only")


@pytest.fixture(scope="module")
def tri():
    """The module under test, with its kernel defined for the interpreter when there is no GPU."""
    pytest.importorskip("triton", reason="the Triton extra is not installed: python -m pip install triton")
    module = importlib.import_module("pagedkv_lib.attention.triton_decode")
    if not (ON_GPU or module.INTERPRETED):
        pytest.fail("no GPU, and triton was imported in this test process before TRITON_INTERPRET=1 "
                    "was set, so the kernel cannot run: set the variable before any test module "
                    "imports triton (tests/conftest.py), or run this file on its own")
    return module


def _device(tri) -> str:
    return "cpu" if tri.INTERPRETED else "cuda"


def _in_partitions_of_two_blocks(q, k_cache, v_cache, block_tables, seq_lens, **kwargs):
    """The partitioned kernel with partitions of two blocks, so small test batches have several."""
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    return paged_decode_triton_split(q, k_cache, v_cache, block_tables, seq_lens,
                                     partition_tokens=2 * k_cache.shape[1], **kwargs)


@pytest.fixture(scope="module", params=["single_pass", "partitioned"])
def decode(request, tri):
    """Each Triton decode of the library: one program per (sequence, KV head), or per partition too."""
    return tri.paged_decode_triton if request.param == "single_pass" else _in_partitions_of_two_blocks


def reference(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
    """The spec: fp32 dense attention of each query over its sequence's logical K/V, on the CPU."""
    return paged_decode_reference(q.cpu().float(), k_cache.cpu().float(), v_cache.cpu().float(),
                                  block_tables.cpu(), seq_lens.cpu(), scale=scale)


def assert_matches_reference(out, args, scale=None):
    """Kernel output within the library's tolerance for its dtype of the fp32 dense result."""
    atol, rtol = TOLERANCES[out.dtype]
    torch.testing.assert_close(out.cpu().float(), reference(*args, scale=scale), atol=atol, rtol=rtol)


def make_batch(*, lens, block_size, num_kv_heads, group, head_dim, dtype, device, spare_blocks=3,
               seed=0, pad_value=-1):
    """The shared random batch with int32 tables (as vLLM keeps them) on the kernel's device.

    Physical ids are shuffled, spare blocks belong to nobody, every unowned slot holds NaN, and
    table entries past a sequence's last block are ``pad_value``.
    """
    return random_paged_batch(lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group,
                              head_dim=head_dim, dtype=dtype, device=device, spare_blocks=spare_blocks,
                              table_dtype=torch.int32, pad=pad_value, seed=seed)


def make_case(**kwargs):
    """:func:`make_batch` as the kernel's arguments ``(q, k_cache, v_cache, block_tables, seq_lens)``."""
    return make_batch(**kwargs).args()


# Block size 4: T mod S = 1, 0, 3 (S-1), a single-token sequence, and a longer one.
BOUNDARY_LENS = [1, 4, 5, 7, 8, 13]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("group", [1, 4, 8])
def test_kernel_equals_attention_over_logical_kv(tri, decode, dtype, group):
    if dtype == torch.bfloat16 and tri.INTERPRETED:
        pytest.skip(BF16_INTERPRETER_BUG)
    args = make_case(lens=BOUNDARY_LENS, block_size=4, num_kv_heads=2, group=group, head_dim=16,
                     dtype=dtype, device=_device(tri))
    out = decode(*args)
    assert out.shape == args[0].shape and out.dtype == dtype
    assert_matches_reference(out, args)


@settings(max_examples=25, deadline=None)
@given(data=st.data(),
       block_size=st.sampled_from([1, 3, 4, 16]),
       head_dim=st.sampled_from([8, 16, 24]),
       num_kv_heads=st.integers(1, 2),
       group=st.sampled_from([1, 2, 4, 8]),
       dtype=st.sampled_from([torch.float32, torch.float16]),
       scale=st.none() | st.floats(0.01, 2.0),
       seed=st.integers(0, 2**16))
def test_kernel_equals_reference_on_random_tables(tri, decode, data, block_size, head_dim, num_kv_heads,
                                                  group, dtype, scale, seed):
    lens = data.draw(st.lists(st.integers(1, 3 * block_size + 1), min_size=1, max_size=4), label="lens")
    args = make_case(lens=lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group,
                     head_dim=head_dim, dtype=dtype, device=_device(tri), seed=seed)
    assert_matches_reference(decode(*args, scale=scale), args, scale=scale)


def test_moving_blocks_and_rewriting_the_table_changes_nothing(tri, decode):
    """Paging changes storage, never the result: relocate every block, update the table, compare bits."""
    q, k, v, table, lens = make_case(lens=BOUNDARY_LENS, block_size=4, num_kv_heads=2, group=4,
                                     head_dim=16, dtype=torch.float32, device=_device(tri))
    perm = torch.randperm(k.shape[0], generator=torch.Generator().manual_seed(1)).to(k.device)
    new_id = torch.empty_like(perm)
    new_id[perm] = torch.arange(len(perm), device=perm.device)  # block perm[i] moves to slot i
    moved_table = torch.where(table >= 0, new_id[table.long().clamp(min=0)].to(table.dtype), table)
    before = decode(q, k, v, table, lens)
    after = decode(q, k[perm], v[perm], moved_table, lens)
    assert torch.equal(before, after)


def test_strided_views_give_the_same_result_as_contiguous_copies(tri, decode):
    """The kernel follows strides: a K/V cache interleaved in one tensor, a transposed q, an int64 table."""
    q, k, v, table, lens = make_case(lens=BOUNDARY_LENS, block_size=4, num_kv_heads=2, group=4,
                                     head_dim=16, dtype=torch.float32, device=_device(tri))
    kv = torch.stack([k, v], dim=3)                # [num_blocks, S, H_kv, 2, D]
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    wide = torch.zeros(table.shape[0], 2 * table.shape[1], dtype=torch.int64, device=table.device)
    wide[:, ::2] = table
    wide_table = wide[:, ::2]                      # int64, every other column: same entries, strided
    lens_view = torch.stack([lens, lens], dim=1)[:, 0]
    assert not (kv[:, :, :, 0].is_contiguous() or q_t.is_contiguous() or lens_view.is_contiguous()
            or wide_table.is_contiguous())
    strided = decode(q_t, kv[:, :, :, 0], kv[:, :, :, 1], wide_table, lens_view)
    assert torch.equal(strided, decode(q, k, v, table, lens))


def test_empty_batch_returns_empty_output(tri, decode):
    q, k, v, table, lens = make_case(lens=[3], block_size=4, num_kv_heads=1, group=1, head_dim=8,
                                     dtype=torch.float32, device=_device(tri))
    out = decode(q[:0], k, v, table[:0], lens[:0])
    assert out.shape == (0, 1, 8)


def _bad(args, **changes):
    new = dict(zip(["q", "k_cache", "v_cache", "block_tables", "seq_lens"], args))
    new.update(changes)
    return new


@pytest.mark.parametrize("change, error, words", [
    (lambda a: dict(q=a["q"][0]), ValueError, ["q", "[B, H_q, D]", "(4, 16)"]),
    (lambda a: dict(q=a["q"][..., :8]), ValueError, ["(3, 4, 8)", "(8, 4, 1, 16)"]),
    (lambda a: dict(v_cache=a["v_cache"][:-1]), ValueError, ["(8, 4, 1, 16)", "(7, 4, 1, 16)"]),
    (lambda a: dict(k_cache=a["k_cache"].expand(-1, -1, 3, -1), v_cache=a["v_cache"].expand(-1, -1, 3, -1)),
     ValueError, ["(3, 4, 16)", "(8, 4, 3, 16)", "multiple"]),
    (lambda a: dict(block_tables=a["block_tables"][:2]), ValueError, ["(3, 4, 16)", "(2, 4)"]),
    (lambda a: dict(seq_lens=a["seq_lens"][:2]), ValueError, ["(3, 4)", "(2,)"]),
    (lambda a: dict(block_tables=a["block_tables"].float()), TypeError, ["block_tables", "float32"]),
    (lambda a: dict(block_tables=a["block_tables"].tolist()), TypeError, ["block_tables", "list"]),
    (lambda a: dict(q=a["q"].half()), TypeError, ["float16", "float32"]),
    (lambda a: dict(q=a["q"].double(), k_cache=a["k_cache"].double(), v_cache=a["v_cache"].double()),
     TypeError, ["float64"]),
    (lambda a: dict(seq_lens=torch.tensor([1, 0, 9])), ValueError, ["seq_lens", "[1, 0, 9]"]),
    (lambda a: dict(seq_lens=torch.tensor([1, 17, 9])), ValueError, ["[1, 17, 9]", "(3, 4)", "16"]),
    (lambda a: dict(block_tables=torch.tensor([[0, -1, -1, -1], [1, 2, 8, -1], [3, 4, 5, -1]], dtype=torch.int32)),
     ValueError, ["[8]", "(3, 4)", "(8, 4, 1, 16)"]),
    (lambda a: dict(block_tables=torch.tensor([[-1, -1, -1, -1], [1, 2, 6, -1], [3, 4, 5, -1]], dtype=torch.int32)),
     ValueError, ["[-1]", "(8, 4, 1, 16)"]),
    (lambda a: dict(k_cache=a["k_cache"].to("meta"), v_cache=a["v_cache"].to("meta")),
     ValueError, ["one device", "meta", "cpu"]),
    (lambda a: dict(q=a["q"].tolist()), TypeError, ["q", "list"]),
], ids=["q-2d", "head-dim", "v-shape", "heads-not-divisible", "table-rows", "lens-rows",
        "table-dtype", "table-not-a-tensor", "mixed-dtype", "float64", "zero-length",
        "length-past-capacity", "block-id-too-big", "block-id-negative", "two-devices", "q-not-a-tensor"])
def test_bad_input_raises_an_error_naming_the_shapes(tri, decode, change, error, words):
    """Same checks and messages as the torch reference, plus one device for all tensors."""
    # B=3, H_q=4, D=16; 8 blocks of 4 slots, 1 KV head; lengths 1, 9, 9; tables of 4 entries (16 tokens).
    args = _bad(make_case(lens=[1, 9, 9], block_size=4, num_kv_heads=1, group=4, head_dim=16,
                          dtype=torch.float32, device="cpu", spare_blocks=1))
    assert args["k_cache"].shape == (8, 4, 1, 16) and args["block_tables"].shape == (3, 4)
    args.update(change(args))
    with pytest.raises(error) as info:
        decode(**args)
    missing = [w for w in words if w not in str(info.value)]
    assert not missing, f"message {str(info.value)!r} lacks {missing}"


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), "0.1"])
def test_bad_scale_is_rejected(tri, decode, scale):
    args = make_case(lens=[2], block_size=4, num_kv_heads=1, group=1, head_dim=8,
                     dtype=torch.float32, device=_device(tri))
    with pytest.raises((TypeError, ValueError), match="scale") as triton_error:
        decode(*args, scale=scale)
    # One shared check: the torch reference refuses the same scale with the same error and message.
    with pytest.raises(type(triton_error.value)) as torch_error:
        paged_decode_gather(*[t.cpu() for t in args], scale=scale)
    assert str(torch_error.value) == str(triton_error.value)


def test_only_the_slots_a_sequence_owns_are_read(tri, decode):
    """Table entries past ceil(T / S) may hold anything, and cache slots that no sequence owns
    (spare blocks, the tail of a last block) hold NaN: the result stays exact and finite."""
    batch = make_batch(lens=BOUNDARY_LENS, block_size=4, num_kv_heads=1, group=2, head_dim=8,
                       dtype=torch.float32, device=_device(tri), pad_value=10**6)
    owned = batch.owned_slots().to(batch.k_cache.device)
    assert not owned.all() and torch.isnan(batch.k_cache[~owned]).all() and torch.isnan(batch.v_cache[~owned]).all()
    out = decode(*batch.args())
    assert torch.isfinite(out).all()
    assert_matches_reference(out, batch.args())


def test_each_sequence_reads_exactly_the_slots_it_owns(tri, decode):
    """By experiment (PagedBatch.slots_read): change one slot at a time, see whose output moves."""
    batch = make_batch(lens=[1, 5, 4], block_size=4, num_kv_heads=1, group=2, head_dim=8,
                       dtype=torch.float32, device=_device(tri), spare_blocks=1)
    read = batch.slots_read(decode)
    expected = batch.slot_owner()[None] == torch.arange(3)[:, None, None]
    assert torch.equal(read, expected), batch.draw(read)


@pytest.mark.parametrize("partition_blocks", [1, 3, 64])
def test_any_partition_size_gives_the_single_pass_result(tri, partition_blocks):
    """Partitions of one block, of three (not dividing the lengths), or wider than every sequence
    (one partition each); a table wider than any sequence needs, so some partitions hold no block."""
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    batch = random_paged_batch(BOUNDARY_LENS + [29], block_size=4, num_kv_heads=2, group=4, head_dim=16,
                               dtype=torch.float32, device=_device(tri), extra_columns=5, table_dtype=torch.int32)
    args = batch.args()
    out = paged_decode_triton_split(*args, partition_tokens=4 * partition_blocks)
    assert_matches_reference(out, args)
    torch.testing.assert_close(out, tri.paged_decode_triton(*args), atol=1e-6, rtol=1e-5)


@settings(max_examples=15, deadline=None)
@given(data=st.data(), blocks_per_step=st.sampled_from([2, 4]), block_size=st.sampled_from([1, 3, 4]),
       partition_blocks=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_several_blocks_per_step_give_the_one_block_result(tri, data, blocks_per_step, block_size, partition_blocks,
                                                           seed):
    """A tile of several blocks per step (issue 39): any partition, a partition that is not a whole number of
    steps, a block size that is not a power of two, table entries past a sequence never read."""
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    lens = data.draw(st.lists(st.integers(1, 7 * block_size + 1), min_size=1, max_size=4), label="lens")
    args = make_case(lens=lens, block_size=block_size, num_kv_heads=2, group=4, head_dim=16,
                     dtype=torch.float32, device=_device(tri), seed=seed, pad_value=10**6)
    size = partition_blocks * block_size
    one = paged_decode_triton_split(*args, partition_tokens=size)
    several = paged_decode_triton_split(*args, partition_tokens=size, blocks_per_step=blocks_per_step)
    assert_matches_reference(several, args)
    torch.testing.assert_close(several, one, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("value, error, allowed", [(0, ValueError, ">= 1"), (3, ValueError, "power of two"),
                                                   (2.0, TypeError, "integer")])
def test_a_bad_blocks_per_step_is_refused_by_name(tri, value, error, allowed):
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    args = make_case(lens=[5], block_size=4, num_kv_heads=1, group=1, head_dim=8, dtype=torch.float32,
                     device=_device(tri))
    with pytest.raises(error, match="blocks_per_step") as info:
        paged_decode_triton_split(*args, blocks_per_step=value)
    assert allowed in str(info.value) and repr(value) in str(info.value), str(info.value)


@pytest.mark.parametrize("size, error, allowed", [(0, ValueError, ">= 4"), (6, ValueError, "multiple of the block size 4"),
                                                  (8.0, TypeError, "integer"), (True, TypeError, "integer")])
def test_a_bad_partition_size_is_refused_by_name(tri, size, error, allowed):
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    args = make_case(lens=[5], block_size=4, num_kv_heads=1, group=1, head_dim=8, dtype=torch.float32,
                     device=_device(tri))
    with pytest.raises(error, match="partition_tokens") as info:
        paged_decode_triton_split(*args, partition_tokens=size)
    assert allowed in str(info.value) and repr(size) in str(info.value), str(info.value)


def test_the_one_launch_merge_equals_merge_partitions(tri):
    """The Triton merge the partitioned kernel uses gives merge_partitions' result, empty partitions included."""
    from pagedkv_lib.attention import triton_split_decode as split
    args = make_case(lens=[1, 5, 29, 12], block_size=4, num_kv_heads=2, group=4, head_dim=24, dtype=torch.float32,
                     device=_device(tri), seed=3)
    acc, m, l = split._partials(*args, 0.3, 8)
    assert acc.shape[2] >= 4 and torch.isinf(m).any()  # a table wide enough that some partitions hold no block
    torch.testing.assert_close(split._launch_unchecked(*args, 0.3, 8), split.merge_partitions(acc, m, l),
                               atol=1e-6, rtol=1e-5)


def test_merging_partitions_is_the_softmax_over_their_union():
    """merge_partitions on hand-made states: two partitions, one empty (m = -inf), in log2 units."""
    pytest.importorskip("triton")
    from pagedkv_lib.attention.triton_split_decode import merge_partitions
    scores = torch.tensor([0.5, 2.0, -1.0, 3.0])           # log2 units
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 4.0]])
    parts = [slice(0, 3), slice(3, 4), slice(0, 0)]
    m = torch.tensor([scores[p].max().item() if p.stop > p.start else float("-inf") for p in parts])
    l = torch.stack([torch.exp2(scores[p] - m[i]).sum() for i, p in enumerate(parts)])
    acc = torch.stack([(torch.exp2(scores[p] - m[i])[:, None] * v[p]).sum(0) for i, p in enumerate(parts)])
    expected = torch.softmax(scores * math.log(2), dim=0) @ v
    torch.testing.assert_close(merge_partitions(acc, m, l), expected)


def _run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_compiled_kernel_on_cpu_tensors_says_how_to_use_the_interpreter():
    """Without TRITON_INTERPRET the kernel is compiled; on CPU tensors that must fail clearly."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = _run_python("""
        import torch
        from pagedkv_lib.attention.triton_decode import INTERPRETED, _launch_unchecked, paged_decode_triton
        from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
        assert not INTERPRETED
        cache = torch.zeros(2, 4, 1, 8)
        args = (torch.zeros(1, 1, 8), cache, cache, torch.zeros(1, 1, dtype=torch.int32), torch.tensor([3]))
        for call in (lambda: paged_decode_triton(*args), lambda: _launch_unchecked(*args, 1.0),
                     lambda: paged_decode_triton_split(*args)):
            try:
                call()
            except RuntimeError as exc:
                print("MESSAGE:", exc)
    """, env)
    assert result.returncode == 0, result.stderr
    messages = [line for line in result.stdout.splitlines() if line.startswith("MESSAGE:")]
    assert len(messages) == 3 and all("TRITON_INTERPRET=1" in m for m in messages), result.stdout


@pytest.mark.parametrize("module", ["triton_decode", "triton_split_decode"])
def test_import_without_triton_says_how_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, "triton", None)  # what `import triton` sees when it is absent
    for name in TRITON_EXTRA:
        monkeypatch.delitem(sys.modules, f"pagedkv_lib.attention.{name}", raising=False)
    with pytest.raises(ImportError, match=r"python -m pip install triton"):
        importlib.import_module(f"pagedkv_lib.attention.{module}")


def _imported_modules(source: str) -> set[str]:
    """Absolute or relative module names a Python source imports, at any depth (lazy imports too)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            names.update(f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names)
    return names


TRITON_EXTRA = ("triton_decode", "triton_split_decode")
"""The modules of attention/ that need the Triton extra; nothing else may import them or triton."""

# Modules that may import triton inside one function only, once that function has found it installed.
LAZY_TRITON = {"course/learner/pset_checks/ps3_code.py":
               "ps3's bonus checks that a learner's kernel is a Triton kernel (JITFunction)",
               "kernels/gpu_timing.py": "lesson 03 times the Triton kernels when it has a GPU"}


def _module_level(source: str) -> str:
    """The source without its function and class bodies: what runs when the module is imported."""
    tree = ast.parse(source)
    tree.body = [node for node in tree.body
                 if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return ast.unparse(tree)


def test_the_rest_of_the_library_never_imports_triton():
    """Only TRITON_EXTRA need the Triton extra: no other module imports triton or those modules
    (the few named in LAZY_TRITON only inside a function, never when they are imported)."""
    package = pathlib.Path(importlib.util.find_spec("pagedkv_lib").origin).parent
    offenders = {}
    for path in sorted(package.rglob("*.py")):
        if path.stem in TRITON_EXTRA:
            continue
        source = path.read_text()
        if str(path.relative_to(package)) in LAZY_TRITON:
            source = _module_level(source)
        bad = [name for name in _imported_modules(source)
               if name.split(".")[0] == "triton" or any(m in name for m in TRITON_EXTRA)]
        if bad:
            offenders[str(path.relative_to(package))] = bad
    assert not offenders, f"modules that would need Triton: {offenders}"


def test_the_import_scan_sees_triton_imports():
    """The scan above can fail: it finds every spelling of an import of triton or triton_decode."""
    source = textwrap.dedent("""
        import triton.language as tl
        from triton import jit
        from . import triton_decode
        def lazy():
            from .triton_decode import paged_decode_triton
    """)
    found = _imported_modules(source)
    assert {"triton.language", "triton", ".triton_decode", ".triton_decode.paged_decode_triton"} <= found


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_the_lessons_gpu_measurement_times_every_row_and_judges_its_own_table(tri, dtype):
    """Lesson 03's GPU path, run here with the Triton rows in the interpreter (fp16 as on a T4, and fp32):
    every row agrees with fp32 attention before timing, the copy bounds no copy, and the gate's pair is the
    faster Triton row over the faster SDPA row of the table the learner sees."""
    from pagedkv_lib.kernels.gpu_timing import GPU_ROWS, gpu_pair, measure_gpu_decode_speed
    from pagedkv_lib.lesson import speed_table as ST
    speed = measure_gpu_decode_speed([48, 16, 32], num_kv_heads=2, group=2, head_dim=16, repeats=3,
                                     device=_device(tri), dtype=dtype, calls=1)
    assert list(speed.seconds) == list(GPU_ROWS) and speed.kernel_missing is None
    assert all(len(speed.rounds[key]) == 3 for key in GPU_ROWS)
    assert speed.paging_pair() == gpu_pair(speed.seconds) and speed.share_of_bound("copy") <= 1 + 1e-12
    assert speed.read_bytes == 2 * 96 * 2 * 16 * dtype.itemsize and speed.moved_bytes["copy"] == 2 * speed.read_bytes
    table, _ = ST.paging_reveal(speed)
    assert all(f"| {name} |" in table for name in GPU_ROWS.values())
