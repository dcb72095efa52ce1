"""CPU tensors on the operating system's 2 MiB pages: pages of the KV cache inside pages of memory.

The block table maps a request's logical blocks to physical blocks, as an operating system's page
table maps virtual pages to physical memory; and the KV cache itself lives in the OS's pages. Those
are 4 KiB by default, so at 8 KV heads x 128 x fp32 every token's K row (and V row) is a page of its
own, and each row the kernel jumps to needs an address translation that the CPU's TLB (a cache of
page-table entries, about 2,000 of them) rarely still holds: a 110 MB cache is 27,000 such pages.
On 2 MiB pages one entry covers 32 blocks of 16 tokens.

On Linux, ``madvise(MADV_HUGEPAGE)`` before the memory is first touched asks for 2 MiB pages
("transparent huge pages", when ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or
``madvise``). Servers allocate the cache once, so they can ask once. Elsewhere, or when the kernel
has none to give, the same call returns memory on ordinary pages: slower, never wrong.
"""
from __future__ import annotations

import math
import mmap

import torch

__all__ = ["HUGE_PAGE_BYTES", "empty_on_huge_pages", "on_huge_pages", "huge_page_bytes"]

HUGE_PAGE_BYTES = 2 * 2**20
"""The size of a transparent huge page on x86-64 and most arm64 Linux kernels, in bytes."""

LINE_BYTES = 64
"""A cache line: where each tensor of :func:`on_huge_pages` starts."""


def empty_on_huge_pages(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor of ``shape`` and ``dtype``, its memory asked of the OS as 2 MiB pages.

    The memory is a private anonymous mapping of whole 2 MiB pages, the tensor starting on one's
    boundary (so even a small tensor can get one), advised ``MADV_HUGEPAGE`` before first use; the
    tensor keeps the mapping alive. Where Python has no ``MADV_HUGEPAGE`` (not Linux), an ordinary
    ``torch.empty``; where the OS refuses the advice (a kernel built without huge pages), ordinary pages.
    """
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    whole_pages = -(-max(nbytes, 1) // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    memory = mmap.mmap(-1, whole_pages + HUGE_PAGE_BYTES,          # a spare huge page, to align the start
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private: shared memory gets no THP
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)
    except OSError:                                                # EINVAL: no transparent huge pages here
        pass
    raw = torch.frombuffer(memory, dtype=torch.uint8)              # holds a reference to the mapping
    start = -raw.data_ptr() % HUGE_PAGE_BYTES
    return raw[start:start + nbytes].view(dtype).view(shape)


def on_huge_pages(tensors: list) -> list:
    """Copies of CPU ``tensors`` (each contiguous, same dtype and shape), one after another in one
    mapping on 2 MiB pages (:func:`empty_on_huge_pages`), each starting on a 64-byte cache line.

    One mapping for all, so that many small tensors (a request's K, say) share huge pages too.
    """
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":
            raise ValueError(f"on_huge_pages needs CPU tensors, but tensors[{i}] is on {t.device}: "
                             "huge pages are the CPU's memory")
    starts, end = [], 0
    for t in tensors:
        starts.append(end)
        end += -(-t.numel() * t.element_size() // LINE_BYTES) * LINE_BYTES
    memory = empty_on_huge_pages((end,), torch.uint8)
    return [memory[start:start + t.numel() * t.element_size()].view(t.dtype).view(t.shape).copy_(t)
            for start, t in zip(starts, tensors)]


def huge_page_bytes(t: torch.Tensor) -> int:
    """How many bytes of the memory mappings that hold ``t`` the OS backs with huge pages now (Linux's
    ``AnonHugePages`` in ``/proc/self/smaps``); 0 where that file does not exist."""
    first = t.data_ptr()
    last = first + max(t.untyped_storage().nbytes(), 1) - 1
    try:
        with open("/proc/self/smaps") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return 0
    total, inside = 0, False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):                # a mapping's header: "start-end perms ..."
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low <= last and first < high
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1]) * 1024
    return total
