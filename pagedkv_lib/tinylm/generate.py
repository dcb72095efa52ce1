"""Generation from the tiny model: :func:`generate` on a contiguous cache, :func:`generate_paged` on a
paged one driven by the block manager, both sampling with the same seeded Gumbel noise."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..accounting import blocks_needed
from ..attention import spec as A
from ..blocks.manager import BlockManager
from ..blocks.slot_mapping import slot_mapping_batch
from ..validation import check_int, check_ints, check_number
from .model import TinyConfig, TinyLM

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
    (or ``pagedkv_lib.kernels.fused_decode.paged_decode_numba``, the fused kernel).
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
