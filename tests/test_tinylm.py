"""The tiny model generates the same tokens from a contiguous cache, a paged cache, and no cache."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.attention import spec as A
from pagedkv_lib import tinylm as T

MODEL = T.TinyLM(T.TinyConfig(num_layers=2, max_seq_len=128), seed=3)
SYSTEM = "You answer in one short line. "
PROMPTS = [T.encode(SYSTEM + "What is a block?"), T.encode(SYSTEM + "Why page the cache?"), T.encode("Hi")]


def test_default_model_is_small_and_seeded():
    model = T.TinyLM()
    assert 1_000_000 <= model.num_params <= 5_000_000
    assert torch.equal(model.lm_head, T.TinyLM().lm_head)
    assert not torch.equal(model.lm_head, T.TinyLM(seed=1).lm_head)


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=40))
def test_byte_tokenizer_round_trips_text(text):
    ids = T.encode(text)
    assert all(0 <= t < 256 for t in ids)
    assert T.decode(ids) == text


def test_contiguous_cache_equals_recomputing_everything_each_step():
    """Without any cache, re-running the whole sequence gives the cached run's logits and tokens."""
    prompt = PROMPTS[0]
    cached = T.generate(MODEL, prompt, 8)
    seq = list(prompt)
    for step in range(8):
        def attend(layer, q, k, v):
            return A.dense_attention(q, k, v, causal=True)
        logits = MODEL.forward(torch.tensor(seq), torch.arange(len(seq)), attend)[-1]
        torch.testing.assert_close(logits, cached.logits[step], atol=1e-4, rtol=1e-4)
        seq.append(int(logits.argmax()))
    assert seq[len(prompt):] == cached.tokens


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_paged_run_with_prefix_cache_and_forks_matches_contiguous_runs(block_size, temperature):
    paged = T.generate_paged(MODEL, PROMPTS, 12, num_samples=3, temperature=temperature, seed=5,
                             block_size=block_size)
    for i, prompt in enumerate(PROMPTS):
        for j in range(3):
            contiguous = T.generate(MODEL, prompt, 12, temperature=temperature, seed=5, sample=j)
            assert paged.generations[i][j].tokens == contiguous.tokens, (i, j)
            atol, rtol = T.LOGITS_TOL
            torch.testing.assert_close(paged.generations[i][j].logits, contiguous.logits, atol=atol, rtol=rtol)
    # The second prompt found the full blocks of the prefix it shares with the first in the cache.
    common = next(n for n, (a, b) in enumerate(zip(*PROMPTS[:2])) if a != b)
    shared = common // block_size * block_size
    assert shared >= len(SYSTEM) // block_size * block_size > 0
    assert paged.cached_tokens[:2] == [0, shared]
    paged.manager.check_invariants()


def test_sampling_forks_diverge_and_copy_on_write_keeps_them_apart():
    paged = T.generate_paged(MODEL, PROMPTS[:1], 12, num_samples=3, temperature=0.9, seed=5, block_size=16)
    samples = [g.tokens for g in paged.generations[0]]
    assert len({tuple(s) for s in samples}) == 3
    # The prompt ends mid-block, so the first two samples to append copied the shared last block.
    assert len(PROMPTS[0]) % 16 and paged.manager.stats().cow_copies == 2


def test_prefix_caching_changes_memory_not_tokens():
    on = T.generate_paged(MODEL, PROMPTS, 6, block_size=4)
    off = T.generate_paged(MODEL, PROMPTS, 6, block_size=4, enable_prefix_caching=False)
    assert [g[0].tokens for g in on.generations] == [g[0].tokens for g in off.generations]
    assert off.cached_tokens == [0, 0, 0]
    assert on.memory.peak_blocks < off.memory.peak_blocks


