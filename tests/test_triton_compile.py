"""Every Triton kernel of the library compiles for the GPUs a learner or a server may have, without a GPU.

Triton's compiler takes an explicit target (``GPUTarget("cuda", arch, 32)``) and runs to machine code
(cubin, through the ``ptxas`` that ships with Triton) on a machine with no GPU. The interpreter the
other Triton tests use here cannot catch what only the compiler rejects: ``tl.dot`` tile sizes, a
dtype an architecture lacks, too many registers or too much shared memory.

Targets: sm_75 (Turing: Colab's free T4), sm_80 (Ampere: A100) and sm_90 (Hopper: H100, H200); fp32
and fp16 on every one, bf16 from sm_80 on (a T4 has no bf16, so the library never asks for it there).
Every ``triton.jit`` function of the Triton modules must have its cases in :data:`CASES_SCRIPT`'s
table: a new kernel fails this test until it is given some.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TARGETS = {75: ("fp32", "fp16"), 80: ("fp32", "fp16", "bf16"), 90: ("fp32", "fp16", "bf16")}
"""Compute capability -> the cache dtypes compiled for it."""

CASES_SCRIPT = textwrap.dedent('''
    import inspect, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction
    from pagedkv_lib.attention import triton_decode, triton_split_decode
    from pagedkv_lib.attention.partition_size import choose_partition_tokens
    from pagedkv_lib.attention.triton_decode import _padded

    arch, dtypes = int(sys.argv[1]), sys.argv[2].split(",")
    POINTERS = dict(block_tables_ptr="*i32", seq_lens_ptr="*i64", acc_ptr="*fp32", m_ptr="*fp32", l_ptr="*fp32")

    def signature(kernel, dtype, scalars=("scale_log2",), ints=("num_parts",)):
        """Every argument's Triton type: pointers by name, strides and counts i32, the rest constexpr."""
        return {name: POINTERS.get(name, "*" + dtype) if name.endswith("_ptr") else
                "fp32" if name in scalars else "i32" if name.startswith("stride") or name in ints else
                "constexpr" for name in kernel.arg_names}

    def decode_consts(dtype, group, block_size, head_dim):
        return dict(GROUP=group, BLOCK_SIZE=block_size, HEAD_DIM=head_dim, PAD_GROUP=_padded(group),
                    PAD_BLOCK=_padded(block_size), PAD_DIM=_padded(head_dim),
                    INPUT_PRECISION="ieee" if dtype == "fp32" else "tf32")

    SHAPES = ((1, 16, 128), (8, 16, 128), (4, 3, 24))   # (group, block size, head dim): MHA, GQA, odd sizes

    def single_pass(dtype):
        return [decode_consts(dtype, *shape) for shape in SHAPES]

    # The default size the library chooses for 4 x 16k tokens, 8 KV heads, on 132 SMs: the floor, 256 tokens.
    CHOSEN_BLOCKS = choose_partition_tokens(16384, 4, 8, 16, 132, blocks_per_step=4) // 16

    def partitioned(dtype):  # one block per step for every shape; four for GQA, at 32 blocks and the chosen size
        return [dict(decode_consts(dtype, *shape), BLOCKS_PER_PARTITION=32, BLOCKS_PER_STEP=1) for shape in SHAPES] + [
            dict(decode_consts(dtype, 8, 16, 128), BLOCKS_PER_PARTITION=blocks, BLOCKS_PER_STEP=4)
            for blocks in (32, CHOSEN_BLOCKS)]

    def merge(dtype):
        return [dict(HEAD_DIM=d, PAD_DIM=_padded(d)) for d in (128, 24)]

    def merge_signature(kernel, dtype):
        sig = signature(kernel, "fp32")
        sig["out_ptr"] = "*" + dtype
        return sig

    CASES = {  # kernel -> (signature for a dtype, its constexprs for a dtype)
        triton_decode._paged_decode_kernel: (signature, single_pass),
        triton_split_decode._paged_decode_partition_kernel: (signature, partitioned),
        triton_split_decode._merge_partitions_kernel: (merge_signature, merge),
    }

    kernels = {obj for module in (triton_decode, triton_split_decode) for _, obj in inspect.getmembers(module)
               if isinstance(obj, JITFunction) and obj.fn.__module__ == module.__name__}
    for kernel in sorted(kernels - set(CASES), key=lambda k: k.__name__):
        print("NO CASES", kernel.__name__)
    for kernel, (sig, consts) in CASES.items():
        for dtype in dtypes:
            for constexprs in consts(dtype):
                compiled = triton.compile(ASTSource(kernel, sig(kernel, dtype), constexprs=constexprs),
                                          target=GPUTarget("cuda", arch, 32))
                assert compiled.asm["cubin"], (kernel.__name__, arch, dtype, constexprs)
                print("OK", kernel.__name__, arch, dtype, sorted(constexprs.items()))
''')


@pytest.mark.parametrize("arch", sorted(TARGETS), ids=lambda a: f"sm_{a}")
def test_every_kernel_compiles_for_the_target(arch):
    """Each kernel, each dtype the target has, each shape case: a cubin, with no GPU and no interpreter."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")      # Triton 3.9's default, said so that it stops warning
    result = subprocess.run([sys.executable, "-c", CASES_SCRIPT, str(arch), ",".join(TARGETS[arch])], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("NO CASES")], result.stdout
    ok = [line for line in lines if line.startswith("OK")]
    # Three decode shapes for the single pass, five for the partitioned kernel, two head dims for the merge.
    assert len(ok) == (3 + 5 + 2) * len(TARGETS[arch]), result.stdout
    assert "('BLOCKS_PER_PARTITION', 16), ('BLOCKS_PER_STEP', 4)" in result.stdout, "the chosen size, compiled"
