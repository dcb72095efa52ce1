"""Eq. 1 and 2, blocks, reserved slots and slack, GPU capacity: values from the models' configs,
identities on random batches, and clear errors for bad input."""
import math

import pytest
from hypothesis import given, strategies as st

from pagedkv_lib import accounting as acc
from pagedkv_lib.accounting import GiB, ModelSpec

lengths = st.lists(st.integers(min_value=0, max_value=5000), max_size=40)
block_sizes = st.integers(min_value=1, max_value=512)


@pytest.mark.parametrize("name, expected", [
    ("OPT-13B", 819_200),            # 2*40*40*128*2; the paper rounds it to 800 KB
    ("Llama-2-7B", 512 * 1024),
    ("Llama-2-13B", 800 * 1024),
    ("Llama-3-8B", 128 * 1024),
    ("Mistral-7B", 128 * 1024),
    ("Llama-3-70B", 320 * 1024),
    ("Qwen2.5-7B", 56 * 1024),
])
def test_bytes_per_token_matches_published_configs(name, expected):
    assert acc.bytes_per_token(name) == expected


def test_mla_caches_one_latent_per_layer_not_k_and_v():
    spec = acc.get_model("DeepSeek-V3")
    assert spec.is_mla
    assert acc.bytes_per_token(spec) == 61 * (512 + 64) * 2
    # An MHA layout with 128 heads of 128 dims would cost 2*61*128*128*2 bytes per token: ~57x more.
    assert 2 * 61 * 128 * 128 * 2 / acc.bytes_per_token(spec) > 50


@pytest.mark.parametrize("dtype, factor", [("fp32", 2.0), ("bf16", 1.0), ("fp8", 0.5), ("float16", 1.0)])
def test_bytes_per_token_scales_with_dtype(dtype, factor):
    assert acc.bytes_per_token("Llama-3-8B", dtype) == factor * acc.bytes_per_token("Llama-3-8B", "fp16")


def test_model_lookup_is_case_insensitive_and_accepts_specs():
    spec = acc.get_model("llama-3-8b")
    assert spec is acc.MODELS["Llama-3-8B"]
    assert acc.get_model(spec) is spec


@given(st.sampled_from([*acc.MODELS, *acc.HYBRID_MODELS]), st.lists(st.booleans(), min_size=20, max_size=20))
def test_every_preset_is_found_under_any_casing_of_its_name(name, upper):
    """The lookup table (built once) holds every preset of both tables, under each casing of its name."""
    cased = "".join(c.upper() if u else c.lower() for c, u in zip(name, upper + [False] * len(name)))
    assert acc.get_model(cased) is {**acc.MODELS, **acc.HYBRID_MODELS}[name]
    with pytest.raises(ValueError, match="one of OPT-13B"):
        acc.get_model(cased + "x")


@given(lengths, st.sampled_from(sorted(acc.MODELS)))
def test_eq2_logical_bytes_is_tokens_times_eq1(ls, name):
    assert acc.logical_bytes(ls, name) == sum(ls) * acc.bytes_per_token(name)


@given(st.integers(min_value=0, max_value=10**6), block_sizes)
def test_blocks_needed_is_the_smallest_cover(T, S):
    N = acc.blocks_needed(T, S)
    assert N * S >= T
    assert (N - 1) * S < T or N == 0
    assert N == math.ceil(T / S)


@given(lengths, block_sizes)
def test_slack_identity_and_bounds(ls, S):
    R = acc.reserved_slots(ls, S)
    W = acc.tail_slack(ls, S)
    assert R % S == 0
    assert W == R - sum(ls)
    # each request wastes at most S-1 slots, and none when S divides its length
    assert 0 <= W <= (S - 1) * len(ls)
    assert W == sum((-t) % S for t in ls)


@given(lengths)
def test_block_size_one_has_no_slack(ls):
    assert acc.tail_slack(ls, 1) == 0


def test_expected_slack_matches_exhaustive_average():
    for S in (1, 4, 16, 64):
        exact = sum((-t) % S for t in range(S * 100)) / (S * 100)
        assert acc.expected_slack_per_request(S) == pytest.approx(exact)


