"""The browser tests' `make lab` survives a port taken between choosing and binding it; its kernels use no port."""
from __future__ import annotations

import json
import socket
import stat
import time

import pytest

from . import browser_server

pytestmark = [pytest.mark.slow]


def test_a_taken_port_is_tried_again_elsewhere_and_the_kernels_listen_on_unix_sockets(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()   # another process's server, on the port free_port is about to name
    ports, free_port = iter([taken.getsockname()[1]]), browser_server.free_port
    monkeypatch.setattr(browser_server, "free_port", lambda: next(ports, None) or free_port())
    root = browser_server.clean_copy(tmp_path / "course")
    server = browser_server.start("lab", root, tmp_path / "make-lab.log")   # the learner's server, as the tests use it
    try:
        assert server.port != taken.getsockname()[1]
        assert server.api("api/status") is not None
        kernel = server.api("api/kernels", method="POST")["id"]
        info = json.loads((server.runtime / f"kernel-{kernel}.json").read_text())
        assert info["transport"] == "ipc" and info["ip"].startswith(str(server.runtime))
        deadline = time.monotonic() + 120
        while len(sockets := list(server.runtime.glob(f"kernel-{kernel}-ipc-*"))) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)   # the kernel makes its five sockets as it starts
        assert len(sockets) == 5 and all(stat.S_ISSOCK(p.stat().st_mode) for p in sockets), sockets
    finally:
        browser_server.stop(server)
        taken.close()
    assert not server.runtime.exists()