def test_memory_report_counts_blocks_against_contiguous_reservations():
    paged = T.generate_paged(MODEL, PROMPTS, 10, num_samples=4, temperature=0.9, block_size=8)
    mem = paged.memory
    assert mem.num_sequences == 12
    assert mem.paged_slots == mem.peak_blocks * 8
    assert mem.exact_slots == 4 * sum(len(p) + 10 for p in PROMPTS)
    assert mem.max_slots == 12 * MODEL.config.max_seq_len
    # Sharing the prompts across samples (and the system prompt across prompts) beats even the exact reservation.
    assert mem.paged_slots < mem.exact_slots < mem.max_slots
    assert mem.bytes_per_slot == 2 * 2 * 2 * 32 * 4          # K+V x layers x KV heads x head dim x fp32
    assert "blocks" in mem.summary()


@pytest.mark.parametrize("kwargs,error", [
    (dict(prompt_ids=[], max_new_tokens=4), ValueError),
    (dict(prompt_ids=[300], max_new_tokens=4), ValueError),
    (dict(prompt_ids=[1, 2], max_new_tokens=0), ValueError),
    (dict(prompt_ids=[1, 2], max_new_tokens=127), ValueError),
    (dict(prompt_ids=[1, 2], max_new_tokens=2, temperature=-1.0), ValueError),
    (dict(prompt_ids=[1, 2], max_new_tokens=2.0), TypeError),
])
def test_bad_generation_arguments_raise(kwargs, error):
    with pytest.raises(error):
        T.generate(MODEL, **kwargs)
    with pytest.raises(error):
        T.generate_paged(MODEL, [kwargs["prompt_ids"]], kwargs["max_new_tokens"],
                         temperature=kwargs.get("temperature", 0.0))


def test_bad_config_raises():
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        T.TinyConfig(num_heads=8, num_kv_heads=3)
    with pytest.raises(ValueError, match="even size"):
        T.TinyConfig(dim=24, num_heads=8)
    with pytest.raises(ValueError, match=r"^norm_eps must be a number in \(0.0, inf\), got -1.0$"):
        T.TinyConfig(norm_eps=-1.0)
    with pytest.raises(ValueError, match=r"^norm_eps must be a number in \(0.0, inf\), got 0.0$"):
        T.TinyConfig(norm_eps=0.0)
    with pytest.raises(TypeError, match=r"^rope_theta must be a number in \(0.0, inf\), got 'x'"):
        T.TinyConfig(rope_theta="x")
    with pytest.raises(ValueError, match=r"^rope_theta must be a number.*got nan$"):
        T.TinyConfig(rope_theta=float("nan"))
    assert T.TinyConfig(rope_theta=500000, norm_eps=1e-6).rope_theta == 500000


@pytest.mark.parametrize("call, error, words", [
    (lambda: T.generate(MODEL, [1, 2], 2, sample=-1), ValueError, r"^sample must be an integer >= 0, got -1$"),
    (lambda: T.generate(MODEL, [1, 2], 2, sample=1.5, temperature=1.0), TypeError,
     r"^sample must be an integer >= 0, got 1.5 \(float\)$"),
    (lambda: T.generate(MODEL, "hi", 2), TypeError, r"^prompt_ids must be a sequence.*encode\(text\).*'hi'"),
    (lambda: T.generate(MODEL, 7, 2), TypeError, r"^prompt_ids must be a sequence of integer token ids, got 7"),
    (lambda: T.generate_paged(MODEL, [], 4), ValueError, r"^prompts must hold at least one prompt, got none$"),
    (lambda: T.generate_paged(MODEL, [1, 2, 3], 4), TypeError, r"^prompts must be a list of prompts.*flat list "
                                                                 r"\[1, 2, 3\].*pass \[prompt\]"),
    (lambda: T.generate_paged(MODEL, 7, 4), TypeError, r"^prompts must be a list of prompts.*got 7 \(int\)$"),
    (lambda: T.generate_paged(MODEL, [[1], [2, 300]], 4), ValueError,
     r"^each token of prompts\[1\] must be an integer in \[0, 255\], got 300$"),
    (lambda: T.generate_paged(MODEL, [[1], []], 4), ValueError, r"^prompts\[1\] must hold at least one token"),
])
def test_bad_generation_arguments_name_what_the_caller_passed(call, error, words):
    with pytest.raises(error, match=words):
        call()
