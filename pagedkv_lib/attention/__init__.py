"""Paged attention: the spec first, then speed-ups tested equal to it.

* :mod:`.spec`: the KV cache layout ``[num_blocks, block_size, H_kv, D]``, writes by slot mapping,
  dense reference attention, paged decode (reference, gather, online softmax) and paged prefill.
* :mod:`.csr`: FlashInfer-style CSR page lists (``kv_indptr``, ``kv_indices``, ``kv_last_page_len``).
* :mod:`.fast`: faster CPU paged decode, tested equal to the spec.
* :mod:`.validation`: the argument checks every attention function shares.
* :mod:`.triton_decode`: a Triton paged decode kernel (optional extra ``triton``).
* :mod:`.triton_split_decode`: the same, each sequence cut into partitions and merged (vLLM's
  ``paged_attention_v2`` idea): many more programs when requests are few and long.
* :mod:`.partition_size`: its default partition size, from the batch and the device's SMs (no Triton needed).
* :mod:`.batch`: random paged batches for tests, benchmarks and the Code lesson.
"""
