"""Paged KV-cache blocks, with vLLM's semantics, and the contiguous baseline paging replaces.

* :mod:`.manager`: :class:`~.manager.BlockManager`, block tables per request: allocate, append,
  fork with copy-on-write, free; the prefix cache hits shared full blocks.
* :mod:`.pool`: the physical blocks, their ref counts and the LRU free queue.
* :mod:`.prefix_cache`: the exact cache of full blocks by content.
* :mod:`.slot_mapping`: logical position -> physical slot, ``table[p // S] * S + p % S``.
* :mod:`.invariants`, :mod:`.stats`: what must always hold, and the ledger figures of live state.
* :mod:`.contiguous`: contiguous reservation (max, pow2, oracle) in a first-fit arena.
"""
