"""hub/'s files that cannot run here: the Zero to JupyterHub values, the single-user image; and the roster.

Kubernetes and helm are not on this machine, so the values file is checked as YAML (yamllint) and
against the keys the chart documents, the two Dockerfiles with hadolint, the pre-spawn hook with a
stand-in spawner; none of it runs on a cluster. The one-server
hub itself runs in tests/browser/test_hub_journey.py.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HUB = REPO / "hub"
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HUB))
from accounts import read_roster  # noqa: E402  (hub/ is not a package)

# The Zero to JupyterHub keys hub/k8s/values.yaml uses, with the types the chart documents for them:
# its configuration reference (https://z2jh.jupyter.org/en/stable/resources/reference.html), generated
# from jupyterhub/values.schema.yaml in github.com/jupyterhub/zero-to-jupyterhub-k8s (read at 48ea50e,
# 2026-07-24, chart for JupyterHub 5.5). "open" marks a key whose content the chart passes through:
# hub.config (JupyterHub traitlets), hub.services.<name>, hub.extraConfig.<name> (Python source).
DOCUMENTED = {
    "hub": dict, "hub.config": "open", "hub.services": dict, "hub.services.*": "open",
    "hub.extraConfig": dict, "hub.extraConfig.*": str,
    "singleuser": dict, "singleuser.image": dict, "singleuser.image.name": str, "singleuser.image.tag": str,
    "singleuser.cmd": (list, str), "singleuser.defaultUrl": str, "singleuser.uid": int,
    "singleuser.cpu": dict, "singleuser.cpu.limit": (int, float), "singleuser.cpu.guarantee": (int, float),
    "singleuser.memory": dict, "singleuser.memory.limit": str, "singleuser.memory.guarantee": str,
    "singleuser.storage": dict, "singleuser.storage.type": str, "singleuser.storage.capacity": str,
    "singleuser.storage.homeMountPath": str,
    "cull": dict, "cull.enabled": bool, "cull.timeout": int,
}
STORAGE_TYPES = {"dynamic", "static", "none"}   # singleuser.storage.type's documented values


def _documented(path: tuple):
    """What the chart documents for ``path`` (a tuple of keys; a key may hold a dot), or None."""
    return DOCUMENTED.get(".".join(path), DOCUMENTED.get(".".join(path[:-1]) + ".*"))


def _paths(tree: dict, prefix: tuple = ()):
    """Every (path, value) in a nested mapping, parents before children; not below an open or text key."""
    for key, value in tree.items():
        path = (*prefix, key)
        yield path, value
        if isinstance(value, dict) and _documented(path) not in ("open", str):
            yield from _paths(value, path)


@pytest.fixture(scope="module")
def values() -> dict:
    import yaml
    return yaml.safe_load((HUB / "k8s" / "values.yaml").read_text())


def test_the_values_file_passes_yamllint():
    config = "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}"
    proc = subprocess.run([str(BIN / "yamllint"), "--strict", "-d", config, str(HUB / "k8s" / "values.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_key_of_the_values_file_is_one_the_chart_documents_with_its_type(values):
    seen = set()
    for path, value in _paths(values):
        kind = _documented(path)
        assert kind is not None, f"{'.'.join(path)} is not a key the Zero to JupyterHub chart documents (or not listed here)"
        if kind != "open":
            assert isinstance(value, kind), f"{'.'.join(path)}: the chart documents {kind}, got {type(value).__name__}"
        seen.add(".".join(path))
    assert values["singleuser"]["storage"]["type"] in STORAGE_TYPES
    assert {"hub.config", "hub.services.ngshare", "singleuser.image.name"} <= seen


def test_the_values_file_authorises_the_roster_and_its_hook_is_python(values):
    ids = {m.id for m in read_roster(HUB / "roster.csv")}
    auth = values["hub"]["config"]["Authenticator"]
    assert set(auth["allowed_users"]) == ids
    assert "admin_users" not in auth, "admin_users only adds: an instructor once listed stays admin"
    hub = values["hub"]["config"]["JupyterHub"]
    assert hub["load_roles"] == [{"name": "admin", "users": []}] and hub["admin_access"] is False
    for name, source in values["hub"]["extraConfig"].items():
        compile(source, name, "exec")


@pytest.mark.parametrize("image", ["learner.Dockerfile", "instructor.Dockerfile"])
def test_the_single_user_images_pass_hadolint(image):
    proc = subprocess.run([str(BIN / "hadolint"), str(HUB / "k8s" / image)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


class _Spawner:
    """What the pre-spawn hook touches of KubeSpawner: the user's name, the image, the environment, args."""

    def __init__(self, name: str, image: str):
        self.user = type("User", (), {"name": name})()
        self.image, self.environment, self.args, self.notebook_dir = image, {}, [], None


