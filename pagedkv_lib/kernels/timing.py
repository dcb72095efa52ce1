"""Decode attention timed on one batch in one process, each method against the memory bound.

The Code lesson's live measurement (:func:`measure_decode_speed`) and the benchmarks share these
pieces. The same logical K/V (a :class:`~pagedkv_lib.attention.batch.PagedBatch`) is laid out the
ways a server might keep it: paged (blocks shuffled, or in logical order), packed contiguous,
per request as ``[1, H_kv, T, D]`` (head-major, what ``scaled_dot_product_attention`` wants), or
as one padded ``[B, H_kv, T_max, D]`` batch. Methods run interleaved, round after round, so a
change in machine load hits them all alike.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from . import contiguous_decode as CD, fused_decode as NA
from .bandwidth import decode_step_read_bytes
from .huge_pages import huge_page_share, on_huge_pages
from ..attention.fast import paged_decode_online_fast
from ..attention.batch import PagedBatch, random_paged_batch

__all__ = ["ContiguousBatch", "contiguous_layouts", "head_major", "sdpa_decode", "batched_decode", "time_interleaved",
           "QUIET_READ_BYTES", "QUIET_READ_SECONDS", "quiet_read", "ROWS", "DecodeSpeed", "fastest_copy",
           "in_logical_order", "measure_decode_speed"]


@dataclass
class ContiguousBatch:
    """A batch's K/V without pages: ``per_request[b]`` is ``(k, v)``, each ``[1, H_kv, T_b, D]``;
    ``k_pad``, ``v_pad [B, H_kv, T_max, D]`` are zero-padded; ``padding [B, T_max]`` marks the pad."""

    per_request: list
    k_pad: torch.Tensor
    v_pad: torch.Tensor
    padding: torch.Tensor


def head_major(keys: list, values: list) -> list:
    """Each request's ``(k, v)`` as contiguous ``[1, H_kv, T, D]``, from ``[T, H_kv, D]`` per request."""
    return [(k.transpose(0, 1)[None].contiguous(), v.transpose(0, 1)[None].contiguous())
            for k, v in zip(keys, values)]


def contiguous_layouts(batch: PagedBatch) -> ContiguousBatch:
    """The contiguous layouts of ``batch.keys`` / ``batch.values``: head-major copies per request
    (:func:`head_major`), and one zero-padded head-major batch."""
    lens = batch.seq_lens.tolist()
    k_pad, v_pad = (pad_sequence(list(xs), batch_first=True).transpose(1, 2).contiguous()  # [B, H_kv, T_max, D]
                    for xs in (batch.keys, batch.values))
    padding = torch.arange(max(lens)) >= torch.tensor(lens)[:, None]
    return ContiguousBatch(head_major(batch.keys, batch.values), k_pad, v_pad, padding)


def sdpa_decode(q: torch.Tensor, per_request: list) -> torch.Tensor:
    """Per-request ``scaled_dot_product_attention`` of ``q [B, H_q, D]`` on contiguous K/V, ``per_request[b]``
    being ``(k, v)``, each ``[1, H_kv, T_b, D]`` (:func:`head_major`, or ``ContiguousBatch.per_request``)."""
    _, h_q, d = q.shape
    return torch.cat([F.scaled_dot_product_attention(q[b].view(1, h_q, 1, d), k, v, enable_gqa=True)
                      for b, (k, v) in enumerate(per_request)]).view(q.shape)


