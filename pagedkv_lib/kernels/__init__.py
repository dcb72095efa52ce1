"""The fused CPU paged decode (numba), optional: without numba, or where it fails, torch computes it.

* :mod:`.fused_decode`: the checked entry, ``paged_decode_numba``, its launch on plain threads and its
  fallback to :func:`pagedkv_lib.attention.fast.paged_decode_online_fast`.
* :mod:`.numba_kernel`: the compiled program, one per request (imported only when first needed).
* :mod:`.prefetch`: LLVM's prefetch, callable from numba, which the compiled program uses.
* :mod:`.timing`: ``compare_decode_times()``, contiguous vs torch paged vs fused paged, timed live.
"""
