"""A tiny Llama-style decoder that generates the same tokens from a contiguous or a paged KV cache.

The model (about 3 M parameters with :class:`TinyConfig`'s defaults): byte embeddings, then
``num_layers`` blocks of RMSNorm -> attention with rotary positions (RoPE) and grouped-query
heads -> residual, RMSNorm -> SwiGLU MLP -> residual, then a final RMSNorm and an output
projection to 256 byte logits. Weights are drawn from a seeded generator, so every run builds
the same model; they are random, so the text is gibberish, but it is *deterministic* gibberish,
which is all a test of cache layouts needs.

Two ways to run it:

* :func:`generate` keeps one request's K/V in contiguous per-layer tensors sized for the whole
  request (prompt plus new tokens) and attends with :func:`~pagedkv_lib.attention.spec.dense_attention`;
* :func:`generate_paged` serves many prompts, each with ``num_samples`` parallel samples, from a
  paged cache driven by :class:`~pagedkv_lib.blocks.manager.BlockManager`: prefix caching skips the
  prompt blocks an earlier prompt already computed (:func:`~pagedkv_lib.attention.spec.paged_prefill`
  runs only the rest), samples fork the prompt's blocks and copy-on-write the partial last one,
  and all sequences decode together with :func:`~pagedkv_lib.attention.spec.paged_decode_online`.

Sampling is Gumbel-max with noise drawn from ``(seed, sample index)``, so both ways draw the same
noise and must pick the same tokens; ``temperature=0`` is greedy decoding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .attention import spec as A
from .accounting import ModelSpec, blocks_needed, bytes_per_token
from .blocks.manager import BlockManager, slot_mapping_batch
from .validation import check_int, check_ints, check_number

LOGITS_TOL = (1e-4, 1e-4)
"""``(atol, rtol)`` between paged and contiguous logits in fp32: four layers of 1e-6 rounding differences."""


def encode(text: str) -> list[int]:
    """The byte-level tokenizer: UTF-8 bytes are the token ids (vocabulary 256)."""
    return list(text.encode("utf-8"))


def decode(token_ids) -> str:
    """Token ids back to text; byte sequences that are not valid UTF-8 show as U+FFFD."""
    return bytes(int(t) for t in token_ids).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class TinyConfig:
    """Shapes of the tiny model. ``dim = num_heads * head_dim``; ``max_seq_len`` in tokens."""

    num_layers: int = 4
    dim: int = 256
    num_heads: int = 8
    num_kv_heads: int = 2
    hidden_dim: int = 688
    vocab_size: int = 256
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        for name in ("num_layers", "dim", "num_heads", "num_kv_heads", "hidden_dim", "max_seq_len"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("vocab_size", self.vocab_size, minimum=256)
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ValueError(f"dim={self.dim} must split into num_heads={self.num_heads} heads of an even size")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        for name in ("rope_theta", "norm_eps"):  # both divide or exponentiate: positive and finite
            check_number(name, getattr(self, name), low=0.0, high=math.inf, low_open=True, high_open=True)

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies across all layers in fp32 (Eq. 1 with b = 4)."""
        return bytes_per_token(ModelSpec("tiny", self.num_layers, self.num_kv_heads, self.head_dim, dtype="fp32"))


