"""Serving the course for the browser tests: the way a learner (or the instructor) gets it, and a real browser to open it.

``make lab`` runs from a clean copy of the repository (tracked files plus untracked ones git does not
ignore), on a free loopback port, with a fresh token. The server is stopped by its own process id
when the session ends, pass or fail. A free port is only free when it is chosen: a server that finds it
taken exits and is started again on another (:data:`PORT_TRIES`), and its kernels listen on Unix sockets
(:data:`SERVER_CONFIG`), as the other tests' kernels do (``tests/notebook_runs.py``). The browser is
Debian's chromium driven by Playwright; nothing here downloads a browser. Without chromium or Playwright
the tests skip and say how to enable them; with ``CI`` set they fail instead, so CI can never pass without
having looked.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from notebook_runs import socket_folder

REPO = Path(__file__).resolve().parents[2]

CHROMIUM = os.environ.get("PAGEDKV_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "artifacts" / "browser"
WINDOW = {"width": 1280, "height": 800}
WAIT_MS = 300_000
"""Ceiling of one wait on a page's state (ms). Waits end as soon as the state holds; the ceiling only says when
to give up, and is generous: under load (two cores busy) a kernel's first output took over 60 s."""
WAIT_S = WAIT_MS / 1000
SERVER_CONFIG = {"ServerApp": {"port_retries": 0},   # a taken port: exit and say so, not serve on another
                 # the kernels the servers start for notebooks (Jupyter Server's class and notebook 6's two)
                 # put their sockets in the runtime folder; other kernel managers keep their own settings
                 **{name: {"transport": "ipc"} for name in ("AsyncIOLoopKernelManager", "IOLoopKernelManager")}}
"""What every test server reads from its own Jupyter configuration folder (the classic notebook's port
setting is on its command line, :mod:`.classic`)."""
PORT_TRIES = 3
"""How many ports a server is started on before a test gives up."""
TAKEN = "is already in use"
"""What Jupyter Server and the classic notebook print when the port they were given is taken (and only then)."""
ENABLE = ("install Debian's chromium (`sudo apt-get install chromium`) and Playwright for Python "
          "(`make setup` installs it with the `browser` extra); never `playwright install`")


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM}"
    return None


def require_browser() -> None:
    """Skip (locally) or fail (with ``CI`` set) when the browser tests cannot run here."""
    why = _missing()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but the browser tests cannot run: {why}; {ENABLE}", pytrace=False)
    pytest.skip(f"browser tests: {why}; to enable them, {ENABLE} (with CI set, this skip is a failure)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_copy(dest: Path) -> Path:
    """Copy what a fresh clone plus uncommitted work holds: no outputs, venv, gradebook or caches."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@dataclass
class Server:
    """A running ``make lab`` or ``make instructor``: where it listens and how to reach it."""
    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    log: Path
    runtime: Path   # its Jupyter runtime folder: connection files and kernels' sockets, removed by :func:`stop`

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}{sep}token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def sessions(self) -> list[dict]:
        """The server's kernel sessions (its REST API's ``api/sessions``)."""
        return self.api("api/sessions")

    def close_sessions(self) -> None:
        """Shut every kernel session down, so that the next notebook opens in a fresh kernel."""
        for session in self.sessions():
            self.api(f"api/sessions/{session['id']}", method="DELETE")


def start(target: str, root: Path, log: Path, timeout: float = WAIT_S) -> Server:
    """Run ``make <target>`` in ``root`` with the repository's .venv, until its API answers."""
    venv = root / ".venv"
    if not venv.exists():
        venv.symlink_to(REPO / ".venv")
    # -o: the venv is set up already (a fresh copy's newer pyproject.toml must not reinstall it)
    return launch(lambda port: ["make", "-o", ".venv/.installed", target, f"PORT={port}"], root, log, timeout)


def launch(command, root: Path, log: Path, timeout: float = WAIT_S) -> Server:
    """Run ``command(port)`` in ``root`` with a fresh token, in a session of its own, until it answers; on a
    port that another process took after :func:`free_port` chose it, again on a new one. Each try's output
    goes to ``log``, after a line that names the try and its port."""
    config = root / ".jupyter-user"   # the user's own Jupyter settings and saved workspaces stay out of it
    config.mkdir(exist_ok=True)
    for name in ("jupyter_server_config.json", "jupyter_notebook_config.json"):
        (config / name).write_text(json.dumps(SERVER_CONFIG))
    log.write_text("")
    for attempt in range(1, PORT_TRIES + 1):
        server = _launch_once(command, root, log, timeout, config, f"try {attempt} of {PORT_TRIES}")
        if server is not None:
            return server
    raise RuntimeError(f"{command('N')}: each of {PORT_TRIES} ports was taken before the server bound it:\n"
                       f"{log.read_text()[-3000:]}")


def _launch_once(command, root: Path, log: Path, timeout: float, config: Path, name: str) -> Server | None:
    """One try of :func:`launch`: the server once it answers, or None where its port was taken; a server
    that fails otherwise raises. Either way a server that does not answer is stopped, its runtime folder
    removed."""
    port, token = free_port(), secrets.token_hex(16)
    runtime = socket_folder("pkv-rt-")   # connection files and kernels' sockets
    env = dict(os.environ, JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_CONFIG_DIR=str(config),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"))
    with open(log, "a") as out:
        out.write(f"--- {name}: port {port}\n")
        out.flush()
        start = out.tell()
        proc = subprocess.Popen(command(port), cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = Server(root, port, token, proc, log, runtime)

    def printed() -> str:
        """This try's output so far."""
        return log.read_bytes()[start:].decode(errors="replace")

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                if TAKEN in printed():
                    stop(server)
                    return None
                raise RuntimeError(f"{command(port)} exited with {proc.returncode}:\n{printed()[-3000:]}")
            try:
                server.api("api/status")
                return server
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"{command(port)} did not answer on port {port} within {timeout:.0f} s:\n"
                           f"{printed()[-3000:]}")
    except BaseException:
        stop(server)
        raise


def stop(server: Server) -> None:
    """Shut the kernels down through the API, then stop make and its server by make's own pid (their process
    group), and remove the server's runtime folder once no process of the group is left."""
    try:
        if server.proc.poll() is None:   # make waits for its server: once make is gone, the API is too
            for kernel in server.api("api/kernels"):
                server.api(f"api/kernels/{kernel['id']}", method="DELETE")
    except OSError:
        pass
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.proc.pid, sig)   # the group make leads (start_new_session)
        except ProcessLookupError:
            break
        if _group_ends(server.proc, wait_s):
            break
    server.proc.wait(timeout=10)
    shutil.rmtree(server.runtime, ignore_errors=True)


def _group_ends(proc: subprocess.Popen, wait_s: float) -> bool:
    """True once no process is left in the group that ``proc`` leads (``proc`` reaped), within ``wait_s`` s."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
