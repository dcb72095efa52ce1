"""Only formgrader's pages of the instructor's server may be framed, and only by pages of the same site.

JupyterLab opens formgrader (the Nbgrader menu) in a frame of the lab page, and every page formgrader shows
in that frame is under ``<base_url>formgrader`` (its links to notebooks and folders message the lab instead of
navigating the frame). The server's own setting (``instructor/jupyter_server_config.py``) lets nothing frame
any page, JupyterHub's default; this server extension answers formgrader's responses alone with
``frame-ancestors 'self'``. 'self' is already the narrowest value that lets the lab frame it: CSP compares a
framing page by its origin only (a source with a path never matches), and the lab page is on the hub's origin.
"""
from __future__ import annotations

from tornado.web import OutputTransform

NONE = "frame-ancestors 'none'"
SELF = "frame-ancestors 'self'"


def framable(path: str, base_url: str) -> bool:
    """Whether the request path ``path`` is one of formgrader's pages under the server's ``base_url`` (empty
    segments skipped: formgrader's own redirect goes to ``<base_url>/formgrader/...``, with two slashes)."""
    base = base_url.rstrip("/")
    rest = path[len(base):] if path.startswith(base + "/") else ""
    return [part for part in rest.split("/") if part][:1] == ["formgrader"]


def transform_for(base_url: str) -> type[OutputTransform]:
    """A Tornado output transform that gives formgrader's responses :data:`SELF` as their CSP."""

    class FormgraderFrames(OutputTransform):
        def __init__(self, request):
            super().__init__(request)
            self.framable = framable(request.path, base_url)

        def transform_first_chunk(self, status_code, headers, chunk, finishing):
            if self.framable:
                headers["Content-Security-Policy"] = SELF
            return status_code, headers, chunk
    return FormgraderFrames


def _jupyter_server_extension_points():
    return [{"module": "pagedkv_frames"}]


def _load_jupyter_server_extension(serverapp):
    serverapp.web_app.add_transform(transform_for(serverapp.base_url))
