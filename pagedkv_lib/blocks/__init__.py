"""Paged KV-cache blocks, with vLLM's semantics, and the contiguous baseline paging replaces.

* :mod:`.manager`: :class:`~.manager.BlockManager`, block tables per request: allocate, append,
  fork with copy-on-write, free; the prefix cache hits shared full blocks.
* :mod:`.pool`: the physical blocks, their ref counts (it alone changes them) and the LRU free queue.
* :mod:`.prefix_cache`: the exact prefix cache, a tree of full-block prefixes whose nodes outlive
  their blocks, so a block computed again finds the blocks cached below it.
* :mod:`.block_hash`, :mod:`.hashed_prefix_cache`: vLLM v1's hash-chained prefix cache beside the
  tree (one dict from chain key to block; :class:`~.hashed_prefix_cache.HashedBlockManager`), the
  block hashes on offer, and the birthday bound on a wrong hit.
* :mod:`.hybrid_manager`, :mod:`.hybrid_prefix_hits`: hybrid models (sliding-window + full attention),
  one block table per KV-cache group in one pool; out-of-window blocks freed; hits scanned per group
  (full left to right, sliding right to left) and intersected.
* :mod:`.request_arguments`: the argument checks every manager makes at its edge, so bad input fails alike.
* :mod:`.slot_mapping`: logical position -> physical slot, ``table[p // S] * S + p % S``.
* :mod:`.invariants`, :mod:`.stats`: what must always hold, and the ledger figures of live state.
* :mod:`.contiguous`: contiguous reservation (max, pow2, oracle) in a first-fit arena.
"""
