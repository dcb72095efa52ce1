"""Tensors on 2 MiB pages of memory, where Linux allows it: a KV cache paged twice over, made cheap.

A paged KV cache sits on a second level of pages, the operating system's. At 8 KV heads x 128
dims in fp32, one token's row of a block is 4 KiB: exactly one 4 KiB page. A kernel that follows
a block table through shuffled blocks then starts a new page at every row, and every page
costs an address translation that the CPU's TLB (a few thousand entries) no longer holds. On
2 MiB pages one translation covers 512 such rows. Measured on the course's 2-core machine
(``benchmarks/RESULTS.md``): the fused kernel's time on shuffled blocks over in-order ones fell
from 1.05-1.24x to 1.01-1.07x, while the batched contiguous baseline, one sequential stream, did
not move (the absolute times varied more between runs than the pages changed them).

Linux backs memory with 2 MiB pages when asked (``madvise(MADV_HUGEPAGE)``, transparent huge
pages in ``madvise`` or ``always`` mode) and when it finds free 2 MiB runs; elsewhere, or when
it does not, :func:`empty` gives an ordinary tensor: same values, only the speed differs.
"""
from __future__ import annotations

import ctypes
import mmap
import math
import operator
import sys

import torch

__all__ = ["HUGE_PAGE_BYTES", "huge_pages_available", "empty", "copy_to_huge_pages", "huge_page_bytes"]

HUGE_PAGE_BYTES = 2 << 20
"""One huge page on x86-64 and most ARM Linux: 2 MiB."""

_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_pages_available() -> bool:
    """True where this process can ask for huge pages: Linux, with transparent huge pages not ``[never]``."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open(_THP_MODE) as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def empty(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised, contiguous CPU tensor whose memory Linux is asked to back with 2 MiB pages.

    ``shape``: a sequence of ints >= 0. Where :func:`huge_pages_available` is False this is
    ``torch.empty(shape, dtype=dtype)``. The pages are given when first written.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.float32, got {dtype!r}")
    try:
        items = tuple(shape)
        sizes = tuple(operator.index(n) for n in items)         # ints and numpy ints; not floats
    except TypeError:
        items = sizes = None
    if sizes is None or any(isinstance(n, bool) for n in items) or any(n < 0 for n in sizes):
        raise ValueError(f"shape must be a sequence of ints >= 0, got {shape if items is None else items!r}")
    shape = sizes
    num_bytes = math.prod(shape) * dtype.itemsize
    if not huge_pages_available() or num_bytes < HUGE_PAGE_BYTES:
        return torch.empty(shape, dtype=dtype)
    # private, anonymous memory: shared anonymous memory (mmap's default) follows shmem's THP setting
    memory = mmap.mmap(-1, num_bytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    memory.madvise(mmap.MADV_HUGEPAGE)
    start = -ctypes.addressof(ctypes.c_char.from_buffer(memory)) % HUGE_PAGE_BYTES   # 2 MiB aligned
    flat = torch.frombuffer(memory, dtype=torch.uint8, count=num_bytes, offset=start)  # keeps memory alive
    return flat.view(dtype).view(shape)


def copy_to_huge_pages(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of the CPU ``tensor`` made by :func:`empty`: equal values, maybe faster to read."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
        raise TypeError(f"tensor must be a CPU torch.Tensor, got {type(tensor).__name__}"
                        f"{'' if not isinstance(tensor, torch.Tensor) else ' on ' + str(tensor.device)}")
    out = empty(tuple(tensor.shape), tensor.dtype)
    out.copy_(tensor)
    return out


def huge_page_bytes() -> int:
    """Bytes of this process's memory on transparent huge pages now (``AnonHugePages``); 0 off Linux."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
