"""Running a notebook in a fresh kernel for a test, with the kernel's replies read in slices of a second.

A cell's execute reply has been seen to sit unread in the test process's shell socket while nbclient waited
for it: 1 of 78 lesson runs under ``make test-colab`` (2026-12-04; the kernel had run the cell and answered a
new connection at once), and CI's ``make test`` on 2026-12-06, where lesson 04 with every gate committed took
627 s against 27 s for lesson 03. pyzmq's poll did not wake when the reply came; its check when the cell's
``timeout`` ran out (600 s) found it. Here every wait on the shell channel is cut into polls of at most
:data:`POLL_SLICE_S`, each of which checks the socket again, so a missed wake-up costs a second, not the
cell's whole timeout; a reply that never comes still times out when ``timeout`` says.
"""
from __future__ import annotations

import time
from pathlib import Path
from queue import Empty

POLL_SLICE_S = 1.0
"""Longest single wait on the kernel's shell channel, in seconds."""


def in_slices(get_msg, slice_s: float = POLL_SLICE_S):
    """``get_msg`` (a channel's ``async get_msg(timeout=...)``) waiting at most ``slice_s`` seconds per poll
    and polling again until its own ``timeout`` (seconds; None: forever) has passed, then raising ``Empty``."""
    async def get_msg_in_slices(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            try:
                return await get_msg(timeout=slice_s if left is None else max(0.0, min(slice_s, left)))
            except Empty:
                if left is not None and left <= slice_s:
                    raise
    return get_msg_in_slices


def notebook_client(nb, path: Path, timeout: int = 600):
    """nbclient's ``NotebookClient`` for notebook ``nb`` (read from ``path``, run in its folder) with a
    per-cell ``timeout`` in seconds, its shell channel read :func:`in_slices`."""
    from nbclient import NotebookClient  # imported here: most test files never run a notebook

    class SlicedPolls(NotebookClient):
        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            kc.shell_channel.get_msg = in_slices(kc.shell_channel.get_msg)
            return kc

    return SlicedPolls(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