def test_the_hook_gives_instructors_their_image_and_learners_the_charts_learner_image(values):
    """Learners' pods run the learner release's image (no solutions); only the roster's instructors get theirs."""
    config = type("Config", (), {"KubeSpawner": type("KubeSpawner", (), {})()})()
    for name, source in values["hub"]["extraConfig"].items():
        exec(compile(source, name, "exec"), {"c": config})   # as the chart's hub runs it: one namespace
    hook = config.KubeSpawner.pre_spawn_hook
    default = f"{values['singleuser']['image']['name']}:{values['singleuser']['image']['tag']}"
    assert "learner" in default
    instructors = {m.id for m in read_roster(HUB / "roster.csv") if m.role == "instructor"}
    for member in read_roster(HUB / "roster.csv"):
        spawner = _Spawner(member.id, default)
        hook(spawner)
        if member.id in instructors:
            assert spawner.image != default and "instructor" in spawner.image
            assert spawner.environment["PAGEDKV_ROLE"] == "instructor"
        else:
            assert spawner.image == default, f"{member.id} would run {spawner.image}"
            assert spawner.environment["PAGEDKV_ROLE"] == "learner"
            assert "formgrader': False" in " ".join(spawner.args)


def test_the_image_start_script_is_valid_sh():
    subprocess.run(["sh", "-n", str(HUB / "k8s" / "start-singleuser.sh")], check=True)
    assert os.access(HUB / "k8s" / "start-singleuser.sh", os.X_OK)


