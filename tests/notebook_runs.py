"""Running a notebook in a fresh kernel for a test, with the kernel's replies read in slices of a second.

A cell's execute reply has been seen to sit unread in the test process's shell socket while nbclient waited
for it: 1 of 78 lesson runs under ``make test-colab`` (2026-12-04; the kernel had run the cell and answered a
new connection at once), and CI's ``make test`` on 2026-12-06, where lesson 04 with every gate committed took
627 s against 27 s for lesson 03. pyzmq's poll did not wake when the reply came; its check when the cell's
``timeout`` ran out (600 s) found it. Here every wait on the shell channel is cut into polls of at most
:data:`POLL_SLICE_S`, each of which checks the socket again, so a missed wake-up costs a second, not the
cell's whole timeout; a reply that never comes still times out when ``timeout`` says.

Each kernel listens on Unix sockets in a folder of its own (:class:`UnixSocketKernel`), not on TCP ports.
jupyter_client chooses a TCP port by binding port 0 and closing it; the kernel binds the port a moment later,
and in between another process may take it. With two test workers starting kernels, CI's ``make test`` lost
one lesson run that way on 2026-12-07 ("Address already in use", "Kernel died before replying to kernel_info").
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from queue import Empty

from jupyter_client.manager import AsyncKernelManager

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


SHORT_TMP = "/tmp" if Path("/tmp").is_dir() else None
"""Where sockets' folders go: a Unix socket's path holds at most 107 bytes (103 on macOS, whose own
temporary folder is long); None: the system's temporary folder."""


def socket_folder(prefix: str) -> Path:
    """A fresh folder (mode 700) with a short path, for a kernel's or a server's Unix sockets."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SHORT_TMP))


def unix_sockets(folder: Path) -> dict:
    """A kernel manager's settings that put its kernel's five sockets (``ipc-1`` .. ``ipc-5``) and its
    connection file in ``folder``, instead of TCP ports."""
    return {"transport": "ipc", "ip": str(folder / "ipc"), "connection_file": str(folder / "kernel.json")}


class UnixSocketKernel(AsyncKernelManager):
    """A kernel manager whose kernel listens on Unix sockets in a fresh private folder (:func:`unix_sockets`),
    removed with the kernel: no port to choose, so none another process can take first."""

    def __init__(self, **kwargs):
        self.sockets = socket_folder("pkv-kernel-")
        super().__init__(**kwargs, **unix_sockets(self.sockets))

    async def cleanup_resources(self, restart: bool = False) -> None:
        """What nbclient calls after a shutdown, and jupyter_client 7's shutdown (``AsyncKernelManager`` binds
        it to the base class's code); jupyter_client 8's shutdown calls :meth:`_async_cleanup_resources`."""
        await self._async_cleanup_resources(restart=restart)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self.sockets, ignore_errors=True)


def notebook_client(nb, path: Path, timeout: int = 600):
    """nbclient's ``NotebookClient`` for notebook ``nb`` (read from ``path``, run in its folder) with a
    per-cell ``timeout`` in seconds, its kernel a :class:`UnixSocketKernel`, its shell channel read
    :func:`in_slices`."""
    from nbclient import NotebookClient  # imported here: most test files never run a notebook

    class SlicedPolls(NotebookClient):
        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            kc.shell_channel.get_msg = in_slices(kc.shell_channel.get_msg)
            return kc

    return SlicedPolls(nb, timeout=timeout, kernel_name="python3", kernel_manager_class=UnixSocketKernel,
                       resources={"metadata": {"path": str(path.parent)}})