def test_kv_capacity_on_80_gib():
    cap = acc.kv_capacity("Llama-3-8B", 80 * GiB, utilization=0.9, block_size=16)
    budget = int(0.9 * 80 * GiB) - acc.get_model("Llama-3-8B").weight_bytes
    assert cap.kv_bytes == budget
    assert cap.blocks == budget // (16 * 128 * 1024)
    assert cap.tokens == cap.blocks * 16
    # GQA (8 KV heads) vs OPT-13B's 40 full heads: about 7x more tokens fit.
    opt = acc.kv_capacity("OPT-13B", 80 * GiB)
    assert 6 < cap.tokens / opt.tokens < 9


@given(st.integers(min_value=1, max_value=64), block_sizes)
def test_kv_capacity_never_exceeds_budget(gib, S):
    try:
        cap = acc.kv_capacity("Qwen2.5-7B", gib * GiB, block_size=S)
    except ValueError:
        assert int(0.9 * gib * GiB) <= acc.get_model("Qwen2.5-7B").weight_bytes
        return
    assert cap.blocks * cap.block_bytes <= cap.kv_bytes < (cap.blocks + 1) * cap.block_bytes


@pytest.mark.parametrize("call, words", [
    (lambda: acc.blocks_needed(-1, 4), ["num_tokens", "-1", ">= 0"]),
    (lambda: acc.blocks_needed(3.0, 4), ["num_tokens", "3.0", "integer"]),
    (lambda: acc.blocks_needed(True, 4), ["num_tokens", "True"]),
    (lambda: acc.blocks_needed(4, 0), ["block_size", "0", ">= 1"]),
    (lambda: acc.reserved_slots([3, -2], 4), ["lengths[1]", "-2"]),
    (lambda: acc.reserved_slots(7, 4), ["lengths", "7"]),
    (lambda: acc.bytes_per_token("GPT-5"), ["model", "GPT-5", "Llama-3-8B"]),
    (lambda: acc.bytes_per_token("OPT-13B", "int3"), ["dtype", "int3", "fp16"]),
    (lambda: acc.kv_capacity("OPT-13B", 80 * GiB, utilization=0), ["utilization", "(0.0, 1.0]"]),
    (lambda: acc.kv_capacity("OPT-13B", 80 * GiB, utilization=1.5), ["utilization", "1.5"]),
    (lambda: acc.kv_capacity("OPT-13B", 16 * GiB), ["no memory left", "weight_bytes"]),
    (lambda: ModelSpec("x", 2, 3, 64, num_query_heads=4), ["num_query_heads", "multiple", "3"]),
    (lambda: ModelSpec("x", 0, 1, 64), ["num_layers", "0"]),
])
def test_bad_input_names_argument_value_and_allowed(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_numpy_integers_are_stored_as_python_ints_and_cannot_overflow():
    import numpy as np
    spec = ModelSpec("x", np.int16(80), np.int16(64), np.int16(128))
    assert type(spec.num_layers) is int
    assert acc.bytes_per_token(spec) == 2 * 80 * 64 * 128 * 2
    big = ModelSpec("y", np.int32(80), np.int32(64), np.int32(128))
    assert acc.logical_bytes([np.int64(10**6)], big) == 10**6 * 2 * 80 * 64 * 128 * 2


def test_cache_dtype_does_not_change_the_weights():
    fp16 = acc.kv_capacity("Llama-2-7B", 80 * GiB)
    fp8 = acc.kv_capacity("Llama-2-7B", 80 * GiB, dtype="fp8")
    assert fp8.kv_bytes == fp16.kv_bytes                 # same weights, same budget
    assert fp8.bytes_per_token * 2 == fp16.bytes_per_token
    assert fp8.blocks in (2 * fp16.blocks, 2 * fp16.blocks + 1)


@pytest.mark.parametrize("call, words", [
    (lambda: acc.dtype_bytes(None), ["dtype", "None", "fp16"]),
    (lambda: acc.get_model(3), ["model", "3", "OPT-13B"]),
    (lambda: ModelSpec("", 2, 2, 64), ["name", "non-empty"]),
    (lambda: ModelSpec("x", 2, 2, 64, num_params="7e9"), ["num_params", "7e9"]),
    (lambda: ModelSpec("x", 2, 2, 64, weight_dtype="int2"), ["weight_dtype", "int2"]),
])
def test_more_bad_input_is_explained(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))
