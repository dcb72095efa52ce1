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
    server = browser_server.start("lab", root, tmp_path / "make-lab.log", timeout=120)   # as the tests start it
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



def tries(monkeypatch, tmp_path, command) -> tuple[list[int], list, Exception | None]:
    """Run :func:`browser_server.launch` on ``command``: the ports it tried, its runtime folders, what it raised."""
    ports, folders = [], []
    monkeypatch.setattr(browser_server, "free_port", lambda: ports.append(40000 + len(ports)) or ports[-1])
    make_folder = browser_server.socket_folder
    monkeypatch.setattr(browser_server, "socket_folder",
                        lambda prefix: folders.append(make_folder(prefix)) or folders[-1])
    try:
        browser_server.launch(command, tmp_path, tmp_path / "server.log", timeout=30)
    except RuntimeError as e:
        return ports, folders, e
    return ports, folders, None


def test_a_server_that_fails_for_another_reason_is_not_tried_again(tmp_path, monkeypatch):
    ports, folders, error = tries(monkeypatch, tmp_path, lambda port: ["sh", "-c", "echo boom; exit 3"])
    assert ports == [40000] and "exited with 3" in str(error) and "boom" in str(error)
    assert folders and not any(f.exists() for f in folders)


def test_a_taken_port_is_tried_again_at_most_port_tries_times_and_every_try_is_logged(tmp_path, monkeypatch):
    ports, folders, error = tries(monkeypatch, tmp_path,
                                  lambda port: ["sh", "-c", f"echo 'The port {port} is already in use.'; exit 1"])
    assert len(ports) == browser_server.PORT_TRIES == len(folders) and error is not None
    assert not any(f.exists() for f in folders)
    log = (tmp_path / "server.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("--- try")] == [
        f"--- try {i + 1} of {len(ports)}: port {port}" for i, port in enumerate(ports)]