class TinyLM:
    """The decoder. :meth:`forward` is position-wise except where ``attend`` reads the cache."""

    def __init__(self, config: TinyConfig = TinyConfig(), *, seed: int = 0):
        self.config = c = config
        gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))

        def weight(fan_in, *shape, gain=1.0):
            return torch.randn(fan_in, *shape, generator=gen) * (gain / math.sqrt(fan_in))

        kv_dim = c.num_kv_heads * c.head_dim
        self.embed = torch.randn(c.vocab_size, c.dim, generator=gen)
        self.layers = [dict(attn_norm=torch.ones(c.dim), wq=weight(c.dim, c.dim), wk=weight(c.dim, kv_dim),
                            wv=weight(c.dim, kv_dim), wo=weight(c.dim, c.dim, gain=0.5),
                            mlp_norm=torch.ones(c.dim), w_gate=weight(c.dim, c.hidden_dim),
                            w_up=weight(c.dim, c.hidden_dim), w_down=weight(c.hidden_dim, c.dim, gain=0.5))
                       for _ in range(c.num_layers)]
        self.final_norm = torch.ones(c.dim)
        self.lm_head = weight(c.dim, c.vocab_size, gain=4.0)   # spread logits: greedy ties stay rare

    @property
    def num_params(self) -> int:
        tensors = [self.embed, self.final_norm, self.lm_head] + [t for layer in self.layers for t in layer.values()]
        return sum(t.numel() for t in tensors)

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """Logits ``[N, vocab]`` for ``N`` tokens at ``positions``.

        ``attend(layer, q [N, H_q, D], k [N, H_kv, D], v)`` stores the new K/V in its cache and
        returns attention outputs ``[N, H_q, D]``; it decides which earlier tokens each token sees.
        """
        c, n = self.config, token_ids.shape[0]
        h = self.embed[token_ids]
        for i, layer in enumerate(self.layers):
            x = _rms_norm(h, layer["attn_norm"], c.norm_eps)
            q = _rope((x @ layer["wq"]).view(n, c.num_heads, c.head_dim), positions, c.rope_theta)
            k = _rope((x @ layer["wk"]).view(n, c.num_kv_heads, c.head_dim), positions, c.rope_theta)
            v = (x @ layer["wv"]).view(n, c.num_kv_heads, c.head_dim)
            h = h + attend(i, q, k, v).reshape(n, c.dim) @ layer["wo"]
            x = _rms_norm(h, layer["mlp_norm"], c.norm_eps)
            h = h + (torch.nn.functional.silu(x @ layer["w_gate"]) * (x @ layer["w_up"])) @ layer["w_down"]
        return _rms_norm(h, self.final_norm, c.norm_eps) @ self.lm_head


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate channel pairs ``(i, i + D/2)`` of ``x [N, H, D]`` by ``position * theta**(-2i/D)``."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None, None] * freqs                # [N, 1, D/2]
    cos, sin = torch.cos(angles), torch.sin(angles)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class _Sampler:
    """Gumbel-max sampling for one sample stream: ``argmax(logits / temperature + g)``.

    The noise ``g`` comes from a generator seeded by ``(seed, sample)``, one draw per step, so
    two runs that see equal logits pick equal tokens. ``temperature == 0`` is greedy.
    """

    def __init__(self, seed: int, sample: int, temperature: float):
        self.rng = np.random.default_rng([seed, sample])
        self.temperature = temperature

    def __call__(self, logits: torch.Tensor) -> int:
        if self.temperature == 0:
            return int(torch.argmax(logits))
        gumbel = -np.log(-np.log(self.rng.random(logits.shape[-1])))
        return int(torch.argmax(logits / self.temperature + torch.from_numpy(gumbel).to(logits.dtype)))


def _check_generation(prompt_ids, max_new_tokens, temperature, seed, config: TinyConfig,
                      name: str = "prompt_ids"):
    if isinstance(prompt_ids, str):
        raise TypeError(f"{name} must be a sequence of integer token ids (turn text into token ids with "
                        f"encode(text)), got {prompt_ids!r} (str)")
    prompt = check_ints(name, prompt_ids, minimum=0, maximum=config.vocab_size - 1,
                        what="integer token ids", each=f"each token of {name}")
    if not prompt:
        raise ValueError(f"{name} must hold at least one token, got an empty prompt")
    steps = check_int("max_new_tokens", max_new_tokens, minimum=1)
    if len(prompt) + steps > config.max_seq_len:
        raise ValueError(f"prompt of {len(prompt)} tokens + max_new_tokens={steps} exceeds "
                         f"max_seq_len={config.max_seq_len}")
    check_number("temperature", temperature, low=0.0, high=100.0)
    check_int("seed", seed, minimum=0)
    return prompt, steps


def _is_iterable(value) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


@dataclass
class Generation:
    """New token ids ``[max_new_tokens]`` and the logits each was picked from ``[max_new_tokens, vocab]``."""

    tokens: list[int]
    logits: torch.Tensor


