"""Lesson 02's facts: bytes per token, slack by block size, capacity.

Part of :mod:`pagedkv_lib.lesson.claim_facts`, which joins the four lessons' facts."""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact
from .worked_example import prompt


def _model(name):
    from pagedkv_lib.accounting import get_model
    return get_model(name)


def _weights_8b():
    """Bytes per fp16 weight, Llama-3-8B's parameters, the same bytes again, its weights in GiB."""
    from pagedkv_lib.accounting import DTYPE_BYTES, GiB
    m = _model("Llama-3-8B")
    b = DTYPE_BYTES[m.weight_dtype]
    return b, m.num_params, b, round(m.weight_bytes / GiB, 1)


def _kv_factor():
    """Eq. 1's factor: bytes per token over L * H_kv * d * b (keys and values)."""
    from pagedkv_lib.accounting import bytes_per_token
    m = _model("OPT-13B")
    return (bytes_per_token(m) / (m.num_layers * m.num_kv_heads * m.head_dim
                                  * m.bytes_per_scalar),)


def _fp16_bytes():
    from pagedkv_lib.accounting import DTYPE_BYTES
    if DTYPE_BYTES["fp16"] != DTYPE_BYTES["bf16"]:
        raise ValueError("fp16 and bf16 differ in size")
    return (DTYPE_BYTES["fp16"],)


def _slack_at(S):
    from pagedkv_lib.accounting import expected_slack_per_request
    return S, expected_slack_per_request(S)


def _slack_16():
    return _slack_at(16)


def _slackless_block_size():
    """The one block size with no expected slack."""
    from pagedkv_lib.accounting import expected_slack_per_request
    (S,) = [S for S in range(1, 1025) if expected_slack_per_request(S) == 0]
    return S


def _doubled_default():
    """vLLM's default block size (the paper's, registered as cited) and twice it."""
    from pagedkv_lib.lesson.claims import cited
    (S,) = cited("block-size").values
    return S, 2 * S


_02 = "02_math"
FACTS_02 = (
    # q-slack's choices (library_prose.rendered_prose): the block sizes cell-23 tests near (S - 1) / 2
    Fact(_02, "yes for 4, 16, 64; no for 512", "cell-23", code="for S in (4, 16, 64))\nbig_ok = abs(gap[512])"),
    Fact(_02, "no for 4, 16, 64; yes for 512", "cell-23", code="for S in (4, 16, 64))\nbig_ok = abs(gap[512])"),
    Fact(_02, "share a 12-token prompt", "cell-17", check=prompt),
    Fact(_02, "(2 for fp16/bf16)", "cell-05", check=_fp16_bytes),
    Fact(_02, "The factor 2 is keys", "cell-05", check=_kv_factor),
    Fact(_02, "only 8 KV heads (each shared by 4 query heads)", "cell-05",
         check=lambda: (_model("Llama-3-8B").num_kv_heads,
                        _model("Llama-3-8B").num_query_heads
                        // _model("Llama-3-8B").num_kv_heads)),
    Fact(_02, "= 512 + 64 scalars", "cell-07",
         check=lambda: (_model("DeepSeek-V3").kv_lora_rank, _model("DeepSeek-V3").rope_head_dim)),
    Fact(_02, "on one 80 GiB GPU", "cell-20", code='acc.kv_capacity(name, 80 * GiB'),
    Fact(_02, "parameters x 2 bytes in fp16 (Llama-3-8B: 8.03e9 x 2 B = 15.0 GiB)", "cell-20",
         check=_weights_8b),
    Fact(_02, "At $S = 16$ that is 7.5 slots per request", "cell-23", check=_slack_16),
    # the library's prose in this lesson (library_prose.rendered_prose): the lens, reveals, items
    Fact(_02, "doubles from 16 to 32", "bb9edca7", check=lambda: _doubled_default()),
    Fact(_02, "from 7.5 at S = 16 to 15.5 at S = 32", "cell-23",
         check=lambda: (*_slack_16()[::-1], *_slack_at(32)[::-1])),
    Fact(_02, "tests it on 2,000 lengths", "cell-23", code="size=2000"),
    Fact(_02, "utilization 0.9, blocks of 16", "cell-20", code="utilization=0.9, block_size=16"),
    Fact(_02, "$C_{tok}$ = 2 x", "cell-05", check=_kv_factor),
    Fact(_02, "At S = 8 the prefix no longer fills", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "stored apart, at S = 8)", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "leave the 5% band", "cell-23", code="within 5% of"),
    Fact(_02, "The block tables drawn at S = 4", "cell-17", code="allocate(PAGE_BATCH, block_size=4)"),
    Fact(_02, "and S = 8", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "with sharing at S = 8", "cell-17", code="s8 = allocate(PAGE_BATCH, 8)"),
    Fact(_02, "on an 80 GiB GPU", "cell-20", code="acc.kv_capacity(name, 80 * GiB"),
    Fact(_02, "Block size 1 is best, since it has no slack", "cell-23", check=lambda: (_slackless_block_size(),)),
    Fact(_02, "why vLLM chose 16", "cell-23", check=lambda: _doubled_default()[:1]),
)
