"""`make setup TORCH=...`: which torch a learner's machine gets, checked without downloading anything."""
import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("torch_choice", REPO / "tools" / "torch_choice.py")
torch_choice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_choice)


@pytest.mark.parametrize("version, mode, expected", [
    ("2.13.0+cpu", "auto", "reuse"), ("2.4.0", "auto", "reuse"), ("2.5.1+cu121", "reuse", "reuse"),
    ("2.3.1", "auto", "pypi"), (None, "auto", "pypi"), ("1.13.1", "cpu", "cpu"), (None, "cpu", "cpu"),
    ("2.13.0", "pypi", "pypi"), ("2.13.0", "cpu", "cpu"),
])
def test_the_choice_reuses_only_a_compatible_torch_and_follows_the_switch(version, mode, expected):
    assert torch_choice.choose(mode, version) == expected


def test_reuse_without_a_compatible_torch_and_an_unknown_mode_are_explained():
    with pytest.raises(ValueError, match="TORCH=reuse needs torch >= 2.4.*found 2.3.1"):
        torch_choice.choose("reuse", "2.3.1")
    with pytest.raises(ValueError, match="TORCH must be one of auto, reuse, cpu, pypi, got 'gpu'"):
        torch_choice.choose("gpu", None)


def test_each_choice_gives_its_venv_and_pip_arguments(tmp_path):
    assert torch_choice.arguments("reuse", "venv", tmp_path) == ["--system-site-packages"]
    assert torch_choice.arguments("cpu", "venv", tmp_path) == []
    assert torch_choice.arguments("cpu", "pip", tmp_path) == [
        "-c", "constraints.txt", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert torch_choice.arguments("pypi", "pip", tmp_path) == ["-c", "constraints.txt"]
    flag, path = torch_choice.arguments("reuse", "pip", tmp_path)
    text = open(path).read()
    assert flag == "-c" and "torch==" not in text and "numba==" in text


def choice_cli(*args, **env):
    return subprocess.run([sys.executable, str(REPO / "tools" / "torch_choice.py"), *args],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})


@pytest.mark.slow
def test_with_the_local_wheels_hidden_this_venv_reuses_its_torch_and_pip_would_download_nothing(tmp_path):
    """This venv has torch 2.13.0+cpu, so `auto` reuses it; pip, with no wheel folder and no index, then
    finds every torch requirement satisfied: nothing would be downloaded."""
    hidden = {"PIP_FIND_LINKS": "", "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null"}
    out = choice_cli("auto", "pip", **hidden)
    assert out.returncode == 0, out.stderr
    flag, path = out.stdout.split()
    assert flag == "-c" and "torch==" not in open(path).read()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "-c", path,
                          "torch>=2.4"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", **hidden})
    assert pip.returncode == 0 and "Requirement already satisfied: torch" in pip.stdout, pip.stdout + pip.stderr
    # the pinned default, by contrast, asks pip for a torch it cannot reach here
    pinned = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps",
                             "--force-reinstall", "-c", str(REPO / "constraints.txt"), "torch"],
                            capture_output=True, text=True, cwd=REPO, env={"PATH": "/usr/bin:/bin", **hidden})
    assert pinned.returncode != 0 and "torch==2.13.0" in pinned.stderr + pinned.stdout
    assert choice_cli("reuse", "nope").returncode == 2
