"""Your numbers: the parameters of a problem set, drawn for you from the variant key your instructor gave you.

A variant key is 32 hex digits (128 bits). Your instructor makes one per learner from a course secret
and the learner's id (``instructor/intake/variant_keys.py``); a key cannot be turned into another learner's. A set's
numbers come from ``HMAC-SHA256(key, assignment)``, so one key serves every problem set, and each set
draws its own numbers from it. On a hub the key arrives in the environment variable
:data:`KEY_ENV`, which then decides (a pasted key is ignored); elsewhere you paste it into the
notebook's first cell. While a set is graded, the grader gives the kernel the key of the student the
file is filed under.
With no key a set runs on its *practice* numbers, the same for everyone.

This module holds the parameters only. What the answers are is for you to work out; the grader's
expected values are computed where your kernel never sees them.
"""
from __future__ import annotations

import copy
import hashlib
import hmac
import math
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import PagedKVError

#: The environment variable that carries the learner's key on a hub (and in the grader's judge). When
#: it is set, even to "" (a course without keys), it decides, and a pasted key is ignored.
KEY_ENV = "PAGEDKV_VARIANT_KEY"
#: Or a file holding the key, for a kernel being graded: the sandbox puts the key there rather than on a
#: command line, where other users' ``ps`` would see it.
KEY_FILE_ENV = "PAGEDKV_VARIANT_KEY_FILE"
#: What a variant key looks like: 32 lower-case hex digits.
KEY_PATTERN = re.compile(r"[0-9a-f]{32}")


def check_key(key: str, where: str = "VARIANT_KEY") -> str:
    """``key`` without the spaces around it and in lower case, or "" for none; a clear error for anything else."""
    if not isinstance(key, str):
        raise PagedKVError(f"{where} should be a string of 32 hex digits (or \"\" for the practice "
                           f"numbers), got {type(key).__name__} {key!r}")
    key = key.strip().lower()
    if key and not KEY_PATTERN.fullmatch(key):
        raise PagedKVError(f"{where} = {key!r} is not a variant key: a key is 32 hex digits (0-9, a-f), "
                           "exactly as your instructor gave it; \"\" runs the practice numbers")
    return key


@dataclass(frozen=True)
class Variant:
    """One learner's numbers for one problem set: ``V.q5_model``, ``V.q6_requests``, ... (see :attr:`numbers`)."""

    assignment: str
    key: str  # "" for the practice numbers
    numbers: dict = field(default_factory=dict)
    note: str = ""

    def __getattr__(self, name: str) -> Any:
        numbers = self.__dict__.get("numbers", {})
        if name in numbers:
            return numbers[name]
        raise AttributeError(f"your numbers for {self.__dict__.get('assignment')} have no {name!r}; "
                             f"they are {', '.join(numbers) or 'none'}")

    @property
    def practice(self) -> bool:
        return not self.key

    def rng(self, label: str) -> random.Random:
        """A random generator for the hidden tests' inputs called ``label``: the same for the same key."""
        return random.Random(_seed(self.key or "practice", f"{self.assignment}/{label}"))

    def __repr__(self) -> str:
        who = ("PRACTICE numbers: no variant key was given, so these are the same for everyone.\nPaste the "
               "key your instructor gave you into the first cell (VARIANT_KEY) and run all cells again "
               "for your own." if self.practice else
               f"Your numbers for {self.assignment} (variant key {self.key[:4]}...{self.key[-4:]}).")
        width = max((len(k) for k in self.numbers), default=0)
        rows = [f"  V.{k:<{width}} = {_shown(v)}" for k, v in self.numbers.items()]
        code = [] if self.numbers else ["This set grades code: its hidden tests draw their inputs from this variant."]
        return "\n".join([who, *([self.note] if self.note else []), *code, *rows])


def _shown(value: Any) -> str:
    """``value`` as Python reads it back; a float of a million or more in e-notation (7.62e9)."""
    if isinstance(value, float) and abs(value) >= 1e6:
        mantissa, exponent = f"{value:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return repr(value)