def generate(model: TinyLM, prompt_ids, max_new_tokens: int, *, temperature: float = 0.0, seed: int = 0,
             sample: int = 0) -> Generation:
    """Generate for one prompt with a contiguous cache: per layer, ``[T_prompt + max_new_tokens, H_kv, D]``.

    ``sample`` picks the noise stream, so ``generate(..., sample=j)`` reproduces sample ``j`` of
    :func:`generate_paged`.
    """
    c = model.config
    prompt, steps = _check_generation(prompt_ids, max_new_tokens, temperature, seed, c)
    sample = check_int("sample", sample, minimum=0)
    capacity = len(prompt) + steps
    k_cache = torch.zeros(c.num_layers, capacity, c.num_kv_heads, c.head_dim)
    v_cache = torch.zeros_like(k_cache)
    filled = 0                                                     # tokens whose K/V are stored

    def attend(layer, q, k, v):
        end = filled + k.shape[0]
        k_cache[layer, filled:end], v_cache[layer, filled:end] = k, v
        return A.dense_attention(q, k_cache[layer, :end], v_cache[layer, :end], causal=True)

    pick = _Sampler(seed, sample, temperature)
    feed, new_tokens, logits = prompt, [], []
    for _ in range(steps):
        out = model.forward(torch.tensor(feed), torch.arange(filled, filled + len(feed)), attend)[-1]
        filled += len(feed)
        logits.append(out)
        new_tokens.append(pick(out))
        feed = new_tokens[-1:]
    return Generation(new_tokens, torch.stack(logits))


@dataclass(frozen=True)
class MemoryReport:
    """KV memory of a paged run against contiguous reservations, in token slots (x ``bytes_per_slot``).

    ``paged_slots = peak_blocks * block_size``: the most slots the paged cache held at once.
    ``exact_slots``: one contiguous cache per sequence sized for its prompt plus ``max_new_tokens``
    (a reservation that knows every length in advance, and shares nothing).
    ``max_slots``: one contiguous cache of ``max_seq_len`` tokens per sequence (Orca-Max style).
    """

    num_sequences: int
    block_size: int
    peak_blocks: int
    paged_slots: int
    exact_slots: int
    max_slots: int
    bytes_per_slot: int

    def summary(self) -> str:
        mib = self.bytes_per_slot / 2**20
        return (f"{self.num_sequences} sequences: paged {self.peak_blocks} blocks x {self.block_size} = "
                f"{self.paged_slots} slots ({self.paged_slots * mib:.2f} MiB) vs contiguous "
                f"{self.exact_slots} slots exact ({self.exact_slots * mib:.2f} MiB), "
                f"{self.max_slots} slots at max_seq_len ({self.max_slots * mib:.2f} MiB)")


@dataclass
class PagedGeneration:
    """``generations[i][j]``: sample ``j`` of prompt ``i``; ``cached_tokens[i]``: prompt tokens the
    prefix cache served (their prefill was skipped); ``manager``: the block manager, left as the run ended."""

    generations: list[list[Generation]]
    cached_tokens: list[int]
    memory: MemoryReport
    manager: BlockManager


