"""Formgrader's links to folders and notebooks, under the instructor's own server on the hub.

Opened in a tab of its own, formgrader (nbgrader 0.9) links an assignment's name and its Preview to
``/tree/<path>``: the root of the site, which on a hub is the hub, not the instructor's server
(``/user/<name>/``), so both gave 404. In JupyterLab's frame it sends the lab a message instead, which
works. This server extension, enabled for instructors only (``instructor/jupyter_server_config.py``), loads
after nbgrader's (extensions load in the order of their names) and has formgrader's page template define,
after nbgrader's own ``linkTo``, one that puts the server's ``base_url`` before those paths; in a frame it
calls nbgrader's unchanged.
"""
from __future__ import annotations

from jinja2 import BaseLoader

UTILS = '<script src="{{ base_url }}/formgrader/static/js/utils.js"></script>'
"""The line of formgrader's ``base.tpl`` that loads ``linkTo``; the override goes right after it."""
OVERRIDE = """
<script>
(function (framed) {
  var base = {{ base_url | tojson }}.replace(/\\/$/, "");
  var prefix = {notebook: "/notebooks/", file: "/edit/", directory: "/tree/"};
  linkTo = function (type, path) {
    if (window !== window.top) { return framed(type, path); }
    return function (_, el) {
      return $(el).attr("href", base + prefix[type] + path).attr("target", "_blank")[0];
    };
  };
})(linkTo);
</script>"""


class ServerLinks(BaseLoader):
    """Formgrader's templates as nbgrader's loader gives them, ``base.tpl`` with :data:`OVERRIDE` added."""

    def __init__(self, loader: BaseLoader):
        self.loader = loader

    def get_source(self, environment, template):
        source, filename, uptodate = self.loader.get_source(environment, template)
        if template == "base.tpl":
            if UTILS not in source:
                raise RuntimeError(f"formgrader's {filename} no longer loads utils.js as {UTILS!r}: "
                                   "its links cannot be put under this server")
            source = source.replace(UTILS, UTILS + OVERRIDE, 1)
        return source, filename, uptodate


def _jupyter_server_extension_points():
    return [{"module": "pagedkv_formgrader_links"}]


def _load_jupyter_server_extension(serverapp):
    env = serverapp.web_app.settings.get("nbgrader_jinja2_env")
    if env is None:
        serverapp.log.warning("pagedkv_formgrader_links: formgrader is not loaded; its links are left as they are")
        return
    env.loader = ServerLinks(env.loader)
    if env.cache is not None:
        env.cache.clear()