def _seed(key: str, label: str) -> int:
    return int.from_bytes(hmac.new(key.encode(), label.encode(), hashlib.sha256).digest()[:8], "big")


def for_set(assignment: str, key: str = "") -> Variant:
    """Your numbers for ``assignment``, from the hub's key (:data:`KEY_ENV`) or else the pasted ``key``."""
    if assignment not in SETS:
        raise PagedKVError(f"assignment {assignment!r} has no numbers here; the problem sets are {', '.join(SETS)}")
    given = _given_key()
    if given is not None:  # a hub, or the grader: the key of the learner this server or this file belongs to
        note = "" if str(key).strip().lower() in ("", given) else \
            "(The key from this server is used; the one pasted into VARIANT_KEY is ignored.)"
        chosen = given
    else:
        chosen, note = check_key(key), ""
    draw, practice = SETS[assignment]
    numbers = practice if not chosen else draw(random.Random(_seed(chosen, assignment)))
    return Variant(assignment, chosen, copy.deepcopy(numbers), note)


def _given_key() -> str | None:
    """The key this process was given (:data:`KEY_ENV`, else the file :data:`KEY_FILE_ENV` names), or None."""
    if KEY_ENV in os.environ:
        return check_key(os.environ[KEY_ENV], KEY_ENV)
    if KEY_FILE_ENV in os.environ:
        with open(os.environ[KEY_FILE_ENV], encoding="utf-8") as f:
            return check_key(f.read(), KEY_FILE_ENV)
    return None


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


# -- the problem sets' numbers: each draw takes the same steps to answer as the practice numbers ---------

