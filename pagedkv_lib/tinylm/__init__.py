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

from .generate import Generation, MemoryReport, PagedGeneration, generate, generate_paged
from .model import LOGITS_TOL, TinyConfig, TinyLM, decode, encode

__all__ = ["LOGITS_TOL", "Generation", "MemoryReport", "PagedGeneration", "TinyConfig", "TinyLM", "decode",
           "encode", "generate", "generate_paged"]
