"""Formgrader's page, as the instructor's server renders it on the hub, links under that server.

nbgrader's own templates are rendered through ``pagedkv_formgrader_links.ServerLinks``; the hub journey
(``tests/browser/test_hub_journey.py``) follows the links on a real hub and gets 200.
"""
import sys
from pathlib import Path

import pytest
from jinja2 import DictLoader, Environment, FileSystemLoader
from nbgrader.server_extensions.formgrader import handlers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hub" / "singleuser" / "python"))
from pagedkv_formgrader_links import ServerLinks  # noqa: E402


def render(loader, base_url: str) -> str:
    env = Environment(loader=loader)
    return env.get_template("manage_assignments.tpl").render(
        base_url=base_url, url_prefix=".", windows=False, course_id="pagedkv", exchange="", exchange_missing=False,
        current_config={}, default_timezone="", nbgrader_version="")


def test_the_page_defines_a_link_maker_under_the_servers_base_url_after_nbgraders():
    page = render(ServerLinks(FileSystemLoader([handlers.template_path])), "/user/pkv-instructor/")
    utils = page.index("/user/pkv-instructor//formgrader/static/js/utils.js")
    override = page.index("linkTo = function (type, path)")
    assert utils < override < page.index("manage_assignments.js")
    assert 'var base = "/user/pkv-instructor/".replace(' in page   # the trailing slash is dropped in the script
    assert "linkTo = function" not in render(FileSystemLoader([handlers.template_path]), "/user/pkv-instructor")


def test_a_changed_template_is_refused_not_left_linking_to_the_hub():
    loader = ServerLinks(DictLoader({"base.tpl": "<script src='elsewhere/utils.js'></script>"}))
    with pytest.raises(RuntimeError, match="no longer loads utils.js"):
        Environment(loader=loader).get_template("base.tpl")