def batched_decode(q: torch.Tensor, cont: ContiguousBatch) -> torch.Tensor:
    """One matmul-softmax-matmul over the padded batch, the padding masked to -inf."""
    batch, h_q, d = q.shape
    h_kv = cont.k_pad.shape[1]
    qg = q.view(batch, h_kv, h_q // h_kv, d) / math.sqrt(d)
    scores = torch.matmul(qg, cont.k_pad.transpose(-1, -2))              # [B, H_kv, G, T_max]
    scores.masked_fill_(cont.padding[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), cont.v_pad).view(q.shape)


def time_interleaved(methods: dict, repeats: int, *, between=None) -> dict:
    """Seconds per call of each zero-argument function, ``repeats`` rounds, after one warm-up call.

    Every round runs every method once, in reverse order every other round, so that drifting load
    favours none of them. ``between``, if given, runs untimed before every timed call, so that each
    call starts from the same state whatever ran before it (say, a read that evicts the dirty cache
    lines a copy left behind, whose write-back the next method would otherwise pay).
    """
    for fn in methods.values():
        fn()
    times = {name: [] for name in methods}
    for r in range(repeats):
        for name in (list(methods) if r % 2 == 0 else list(methods)[::-1]):
            if between is not None:
                between()
            start = time.perf_counter()
            methods[name]()
            times[name].append(time.perf_counter() - start)
    return times


QUIET_READ_BYTES = 128 * 2**20
"""The least an untimed read between timed calls reads (:func:`quiet_read`), in bytes: more than a
last-level cache holds, so that it evicts what the previous call left there."""

QUIET_READ_SECONDS = 0.02
"""The least time an untimed read between timed calls takes (:func:`quiet_read`), in seconds: longer than
torch's OpenMP workers keep spinning after a parallel region with libgomp's defaults (5-8 ms of CPU here)."""


def quiet_read(nbytes: int):
    """An untimed read to run between timed calls: numpy sums ``max(nbytes, QUIET_READ_BYTES)`` bytes on
    the calling thread alone, again until :data:`QUIET_READ_SECONDS` have passed. Returns the zero-argument call.

    It evicts what the previous method left in the caches (dirty lines included), and it leaves every
    core idle for the next one. A torch read would not: after each parallel region torch's OpenMP
    workers spin, waiting for the next, for a few ms (libgomp's ``GOMP_SPINCOUNT``), on the cores that
    plain threads (the fused kernels') then have to share; measured here at two threads, the fused
    kernel took 1.4-2x as long after a torch read as after a numpy one, torch's own rows the same
    (``benchmarks/RESULTS.md``, issue 39). A torch built with Intel's or LLVM's OpenMP spins for
    ``KMP_BLOCKTIME`` instead (200 ms by default), longer than this waits.
    """
    data = np.ones(max(int(nbytes), QUIET_READ_BYTES) // 4, dtype=np.float32)

    def read() -> None:
        start = time.perf_counter()
        data.sum()
        while time.perf_counter() - start < QUIET_READ_SECONDS:
            data.sum()
    return read


ROWS = {
    "copy": "copy only: every block gathered once (not attention)",
    "fused contiguous": "fused kernel, contiguous cache",
    "fused in order": "fused kernel, paged, blocks in order",
    "fused shuffled": "fused kernel, paged, blocks shuffled",
    "torch contiguous": "torch, contiguous (SDPA per request)",
    "torch paged": "torch, paged (copies each step's blocks)",
}
"""The methods :func:`measure_decode_speed` times, by key, and what each one is (on a GPU:
:data:`.gpu_timing.GPU_ROWS`)."""


@dataclass
class DecodeSpeed:
    """One live measurement of a decode step, every method on the same batch in one process.

    ``seconds[key]``: median seconds per call (keys of :data:`ROWS`; the ``fused`` ones only where
    both compiled kernels are ready, else ``kernel_missing`` says why); ``rounds[key]``: the seconds
    of each round, in order (round ``i`` of every method ran together); ``moved_bytes[key]``: the
    bytes that method must move at least (K and V read once; the copy also writes them);
    ``read_bytes``: K and V of the batch, :func:`~.bandwidth.decode_step_read_bytes`;
    ``copy_bytes_per_s``: the copy bandwidth measured in the same rounds (:func:`fastest_copy`); ``lens``
    (tokens), ``threads``, ``repeats``; ``device``: where it ran (``"cpu"``, or the GPU's name); ``pair``: the
    ``(paged, contiguous)`` keys the gate compares, where they are not the CPU's (:meth:`paging_pair`);
    ``huge_page_share``: on the CPU, the share of the paged cache's mapping that the OS gave on huge pages.
    """

    seconds: dict
    rounds: dict
    moved_bytes: dict
    read_bytes: int
    copy_bytes_per_s: float
    lens: list
    threads: int
    repeats: int
    kernel_missing: str | None
    device: str = "cpu"
    pair: tuple[str, str] | None = None
    huge_page_share: float | None = None

    @property
    def where(self) -> str:
        """What ran it, in words: ``"2 thread(s)"`` on the CPU, the GPU's name on a GPU."""
        return f"{self.threads} thread(s)" if self.device == "cpu" else self.device

    def bound_seconds(self, key: str) -> float:
        """The least time ``key`` can take here: its bytes at the copy bandwidth."""
        return self.moved_bytes[key] / self.copy_bytes_per_s

    def share_of_bound(self, key: str) -> float:
        """Bound over measured time: 1.0 runs at the copy bandwidth, 0.25 takes four times the bound."""
        return self.bound_seconds(key) / self.seconds[key]

    def paging_ratio(self) -> float:
        """Paged over contiguous time for the same method (median of the rounds' ratios): the fused kernel's
        shuffled over contiguous rows, or (without the kernels) torch's paged over contiguous rows."""
        return self.ratio(*self.paging_pair())

    def paging_pair(self) -> tuple[str, str]:
        """The keys :meth:`paging_ratio` compares: ``(paged, contiguous)``, one method read two ways."""
        if self.pair is not None:
            return self.pair
        if self.kernel_missing is None:
            return "fused shuffled", "fused contiguous"
        return "torch paged", "torch contiguous"

    def round_ratios(self, over: str, under: str) -> list[float]:
        """``over``'s time over ``under``'s in each round, sorted: how much one ratio moves with load."""
        return sorted(a / b for a, b in zip(self.rounds[over], self.rounds[under]))

    def ratio(self, over: str, under: str) -> float:
        """The median of :meth:`round_ratios`: each round's two calls ran moments apart, under the same load."""
        return statistics.median(self.round_ratios(over, under))

    def ratio_interval(self, over: str, under: str, confidence: float = 0.9) -> tuple[float, float]:
        """A distribution-free interval that holds the true median of :meth:`round_ratios` with at least
        ``confidence``: order statistics ``r`` and ``n + 1 - r`` of the ``n`` rounds, for the largest ``r``
        whose binomial tail ``P(Binomial(n, 1/2) < r)`` is at most ``(1 - confidence) / 2``; all the
        rounds' range where ``n`` is too small for any ``r``. More rounds give a narrower interval."""
        ratios = self.round_ratios(over, under)
        n, tail, cdf, r = len(ratios), (1 - confidence) / 2, 0.0, 0
        for j in range(n):
            cdf += math.comb(n, j) / 2 ** n
            if cdf > tail:
                break
            r = j + 1
        return (ratios[0], ratios[-1]) if r == 0 else (ratios[r - 1], ratios[n - r])


def fastest_copy(copies: dict) -> float:
    """The copy bandwidth in bytes/s: the fastest of ``copies`` (name -> ``(bytes read + written, median
    seconds)``), all timed in the same rounds. Being the fastest, no copy among them takes less than its
    bytes at this bandwidth: a share of the bound above 100% is left to methods that only read."""
    return max(moved / seconds for moved, seconds in copies.values())


def in_logical_order(batch: PagedBatch) -> tuple:
    """``(k_cache, v_cache, block_tables)`` holding ``batch``'s blocks in logical order, request after request.

    Request b's block j moves to index ``sum(N_<b) + j``: the same bytes and the same kernel,
    without the jumps a shuffled pool makes it take.
    """
    used = batch.block_tables >= 0
    ids = batch.block_tables[used]
    tables = torch.full_like(batch.block_tables, -1)
    tables[used] = torch.arange(ids.numel(), dtype=tables.dtype)
    return batch.k_cache[ids], batch.v_cache[ids], tables


def measure_decode_speed(lens, *, num_kv_heads: int = 8, group: int = 4, head_dim: int = 128,
                         block_size: int = 16, repeats: int = 5, seed: int = 0, huge_pages: bool = True) -> DecodeSpeed:
    """Time one fp32 decode step of a batch with ``lens`` tokens per request, every way in :data:`ROWS`.

    The same K/V is laid out four ways: paged with shuffled blocks (as a busy pool leaves them),
    paged in logical order, packed contiguous (:func:`.contiguous_decode.packed_kv`), and head-major
    per request (:func:`head_major`). Every attention method is first checked to agree with
    the others (1e-4); then all run interleaved, ``repeats`` rounds after a warm-up, with a plain copy
    of ``read_bytes`` in every round, so load on the machine hits them all alike. The bandwidth is the
    faster of that copy and the copy-only row (:func:`fastest_copy`). Before each timed call, an untimed
    read of at least as many other bytes (:func:`quiet_read`) leaves the caches and the cores alike for every method.
    With ``huge_pages`` every layout and the copies' buffers are asked for on the OS's huge pages
    (:func:`.huge_pages.on_huge_pages`), as a server would keep its cache; ``DecodeSpeed.huge_page_share``
    says how much of the paged cache's mapping the OS gave on them (:func:`.huge_pages.huge_page_share`).
    """
    place = on_huge_pages if huge_pages else list
    batch = random_paged_batch(lens, block_size=block_size, num_kv_heads=num_kv_heads, group=group,
                               head_dim=head_dim, spare_blocks=0, seed=seed)
    batch.k_cache, batch.v_cache = place([batch.k_cache, batch.v_cache])             # one mapping, theirs alone
    keys, values = place([CD.packed_kv(batch.keys), CD.packed_kv(batch.values)])
    k_and_v = place([t for pair in head_major(batch.keys, batch.values) for t in pair])   # k0, v0, k1, v1, ..
    per_request = list(zip(k_and_v[0::2], k_and_v[1::2]))
    batch.keys = batch.values = None                                   # the logical copies are laid out now
    k_in_order, v_in_order, tables_in_order = in_logical_order(batch)
    in_order = (batch.q, *place([k_in_order, v_in_order]), tables_in_order, batch.seq_lens)
    ids = batch.block_tables[batch.block_tables >= 0]
    k_copy, v_copy = place([batch.k_cache.new_empty(len(ids), *batch.k_cache.shape[1:]) for _ in range(2)])

    def copy_blocks():
        torch.index_select(batch.k_cache, 0, ids, out=k_copy)
        torch.index_select(batch.v_cache, 0, ids, out=v_copy)

    missing = NA.kernel_unavailable(torch.float32) or CD.contiguous_kernel_unavailable()
    attention = {
        "torch contiguous": lambda: sdpa_decode(batch.q, per_request),
        "torch paged": lambda: paged_decode_online_fast(*batch.args()),
    }
    if missing is None:
        attention = {"fused contiguous": lambda: CD.contiguous_decode_numba(batch.q, keys, values, batch.seq_lens),
                     "fused in order": lambda: NA.paged_decode_numba(*in_order),
                     "fused shuffled": lambda: NA.paged_decode_numba(*batch.args()), **attention}
    expected = attention["torch contiguous"]()
    for key, fn in attention.items():
        worst = float((fn() - expected).abs().max())
        if not worst <= 1e-4:
            raise AssertionError(f"{ROWS[key]} differs from {ROWS['torch contiguous']} by {worst:.1e} (> 1e-4)")
    read = decode_step_read_bytes(lens, num_kv_heads, head_dim, batch.k_cache.element_size())
    src, dst = place([torch.ones(read // 4), torch.zeros(read // 4)])
    times = time_interleaved({"copy": copy_blocks, **attention, "bandwidth": lambda: dst.copy_(src)}, repeats,
                             between=quiet_read(read))
    seconds = {key: statistics.median(ts) for key, ts in times.items()}
    moved = {key: read for key in attention}
    moved["copy"] = 2 * (k_copy.numel() + v_copy.numel()) * k_copy.element_size()
    bandwidth = fastest_copy({"bandwidth": (2 * src.numel() * 4, seconds.pop("bandwidth")),
                              "copy": (moved["copy"], seconds["copy"])})
    order = [key for key in ROWS if key in seconds]
    return DecodeSpeed({key: seconds[key] for key in order}, {key: times[key] for key in order}, moved, read,
                       bandwidth, [int(t) for t in lens], torch.get_num_threads(), repeats, missing,
                       huge_page_share=huge_page_share(batch.k_cache))