def test_the_proxy_is_locked_to_the_version_package_json_names():
    want = json.loads((HUB / "package.json").read_text())["dependencies"]["configurable-http-proxy"]
    lock = json.loads((HUB / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/configurable-http-proxy"]["version"] == want


def test_the_learner_config_turns_off_plugins_the_nbgrader_extension_has():
    disabled = json.loads((HUB / "singleuser" / "learner" / "labconfig" / "page_config.json").read_text())
    bundle = "".join(p.read_text(errors="replace") for p in
                     (BIN.parent / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader").rglob("*.js"))
    for plugin in disabled["disabledExtensions"]:
        assert f'"{plugin}"' in bundle or f"'{plugin}'" in bundle, f"no plugin {plugin} in nbgrader's lab extension"


def test_jupyterhub_loads_the_config_with_the_roster(tmp_path):
    env = dict(os.environ, PAGEDKV_ROSTER=str(HUB / "roster.csv"), PAGEDKV_HUB_STATE=str(tmp_path),
               PAGEDKV_EXCHANGE=str(tmp_path / "exchange"), PAGEDKV_HUB_PORT="18000")
    proc = subprocess.run([str(BIN / "jupyterhub"), "-f", str(HUB / "jupyterhub_config.py"), "--show-config-json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads(proc.stdout)   # sets come as their repr
    assert config["JupyterHub"]["bind_url"] == "http://127.0.0.1:18000"
    assert ast.literal_eval(config["Authenticator"]["allowed_users"]) == {"instructor", "learner1", "learner2"}
    assert config["JupyterHub"]["load_roles"] == [{"name": "admin", "users": []}], "no instructor may open learners' servers"
    assert config["JupyterHub"]["admin_access"] is False
    codes = (tmp_path / "signup-codes.csv").read_text().splitlines()
    assert len(codes) == 4 and (tmp_path / "signup-codes.csv").stat().st_mode & 0o077 == 0, codes
    assert "instructor " + codes[1].split(",")[-1] in proc.stderr   # the instructor's code, for the operator only
    env["PAGEDKV_HUB_ADMINS"] = "1"   # the operator's choice
    proc = subprocess.run([str(BIN / "jupyterhub"), "-f", str(HUB / "jupyterhub_config.py"), "--show-config-json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    config = json.loads(proc.stdout)
    assert config["JupyterHub"]["load_roles"] == [{"name": "admin", "users": ["instructor"]}]
    assert config["JupyterHub"]["admin_access"] is True
    assert config["ConfigurableHTTPProxy"]["command"][0].endswith("hub/node_modules/.bin/configurable-http-proxy")


@pytest.mark.parametrize("text, message", [
    ("id,role\nann,learner\n", "no name"),
    ("id,role,name\nann,teacher,Ann\n", "role must be one of"),
    ("id,role,name\nAnn Lee,learner,Ann\n", "lower-case system user name"),
    ("id,role,name\nann,instructor,Ann\nann,learner,Ann\n", "appears twice"),
    ("id,role,name\nann,learner,Ann\n", "no row with role instructor"),
])
def test_a_bad_roster_is_refused_naming_the_line_and_the_value(tmp_path, text, message):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_roster(path)


def test_each_learners_server_gets_their_own_variant_key_from_the_course_secret(tmp_path, monkeypatch):
    import runpy
    from types import SimpleNamespace
    from traitlets.config import Config
    from pagedkv_lib.course.instructor.intake.variant_keys import key_for, write_keys
    course = tmp_path / "course"
    course.mkdir()
    monkeypatch.setenv("PAGEDKV_ROSTER", str(HUB / "roster.csv"))
    monkeypatch.setenv("PAGEDKV_COURSE", str(course))
    monkeypatch.setenv("PAGEDKV_HUB_STATE", str(tmp_path))
    hub = runpy.run_path(str(HUB / "jupyterhub_config.py"), init_globals={"get_config": Config})

    def spawn(user):
        spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment={}, notebook_dir="", args=[])
        hub["role_settings"](spawner)
        return spawner.environment

    assert spawn("learner1")["PAGEDKV_VARIANT_KEY"] == "", "no secret yet: the practice numbers"
    write_keys(course, ["learner1", "learner2"])
    one, two = spawn("learner1")["PAGEDKV_VARIANT_KEY"], spawn("learner2")["PAGEDKV_VARIANT_KEY"]
    assert one == key_for(course, "learner1") and two == key_for(course, "learner2") and one != two
    assert "PAGEDKV_VARIANT_KEY" not in spawn("instructor")


def test_learners_run_the_runtime_and_the_instructor_their_course_copy_never_this_checkout(tmp_path, monkeypatch):
    import runpy
    from types import SimpleNamespace
    from traitlets.config import Config
    monkeypatch.setenv("PAGEDKV_ROSTER", str(HUB / "roster.csv"))
    monkeypatch.setenv("PAGEDKV_COURSE", str(tmp_path / "course"))
    monkeypatch.setenv("PAGEDKV_RUNTIME", str(tmp_path / "runtime"))
    monkeypatch.setenv("PAGEDKV_HUB_STATE", str(tmp_path))
    hub = runpy.run_path(str(HUB / "jupyterhub_config.py"), init_globals={"get_config": Config})
    spawned = {}
    for user in ("learner1", "instructor"):
        spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment={}, notebook_dir="", args=[], cmd=[])
        hub["role_settings"](spawner)
        spawned[user] = spawner
    learner, teacher = spawned["learner1"], spawned["instructor"]
    assert learner.cmd == [str(tmp_path / "runtime" / "venv" / "bin" / "jupyterhub-singleuser")]
    assert teacher.cmd == [str(tmp_path / "course" / ".venv" / "bin" / "jupyterhub-singleuser")]
    for spawner in (learner, teacher):
        every_path = " ".join([*spawner.cmd, *spawner.environment.values()])
        assert str(REPO) not in every_path, spawner.environment
        assert spawner.environment["JUPYTER_CONFIG_PATH"].startswith(str(tmp_path / "runtime" / "singleuser"))


def test_sign_up_tells_a_roster_id_it_can_log_in_and_any_other_name_that_it_cannot():
    from types import SimpleNamespace
    from roster_signup import NOT_ON_ROSTER, ON_ROSTER, RosterSignUpHandler
    handler = object.__new__(RosterSignUpHandler)
    handler.application = SimpleNamespace(settings={"authenticator": SimpleNamespace(
        open_signup=False, minimum_password_length=10)})
    said = lambda user, **kw: handler.get_result_message(user, kw.get("human", True), kw.get("taken", False),
                                                         kw.get("confirmed", True), False)
    assert said(SimpleNamespace(is_authorized=True, login_email_sent=False)) == ("alert-success", ON_ROSTER)
    assert said(SimpleNamespace(is_authorized=False, login_email_sent=False)) == ("alert-warning", NOT_ON_ROSTER)
    assert said(None, taken=True)[0] == "alert-danger" and "already in use" in said(None, taken=True)[1]
    assert said(None)[0] == "alert-danger" and "at least 10" in said(None)[1]


def test_a_folder_others_cannot_search_is_the_one_named():
    import shutil
    import tempfile
    from runtimes import _unsearchable
    tmp_path = Path(tempfile.mkdtemp())   # not under pytest's own tmp folder, which others cannot search
    try:
        _check_unsearchable(tmp_path, _unsearchable)
    finally:
        shutil.rmtree(tmp_path)


def _check_unsearchable(tmp_path, _unsearchable):
    (tmp_path / "private" / "python" / "bin").mkdir(parents=True)
    (tmp_path / "private" / "python" / "bin" / "python3").write_text("")
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "private", 0o700)
    assert _unsearchable(tmp_path / "private" / "python" / "bin" / "python3") == tmp_path / "private"
    os.chmod(tmp_path / "private", 0o711)
    (tmp_path / "private" / "python" / "bin" / "python3").chmod(0o750)
    assert _unsearchable(tmp_path / "private" / "python" / "bin" / "python3") == (
        tmp_path / "private" / "python" / "bin" / "python3")


def test_the_report_counts_the_predictions_of_lessons_handed_in_on_the_hub_without_names(tmp_path):
    from pagedkv_lib.course.instructor.reporting.prediction_report import LESSONS_HANDED_IN, prediction_section
    lesson = json.loads((REPO / "notebooks" / "01_intuition.ipynb").read_text())
    record = {"v": 1, "gate": "q-waste", "notebook": "01_intuition", "kind": "choice", "value": "the reserved tail",
              "right": None, "misconception": None, "time": "2026-12-03T12:00:00+00:00"}
    lesson["cells"][0]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                      "data": {"application/vnd.pagedkv.prediction+json": record}}]
    for student in ("ann", "bob"):
        where = tmp_path / LESSONS_HANDED_IN / student / "lessons"
        where.mkdir(parents=True)
        (where / "01_intuition.ipynb").write_text(json.dumps(lesson))
    lines = "\n".join(prediction_section(tmp_path, tmp_path / "report"))
    assert "2 committed predictions from 2 learners" in lines and "### q-waste (lessons)" in lines, lines
    assert "ann" not in lines and "bob" not in lines
    assert "ann" in "\n".join(prediction_section(tmp_path, tmp_path / "report", names=True))


def test_the_signup_secret_reaches_the_authenticator_from_the_config():
    """Sign-up compares the typed code with one made from the secret jupyterhub_config.py sets: a trait that
    config cannot set leaves it empty, and every right code is refused (found in the hub journey)."""
    from roster_signup import RosterAuthenticator
    assert "signup_secret" in RosterAuthenticator.class_own_traits(config=True)


def test_sign_up_pages_render_sync_for_error_pages_and_async_for_the_form(monkeypatch):
    """JupyterHub's error pages call ``render_template(..., sync=True)`` and write the string: an ``async``
    override handed them a coroutine, so every error on /hub/signup (a 403, 404 or 500) was a broken page."""
    from nativeauthenticator.handlers import SignUpHandler
    from roster_signup import CODE_FIELD, RosterSignUpHandler
    page = '<form><label for="password_input">Password</label></form>'

    def rendered(self, name, sync=False, **ns):
        async def later():
            return page
        return page if sync else later()
    monkeypatch.setattr(SignUpHandler, "render_template", rendered)
    handler = object.__new__(RosterSignUpHandler)
    assert handler.render_template("error.html", sync=True) == page
    assert CODE_FIELD in handler.render_template("signup.html", sync=True)
    assert CODE_FIELD in _finished(handler.render_template("signup.html"))
    assert _finished(handler.render_template("error.html")) == page


def _finished(coroutine):
    """The value of a coroutine that never suspends, without an event loop (another test's may be running)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")
