"""The partitioned kernel's default partition size (issue 39): the rule's properties, and the kernel at the chosen size.

The rule (``pagedkv_lib/attention/partition_size.py``) is pure Python and tested without Triton; the kernel tests
run under Triton's interpreter without a GPU, as ``test_triton_attention.py``'s do (its fixture and helpers).
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import partition_size as PS
from pagedkv_lib.attention.partition_size import choose_partition_tokens
from pagedkv_lib.sim import sharegpt_like
from test_triton_attention import _device, assert_matches_reference, make_case, tri  # noqa: F401 (tri: fixture)

shapes = dict(max_len=st.integers(1, 200_000), batch=st.integers(1, 512), num_kv_heads=st.sampled_from([1, 2, 8]),
              block_size=st.sampled_from([1, 3, 4, 16, 32]), sm_count=st.integers(1, 200),
              blocks_per_step=st.sampled_from([1, 2, 4]))


def _ladder(tokens: int, tile: int) -> int:
    """The smallest tile * 2**k holding ``tokens`` (the rule's sizes), written out again for the tests."""
    size = tile
    while size < tokens:
        size *= 2
    return size


@given(**shapes)
def test_the_choice_is_whole_steps_between_the_floor_and_one_partition(max_len, batch, num_kv_heads, block_size,
                                                                      sm_count, blocks_per_step):
    size = choose_partition_tokens(max_len, batch, num_kv_heads, block_size, sm_count, blocks_per_step=blocks_per_step)
    tile = blocks_per_step * block_size
    assert size > 0 and size % block_size == 0 and size % tile == 0
    assert (size // tile) & (size // tile - 1) == 0, "a size of the ladder tile * 2**k"
    one_partition = _ladder(max_len, tile)
    assert min(_ladder(PS.MIN_PARTITION_TOKENS, tile), one_partition) <= size <= one_partition
    assert math.ceil(max_len / size) <= PS.MAX_PARTITIONS


@given(**shapes)
def test_the_programs_fill_the_sms_as_far_as_the_floor_allows(max_len, batch, num_kv_heads, block_size, sm_count,
                                                              blocks_per_step):
    """At least half the wanted programs (the ladder rounds up, at most halving them), unless the floor, the
    cap or the sequence's own length stops it."""
    size = choose_partition_tokens(max_len, batch, num_kv_heads, block_size, sm_count, blocks_per_step=blocks_per_step)
    tile = blocks_per_step * block_size
    pairs = batch * num_kv_heads
    shortest = max(_ladder(PS.MIN_PARTITION_TOKENS, tile), _ladder(math.ceil(max_len / PS.MAX_PARTITIONS), tile))
    most_partitions = math.ceil(max_len / shortest)
    programs = pairs * math.ceil(max_len / size)
    assert 2 * programs >= min(PS.PROGRAMS_PER_SM * sm_count, pairs * most_partitions), (size, programs)


@given(**shapes, more_sms=st.integers(1, 200), more_batch=st.integers(1, 512))
def test_more_sms_never_lengthen_and_more_sequences_never_shorten_a_partition(
        max_len, batch, num_kv_heads, block_size, sm_count, blocks_per_step, more_sms, more_batch):
    def size(b, sms):
        return choose_partition_tokens(max_len, b, num_kv_heads, block_size, sms, blocks_per_step=blocks_per_step)
    assert size(batch, sm_count + more_sms) <= size(batch, sm_count)
    assert size(batch + more_batch, sm_count) >= size(batch, sm_count)


@given(max_len=st.integers(16_384, 131_072), sm_count=st.integers(40, 200), num_kv_heads=st.sampled_from([1, 8]))
def test_one_long_sequence_on_many_sms_gets_many_partitions(max_len, sm_count, num_kv_heads):
    size = choose_partition_tokens(max_len, 1, num_kv_heads, 16, sm_count)
    assert math.ceil(max_len / size) >= 32, size
    assert choose_partition_tokens(max_len, 1, 8, 16, 132) == max(256, _ladder(math.ceil(max_len / 256), 16))


@given(max_len=st.integers(1, 2048), batch=st.integers(PS.PROGRAMS_PER_SM * 132 // 8, 8192),
       sm_count=st.integers(1, 132))
def test_a_large_batch_of_short_sequences_gets_one_partition_each(max_len, batch, sm_count):
    """A batch whose (sequence, KV head) pairs alone fill the SMs (8 KV heads, at most 132 SMs)."""
    size = choose_partition_tokens(max_len, batch, 8, 16, sm_count)
    assert size >= max_len and size == _ladder(max_len, 16)


def test_the_benchmark_shapes_on_an_h200_and_a_t4():
    """What the GPU check times (benchmarks/triton_attention.py --chosen): 32 query and 8 KV heads, blocks of 16."""
    cases = {"sharegpt": (1232, 32), "4k": (4096, 32), "16k": (16384, 4)}   # table width in tokens, batch
    h200 = {name: choose_partition_tokens(t, b, 8, 16, 132) for name, (t, b) in cases.items()}
    t4 = {name: choose_partition_tokens(t, b, 8, 16, 40) for name, (t, b) in cases.items()}
    assert h200 == {"sharegpt": 256, "4k": 256, "16k": 256}
    assert t4 == {"sharegpt": 256, "4k": 1024, "16k": 512}


def test_nothing_known_falls_back_to_vllms_512():
    assert choose_partition_tokens(None, 4, 8, 16) == PS.FALLBACK_PARTITION_TOKENS == 512
    assert choose_partition_tokens(None, 4, 8, 3) % 3 == 0


@pytest.mark.parametrize("name, value, error, allowed", [
    ("max_len", 0, ValueError, ">= 1"), ("batch", 0, ValueError, ">= 1"), ("num_kv_heads", 2.0, TypeError, "integer"),
    ("block_size", -16, ValueError, ">= 1"), ("sm_count", True, TypeError, "integer"),
    ("blocks_per_step", 3, ValueError, "power of two")])
def test_a_bad_argument_is_refused_by_name(name, value, error, allowed):
    kwargs = dict(max_len=4096, batch=4, num_kv_heads=8, block_size=16, sm_count=132, blocks_per_step=1)
    kwargs[name] = value
    with pytest.raises(error, match=name) as info:
        choose_partition_tokens(**kwargs)
    assert allowed in str(info.value) and repr(value) in str(info.value), str(info.value)


def test_off_a_gpu_the_sm_count_is_the_named_default():
    assert PS.sm_count("cpu") == PS.sm_count(None) == PS.DEFAULT_SM_COUNT


# The kernel at the chosen size, in the interpreter: ShareGPT-like lengths (several partitions), GQA, MHA.
SHAREGPT = (lambda t: (t.prompt_len + t.output_len[:, 0]).tolist())(sharegpt_like(6, seed=1, max_context=2048))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("lens, block_size, num_kv_heads, group, sms, partitions", [
    (SHAREGPT, 16, 2, 4, 132, 3),            # GQA, a ShareGPT-like mix: partitions of 256 over a 640-token table
    ([300, 17, 520], 16, 1, 1, 1, 3),        # MHA on one SM: the floor, 256 tokens
    ([33, 5, 64], 4, 2, 8, 132, 1),          # short sequences: one partition (64 tokens) each
    ([480, 40], 16, 2, 4, 132, 2),           # a 496-token table: two partitions of 256
], ids=["sharegpt-gqa", "mha-one-sm", "short", "two-partitions"])
def test_the_kernel_at_the_chosen_size_equals_the_reference(tri, dtype, lens, block_size, num_kv_heads, group, sms,
                                                             partitions):
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    args = make_case(lens=lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group, head_dim=16,
                     dtype=dtype, device=_device(tri), seed=len(lens))
    width = args[3].shape[1] * block_size
    for blocks_per_step in (1, 4):
        size = choose_partition_tokens(width, len(lens), num_kv_heads, block_size, sms, blocks_per_step=blocks_per_step)
        assert math.ceil(width / size) == partitions, size
        out = paged_decode_triton_split(*args, partition_tokens=size, blocks_per_step=blocks_per_step)
        assert_matches_reference(out, args)
        if sms == PS.sm_count(args[0].device):   # the default (None, "auto") is this choice, bit for bit
            for default in (None, "auto"):
                auto = paged_decode_triton_split(*args, partition_tokens=default, blocks_per_step=blocks_per_step)
                assert torch.equal(auto, out)


def test_an_explicit_size_is_used_as_given(tri):
    """An int keeps the old path exactly: the same bits as the launch with that size, and not the chosen size's."""
    from pagedkv_lib.attention.triton_split_decode import _launch_unchecked, paged_decode_triton_split
    args = make_case(lens=[29, 7, 18], block_size=4, num_kv_heads=2, group=4, head_dim=16, dtype=torch.float32,
                     device=_device(tri), seed=5)
    scale = 1 / math.sqrt(16)
    for size in (4, 8, 512):
        assert torch.equal(paged_decode_triton_split(*args, partition_tokens=size),
                           _launch_unchecked(*args, scale, size))
    assert not torch.equal(paged_decode_triton_split(*args, partition_tokens=4), paged_decode_triton_split(*args))


@pytest.mark.parametrize("value", ["fast", "", "512"])
def test_a_string_other_than_auto_is_refused_by_name(tri, value):
    from pagedkv_lib.attention.triton_split_decode import paged_decode_triton_split
    args = make_case(lens=[5], block_size=4, num_kv_heads=1, group=1, head_dim=8, dtype=torch.float32,
                     device=_device(tri))
    with pytest.raises(ValueError, match="partition_tokens") as info:
        paged_decode_triton_split(*args, partition_tokens=value)
    assert repr(value) in str(info.value) and "'auto'" in str(info.value) and "multiple of the block size 4" in str(
        info.value)
