"""The fused CPU paged decode (numba) and only what it needs; optional, with a torch fallback.

* :mod:`.fused_decode`: the checked entry, ``paged_decode_numba``, and its fallback.
* :mod:`.numba_kernel`: the compiled kernel.
* :mod:`.torch_openmp`, :mod:`.hugepages`: running it on torch's threads; tensors on 2 MiB pages.
* :mod:`.timing`: ``compare_decode_times()``, contiguous vs torch paged vs fused paged, timed live.
"""
