"""Token ids for simulated requests: equal shared prefixes get equal ids, everything else unique ids.

A prefix cache finds shared blocks by hashing token ids, so the simulator needs ids with
exactly the sharing the trace describes: requests with the same ``prefix_id`` start with the
same ids for ``prefix_len`` tokens; the rest of each prompt, and each sample's output, get ids
no other request uses. Ids depend only on (request, sample, position), so a sequence that is
preempted and prefilled again gets the same ids, and can hit its own blocks still in the cache.
"""
from __future__ import annotations

import numpy as np

from .workloads import Trace


class TokenIds:
    """Token ids by position: requests with the same prefix id share their prefix's ids; the rest are unique.

    Position ``pos`` of sequence ``j`` of request ``r`` gets ``prefix_base[g] + pos`` inside the
    shared prefix ``g`` (prefix ids renumbered 0, 1, ..., so large or sparse ids cost nothing),
    ``prompt_base[r] + pos`` in the rest of the prompt, and ``seq_base[r, j] + pos`` in the output.
    The bases space the ranges so they never overlap; :meth:`fresh` hands out ids after all of
    them (beam tokens).
    """

    def __init__(self, trace: Trace):
        p, plen, o = trace.prompt_len, trace.prefix_len, trace.output_len
        # Prefix ids are any integers >= 0 (sparse ones too): renumber them 0..m-1 in order.
        has = trace.prefix_id >= 0
        names, dense = np.unique(trace.prefix_id[has], return_inverse=True)
        pid = np.full(len(p), -1, dtype=np.int64)
        pid[has] = dense.ravel()
        prefix_len = np.zeros(len(names), dtype=np.int64)
        prefix_len[pid[has]] = plen[has]
        self.prefix_base = np.concatenate([[0], np.cumsum(prefix_len)])[:-1].tolist()
        cursor = int(prefix_len.sum())
        own = p - plen
        starts = cursor + np.concatenate([[0], np.cumsum(own)])[:-1]
        self.prompt_base = (starts - plen).tolist()
        cursor += int(own.sum())
        out_starts = cursor + np.concatenate([[0], np.cumsum(o.ravel())])[:-1].reshape(o.shape)
        self.seq_base = (out_starts - p[:, None]).tolist()
        self._next = cursor + int(o.sum())
        self.p, self.plen, self.pid = p.tolist(), plen.tolist(), pid.tolist()

    def ids(self, r: int, j: int, start: int, stop: int) -> list[int] | range:
        """Ids of positions ``start..stop-1`` of sequence ``j`` of request ``r``."""
        p, plen = self.p[r], self.plen[r]
        if start >= p:
            base = self.seq_base[r][j]
            return range(base + start, base + stop)
        out: list[int] = []
        if start < plen:
            base = self.prefix_base[self.pid[r]]
            out.extend(range(base + start, base + min(stop, plen)))
        if stop > plen and start < p:
            base = self.prompt_base[r]
            out.extend(range(base + max(start, plen), base + min(stop, p)))
        if stop > p:
            base = self.seq_base[r][j]
            out.extend(range(base + p, base + stop))
        return out

    def fresh(self) -> int:
        """A token id used nowhere else (a beam's new token)."""
        self._next += 1
        return self._next - 1