def generate_paged(model: TinyLM, prompts, max_new_tokens: int, *, num_samples: int = 1,
                   temperature: float = 0.0, seed: int = 0, block_size: int = 16, num_blocks: int | None = None,
                   enable_prefix_caching: bool = True, decode=None) -> PagedGeneration:
    """Generate ``num_samples`` continuations of every prompt from one paged cache.

    Prompts are admitted in order; each is prefilled on top of the blocks the prefix cache gives
    it, then forked ``num_samples - 1`` times (sample ``j`` draws noise stream ``j``, as in
    :func:`generate`). Then every sequence decodes one token per step, together. ``num_blocks``
    defaults to what the sequences would need without any sharing; a pool too small for the run
    raises :class:`~pagedkv_lib.errors.OutOfBlocksError` (there is no preemption here). ``decode``
    is the paged decode function, :func:`~pagedkv_lib.attention.spec.paged_decode_online` by default
    (``pagedkv_lib.kernels.fused_decode.decode_function()`` gives the fused kernel when numba is there).
    """
    c = model.config
    decode = A.paged_decode_online if decode is None else decode
    if not callable(decode):
        raise TypeError(f"decode must be a paged decode function like paged_decode_online, got {decode!r}")
    if isinstance(prompts, (str, bytes)) or not _is_iterable(prompts):
        raise TypeError(f"prompts must be a list of prompts, each a list of token ids, got {prompts!r} "
                        f"({type(prompts).__name__})")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt, got none")
    if not any(_is_iterable(p) for p in prompts):
        raise TypeError(f"prompts must be a list of prompts, each a list of token ids, got a flat list "
                        f"{prompts!r}: to generate for one prompt, pass [prompt]")
    prompts = [_check_generation(p, max_new_tokens, temperature, seed, c, f"prompts[{i}]")[0]
               for i, p in enumerate(prompts)]
    n = check_int("num_samples", num_samples, minimum=1)
    S = check_int("block_size", block_size, minimum=1)
    if num_blocks is None:
        num_blocks = n * sum(blocks_needed(len(p) + max_new_tokens, S) for p in prompts)
    manager = BlockManager(num_blocks, S, enable_prefix_caching=enable_prefix_caching)
    shape = (c.num_layers, manager.num_blocks, S, c.num_kv_heads, c.head_dim)
    k_cache, v_cache = torch.zeros(shape), torch.zeros(shape)

    def run(token_ids, positions, slots, attention):
        """One forward pass that writes the new K/V at ``slots``, then attends with ``attention``."""
        def attend(layer, q, k, v):
            A.write_kv(k_cache[layer], v_cache[layer], k, v, slots)
            return attention(q, k_cache[layer], v_cache[layer])
        return model.forward(torch.tensor(token_ids), positions, attend)

    samplers = [[_Sampler(seed, j, temperature) for j in range(n)] for _ in prompts]
    tokens = [[[] for _ in range(n)] for _ in prompts]
    logits = [[[] for _ in range(n)] for _ in prompts]
    cached_tokens, peak = [], 0
    for i, prompt in enumerate(prompts):
        rid = f"{i}.0"
        cached = manager.add_request(rid, prompt)      # these tokens' K/V are already in the cache
        cached_tokens.append(cached)
        positions = torch.arange(cached, len(prompt))
        table = torch.tensor(manager.block_table(rid))
        slots = torch.from_numpy(manager.slot_mapping(rid, positions.numpy()))
        out = run(prompt[cached:], positions, slots,
                  lambda q, kc, vc: A.paged_prefill(q, kc, vc, table, cached))[-1]
        for j in range(n):
            if j:
                manager.fork(rid, f"{i}.{j}")          # shares every prompt block, the partial last one too
            logits[i][j].append(out)
            tokens[i][j].append(samplers[i][j](out))
        peak = max(peak, manager.stats().used_blocks)

    live = [(i, j) for i in range(len(prompts)) for j in range(n)]
    rids = [f"{i}.{j}" for i, j in live]
    for _ in range(max_new_tokens - 1):
        last = [tokens[i][j][-1] for i, j in live]
        for rid, token in zip(rids, last):
            for src, dst in manager.append_tokens(rid, [token]):
                k_cache[:, dst], v_cache[:, dst] = k_cache[:, src], v_cache[:, src]   # copy before writing
        peak = max(peak, manager.stats().used_blocks)
        lens = torch.tensor([manager.num_tokens(r) for r in rids])
        padded = manager.padded_block_tables(rids, pad=A.PAD_BLOCK)              # [B, max blocks], int64
        slots = torch.from_numpy(slot_mapping_batch(padded, (lens - 1).numpy(), S))  # each new token's slot
        tables = torch.from_numpy(padded)
        out = run(last, lens - 1, slots,
                  lambda q, kc, vc: decode(q, kc, vc, tables, lens))
        for row, (i, j) in enumerate(live):
            logits[i][j].append(out[row])
            tokens[i][j].append(samplers[i][j](out[row]))

    memory = MemoryReport(num_sequences=len(live), block_size=S, peak_blocks=peak, paged_slots=peak * S,
                          exact_slots=n * sum(len(p) + max_new_tokens for p in prompts),
                          max_slots=len(live) * c.max_seq_len, bytes_per_slot=c.kv_bytes_per_token)
    generations = [[Generation(tokens[i][j], torch.stack(logits[i][j])) for j in range(n)] for i in range(len(prompts))]
    return PagedGeneration(generations, cached_tokens, memory, manager)
