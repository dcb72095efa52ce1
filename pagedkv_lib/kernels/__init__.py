"""The fused CPU decode kernels (numba), optional: without numba, or where it fails, torch computes it.

* :mod:`.fused_decode`: the checked entry of the paged kernel, ``paged_decode_numba``, and its
  fallback to :func:`pagedkv_lib.attention.fast.paged_decode_online_fast`.
* :mod:`.numba_kernel`: its compiled program, one per request (imported only when first needed);
  :mod:`.table_bounds`: the compiled bounds check of its block tables.
* :mod:`.contiguous_decode`, :mod:`.contiguous_kernel`: the same program on a contiguous cache, the
  control that shows what paging's indirection costs alone (fallback: torch's SDPA).
* :mod:`.launch`: numpy views of tensors, and the plain threads both kernels run on.
* :mod:`.prefetch`: LLVM's prefetch, callable from numba: both programs ask for each KV head's part of
  the rows a few tokens ahead.
* :mod:`.bandwidth`: the bytes one decode step must read, ``decode_step_read_bytes``.
* :mod:`.huge_pages`: CPU tensors on the OS's huge pages (2 MiB on x86-64: fewer TLB misses per row read).
* :mod:`.timing`: ``measure_decode_speed()``, every way of reading one batch, timed live against
  the copy bandwidth.
"""