#: ps1 Q3's draw. Each continuation's own tokens fill at most half of the last block they start, and
#: the prompt has at least 4 blocks, the last partly filled: then no slip the grader names (tails packed
#: into the prompt's block, the prompt stored per continuation, slots for states, ...) lands on the right
#: count by chance, for any variant (``tests/test_variants.py`` tries them all).
Q3_BLOCK_SIZES = (4, 8, 16)
Q3_OWN = {S: [*range(1, S // 2 + 1), *range(S + 1, S + S // 2 + 1)] for S in Q3_BLOCK_SIZES}
Q3_PROMPTS = {S: [t for t in range(3 * S + 1, 300 * S) if t % S] for S in Q3_BLOCK_SIZES}


#: How many physical blocks ps1 Q1's pool has: its answer is one of them, so a few hundred keep any
#: one answer to a small share of a class (``tests/test_variants_fairness.py`` measures it).
Q1_POOL_BLOCKS = 1000


def _ps1(rng: random.Random) -> dict:
    S1 = rng.choice([4, 8, 16])
    n = rng.randrange(4, 7)
    j = rng.randrange(1, n - 1)  # never the first or the last logical block
    S3 = rng.choice(Q3_BLOCK_SIZES)
    return {"q1_block_size": S1, "q1_tokens": rng.randrange((n - 1) * S1 + 1, n * S1 + 1),
            "q1_block_table": rng.sample(range(1, Q1_POOL_BLOCKS), n), "q1_position": j * S1 + rng.randrange(S1),
            "q3_block_size": S3, "q3_continuations": rng.randrange(2, 17),
            "q3_prompt_tokens": rng.choice(Q3_PROMPTS[S3]), "q3_own_tokens": rng.choice(Q3_OWN[S3]),
            "q5_requests": _log_uniform(rng, 50, 100_000), "q5_block_size": rng.choice([8, 12, 16, 24, 32])}


PS1_PRACTICE = {"q1_block_size": 4, "q1_tokens": 14, "q1_block_table": [5, 1, 8, 3], "q1_position": 9,
                "q3_block_size": 8, "q3_continuations": 4, "q3_prompt_tokens": 20, "q3_own_tokens": 1,
                "q5_requests": 200, "q5_block_size": 16}

#: Models for the capacity questions: (preset name, layers, KV heads, head_dim, query heads, parameters).
_MODELS = [("OPT-13B", 40, 40, 128, 40, 12.85e9), ("Llama-2-7B", 32, 32, 128, 32, 6.74e9),
           ("Llama-2-13B", 40, 40, 128, 40, 13.0e9), ("Llama-3-8B", 32, 8, 128, 32, 8.03e9),
           ("Llama-3-70B", 80, 8, 128, 64, 70.6e9), ("Mistral-7B", 32, 8, 128, 32, 7.24e9),
           ("Qwen2.5-7B", 28, 4, 128, 28, 7.62e9)]
_GQA = [m for m in _MODELS if m[4] > m[2]]
_GPU_GIB = [24, 40, 48, 80, 96, 141]
_UTILIZATION = [round(0.8 + i / 100, 2) for i in range(16)]  # 0.8 to 0.95


def _gpu_for(rng: random.Random, params: float) -> tuple[int, float]:
    """A GPU size and utilization whose usable memory leaves at least a quarter for the KV cache."""
    fits = [(g, u) for g in _GPU_GIB for u in _UTILIZATION if params * 2 <= 0.75 * u * g * 2**30]
    return rng.choice(fits)


#: ps2 Q9's draw: a hybrid preset (``accounting.HYBRID_MODELS``), a block size dividing its window, a request
#: of 4 windows to 64 Ki tokens that ends inside a block but not one token short of its end (then the
#: window's first position is inside a block: keeping that block and rounding the request's last block up
#: both show), and the KV memory of a server of one to eight GPUs, in which about Q9_REQUESTS requests fit
#: (drawn log-uniform, by the request's bytes, the lesson's B(T)): few requests, or requests near one
#: count, would give many learners one answer (``tests/test_variants_fairness.py`` measures it).
Q9_BLOCK_SIZES = (16, 32, 64)
Q9_KV_GIB = (8, 640)
Q9_REQUESTS = (100, 4000)


def _q9(rng: random.Random) -> dict:
    from ...accounting import HYBRID_MODELS
    name = rng.choice(sorted(HYBRID_MODELS))
    m, S = HYBRID_MODELS[name], rng.choice(Q9_BLOCK_SIZES)
    layer = 2 * m.num_kv_heads * m.head_dim * m.bytes_per_scalar  # bytes of one token in one layer
    while True:
        T = _log_uniform(rng, 4 * m.sliding_window, 65536) // S * S + rng.randrange(1, S - 1)
        request = layer * (m.num_full_layers * T + m.num_sliding_layers * m.sliding_window)
        gib = round(_log_uniform(rng, *Q9_REQUESTS) * request / 2**30)
        if Q9_KV_GIB[0] <= gib <= Q9_KV_GIB[1]:
            break
    return {"q9_model": name, "q9_shape": (m.num_layers, m.num_kv_heads, m.head_dim),
            "q9_sw_layers": m.num_sliding_layers, "q9_window": m.sliding_window, "q9_tokens": T,
            "q9_block_size": S, "q9_kv_gib": gib}


def _ps2(rng: random.Random) -> dict:
    name, L, H_kv, d, _, params = rng.choice([m for m in _MODELS if m[5] * 2 <= 0.75 * 0.95 * 141 * 2**30])
    gib, util = _gpu_for(rng, params)
    name7, L7, H7, d7, Hq7, _ = rng.choice(_GQA)
    return {"q5_model": name, "q5_shape": (L, H_kv, d), "q5_params": params, "q5_gpu_gib": gib,
            "q5_utilization": util, "q5_block_size": rng.choice([8, 16, 32]),
            "q6_requests": rng.randrange(2, 401), "q6_block_size": rng.choice([6, 8, 10, 12, 16, 20, 24, 32]),
            "q7_model": name7, "q7_shape": (L7, H7, d7), "q7_query_heads": Hq7, "q7_gib": rng.randrange(10, 161),
            **_q9(rng)}


PS2_PRACTICE = {"q5_model": "Llama-2-7B", "q5_shape": (32, 32, 128), "q5_params": 6.74e9, "q5_gpu_gib": 80,
                "q5_utilization": 0.9, "q5_block_size": 16, "q6_requests": 1, "q6_block_size": 12,
                "q7_model": "Llama-3-70B", "q7_shape": (80, 8, 128), "q7_query_heads": 64, "q7_gib": 40,
                "q9_model": "Gemma-3-27B", "q9_shape": (62, 16, 128), "q9_sw_layers": 52, "q9_window": 1024,
                "q9_tokens": 6007, "q9_block_size": 16, "q9_kv_gib": 120}


def _ps3(rng: random.Random) -> dict:
    return {}  # code questions: only the hidden tests' inputs differ (``Variant.rng``)


#: ps4 Q5's lab: block sizes from 2 to 16 (the lab's 20-token prompt fills at least one block) but 15,
#: where two samples' tail slack equals the savings; every model preset, DeepSeek-V3's compressed cache
#: included; three cache dtypes. The answer is a product (slots saved x bytes per token), and products
#: of few factors coincide: fewer choices let one answer serve more than 5% of a class
#: (``tests/test_variants_fairness.py`` measures it, ``tests/test_variants.py`` tries every slip).
Q5_LAB_BLOCK_SIZES = [S for S in range(2, 17) if S != 15]
Q5_LAB_MODELS = [m[0] for m in _MODELS] + ["DeepSeek-V3"]
Q5_LAB_DTYPES = ["fp16", "fp8", "fp32"]


#: ps4 Q7's preemption costs: every model preset (the MHA ones, where recompute can win, and the GQA ones,
#: whose small cache swaps fast), both host links of ``sim.preemption_cost`` (by the name of the cited
#: constant), and a prefill MFU from 0.30 to 0.70 but 0.50, the module's ``DEFAULT_MFU`` (an assumption,
#: a parameter: with it, forgetting your MFU would be right by chance). The answer is a ratio of sums over
#: a seeded chat trace; ``tests/test_variants_fairness.py`` measures how many learners one answer serves.
Q7_LINKS = ("PCIE4_X16_BYTES_PER_S", "PCIE5_X16_BYTES_PER_S")
Q7_MFUS = [round(0.3 + i / 100, 2) for i in range(41) if i != 20]


def _ps4(rng: random.Random) -> dict:
    name, *_, params = rng.choice([m for m in _MODELS if m[5] < 20e9])
    gib, util = _gpu_for(rng, params)
    return {"q1_seed": rng.randrange(1, 10_000), "q1_block_size": rng.choice([16, 32, 64, 128]),
            "q2_seed": rng.randrange(1, 10_000), "q2_samples": rng.randrange(2, 7),
            "q3_model": name, "q3_gpu_gib": gib, "q3_utilization": util,
            "q4_seed": rng.randrange(1, 10_000),
            "q5_samples": rng.randrange(2, 17), "q5_block_size": rng.choice(Q5_LAB_BLOCK_SIZES),
            "q5_model": rng.choice(Q5_LAB_MODELS), "q5_dtype": rng.choice(Q5_LAB_DTYPES),
            "q7_model": rng.choice([m[0] for m in _MODELS]), "q7_link": rng.choice(Q7_LINKS),
            "q7_mfu": rng.choice(Q7_MFUS), "q7_conversations": rng.randrange(20, 61), "q7_seed": rng.randrange(1, 10_000)}


PS4_PRACTICE = {"q1_seed": 1, "q1_block_size": 64, "q2_seed": 2, "q2_samples": 4, "q3_model": "Llama-3-8B",
                "q3_gpu_gib": 24, "q3_utilization": 0.9, "q4_seed": 3, "q5_samples": 4,
                "q5_block_size": 16, "q5_model": "Llama-3-8B", "q5_dtype": "fp16",
                "q7_model": "Llama-2-7B", "q7_link": "PCIE4_X16_BYTES_PER_S", "q7_mfu": 0.45, "q7_conversations": 40,
                "q7_seed": 4}

SETS: dict[str, tuple[Callable[[random.Random], dict], dict]] = {
    "ps1_intuition": (_ps1, PS1_PRACTICE), "ps2_math": (_ps2, PS2_PRACTICE),
    "ps3_code": (_ps3, {}), "ps4_demo": (_ps4, PS4_PRACTICE)}
"""Each problem set's draw of numbers from a key, and its practice numbers."""
