"""CPU tensors on the operating system's huge pages: pages of the KV cache inside pages of memory.

The block table maps a request's logical blocks to physical blocks, as an operating system's page
table maps virtual pages to physical memory; and the KV cache itself lives in the OS's pages. On
x86-64 those are 4 KiB by default, so at 8 KV heads x 128 x fp32 every token's K row (and V row)
is a page's worth of bytes, and each page needs an address translation, which the CPU keeps in a
small cache, the TLB (a few thousand entries): a 110 MB cache is about 27,000 such pages, or about
55 huge pages of 2 MiB.

On Linux, ``madvise(MADV_HUGEPAGE)`` before the memory is first touched asks for huge pages
("transparent huge pages", when ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or
``madvise``). A server allocates its cache once, so it can ask once. Elsewhere, or when the kernel
has none to give, the same calls return memory on ordinary pages: slower, never wrong.
"""
from __future__ import annotations

import mmap
from pathlib import Path

import torch

__all__ = ["HUGE_PAGE_BYTES", "empty_on_huge_pages", "on_huge_pages", "huge_page_share"]


def _pmd_size() -> int:
    """This kernel's transparent huge page size in bytes (2 MiB on x86-64; 512 MiB on arm64 with 64 KiB pages)."""
    try:
        return int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 * 2**20


HUGE_PAGE_BYTES = _pmd_size()
"""The size of one transparent huge page here, in bytes (Linux's ``hpage_pmd_size``; 2 MiB where it is not said)."""

LINE_BYTES = 64
"""A cache line: where each tensor of :func:`on_huge_pages` starts."""


def _round_up(n: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that is at least ``n``."""
    return (n + multiple - 1) // multiple * multiple


def empty_on_huge_pages(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor of ``shape`` (a tuple or an int) and ``dtype``, its memory asked of the OS as
    huge pages.

    The memory is a private anonymous mapping with one spare huge page, so that the tensor can start on a
    huge page's boundary; only the whole huge pages the tensor covers are advised ``MADV_HUGEPAGE``, so the
    OS never merges two such tensors' advised ranges into one (which :func:`huge_page_share` would then
    count together). The tensor keeps the mapping alive. An ordinary ``torch.empty`` where Python has no
    ``MADV_HUGEPAGE`` (not Linux) or the tensor holds no bytes; ordinary pages where the OS refuses the
    advice (a kernel built without huge pages).
    """
    shape = torch.Size((shape,) if isinstance(shape, int) else shape)
    nbytes = shape.numel() * dtype.itemsize
    if nbytes == 0 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    advised_bytes = _round_up(nbytes, HUGE_PAGE_BYTES)
    mapping = mmap.mmap(-1, advised_bytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE)   # private: no shared memory
    raw = torch.frombuffer(mapping, dtype=torch.uint8)          # holds a reference to the mapping
    start = -raw.data_ptr() % HUGE_PAGE_BYTES                   # bytes to the first huge page boundary
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, start, advised_bytes)
    except OSError:                                             # EINVAL: no transparent huge pages here
        pass
    return raw[start:start + nbytes].view(dtype).view(shape)


def on_huge_pages(tensors: list) -> list:
    """Contiguous copies of CPU ``tensors``, each of its original's dtype and shape, one after another in one
    mapping on huge pages (:func:`empty_on_huge_pages`), each starting on a 64-byte cache line.

    One mapping for all, so that many small tensors (a request's K, say) share huge pages too. The copies
    share its storage: one kept alive keeps all, and ``torch.save`` of one writes the whole mapping.
    """
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":
            raise ValueError(f"on_huge_pages needs CPU tensors, but tensors[{i}] is on {t.device}: "
                             "huge pages are the CPU's memory")
    starts, end = [], 0
    for t in tensors:
        starts.append(end)
        end += _round_up(t.numel() * t.element_size(), LINE_BYTES)
    arena = empty_on_huge_pages(end, torch.uint8)
    return [arena[start:start + t.numel() * t.element_size()].view(t.dtype).view(t.shape).copy_(t)
            for start, t in zip(starts, tensors)]


def huge_page_share(t: torch.Tensor) -> float:
    """The share of the OS mappings that hold ``t``'s bytes which the OS backs with huge pages now, 0 to 1:
    their ``AnonHugePages`` over their ``Size`` in Linux's ``/proc/self/smaps``; 0 where that file does not exist.

    A mapping is the OS's unit: for a tensor of :func:`on_huge_pages`, the advised huge pages around it and
    the tensors it was copied beside; for a ``torch.empty``, whatever memory the allocator mapped with it.
    """
    first = t.data_ptr()
    last = first + max(t.numel() * t.element_size(), 1) - 1
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return 0.0
    huge = size = 0
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):               # a mapping's header: "start-end perms ..."
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low <= last and first < high
        elif inside and head == "Size:":
            size += int(line.split()[1]) * 1024
        elif inside and head == "AnonHugePages:":
            huge += int(line.split()[1]) * 1024
    return huge / size if size else 0.0
