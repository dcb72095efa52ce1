"""Which of the instructor's pages may be framed, as a real Jupyter server on loopback answers with the hub's
instructor configuration (hub/singleuser): formgrader's pages by pages of the same site, every other page by
none. That the lab's frame then shows formgrader is seen in chromium in tests/browser/test_hub_journey.py."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SINGLEUSER = Path(__file__).resolve().parents[2] / "hub" / "singleuser"
BIN = Path(sys.executable).parent
BASE, TOKEN = "/user/instructor/", "frames-test-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The instructor's Jupyter server, as the hub starts it but without the hub: its URL prefix."""
    where = tmp_path_factory.mktemp("instructor")
    for name in ("course", "exchange", "home"):
        (where / name).mkdir()
    env = dict(os.environ, HOME=str(where / "home"), PAGEDKV_COURSE=str(where / "course"),
               PAGEDKV_EXCHANGE=str(where / "exchange"), PATH=f"{BIN}:/usr/bin:/bin",
               JUPYTER_CONFIG_PATH=f"{SINGLEUSER / 'instructor'}:{SINGLEUSER / 'common'}",
               PYTHONPATH=str(SINGLEUSER / "python"))
    port = _free_port()
    proc = subprocess.Popen([str(BIN / "jupyter"), "server", "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.base_url={BASE}",
                             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={where / 'course'}",
                             *(["--allow-root"] if os.geteuid() == 0 else [])],
                            cwd=where / "course", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}{BASE}"
    try:
        for _ in range(240):
            if proc.poll() is not None:
                pytest.fail(f"the server ended: {proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}api/status?token={TOKEN}", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        else:
            pytest.fail("the server did not answer in 120 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _csp(url: str) -> str:
    """The policy of the page ``url`` ends at, redirects followed with the login cookie, as a browser does."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    try:
        answer = browser.open(url, timeout=60)
    except urllib.error.HTTPError as err:   # a refusal carries the header too
        answer = err
    assert "/login" not in answer.url, answer.url
    return answer.headers["Content-Security-Policy"]


@pytest.mark.parametrize("page", ["formgrader", "formgrader/manage_assignments", "/formgrader/manage_students"])
def test_formgraders_pages_may_be_framed_by_the_same_site(server, page):
    assert _csp(f"{server}{page}?token={TOKEN}") == "frame-ancestors 'self'"


@pytest.mark.parametrize("page", ["lab", "tree", "api/contents", "formgraderx", "files/x.html"])
def test_no_other_page_may_be_framed(server, page):
    policy = _csp(f"{server}{page}?token={TOKEN}")
    assert "frame-ancestors 'none'" in policy.split("; "), policy
