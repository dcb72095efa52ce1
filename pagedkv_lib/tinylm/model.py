"""The tiny model itself: the byte tokenizer, its shapes (:class:`TinyConfig`) and :class:`TinyLM`,
whose ``forward`` takes the attention to run as an argument, so one model serves either cache."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..accounting import ModelSpec, bytes_per_token
from ..validation import check_int, check_number

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
