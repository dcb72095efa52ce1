"""The Colab setup cell: a no-op outside Colab; on Colab it installs the course library from the one
source `make colab SOURCE=...` wrote, keeps the runtime's torch, and explains what to do without one."""
import shutil
import subprocess
import sys
import types

import nbformat
import pytest

from conftest import LESSONS, REPO
from pagedkv_lib.lesson import colab


def run_cell(code, monkeypatch, *, in_colab, library_installed=False):
    """Execute the cell's code as a kernel would, with a stand-in ``google.colab`` module or none."""
    if in_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if not library_installed:
        monkeypatch.setitem(sys.modules, "pagedkv_lib", None)  # find_spec then reports it missing
    exec(compile(code, "<setup cell>", "exec"), {})


def no_subprocess(*args, **kwargs):
    raise AssertionError(f"the setup cell ran a command: {args}")


def test_outside_colab_the_cell_does_nothing(monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "check_call", no_subprocess)
    run_cell(colab.setup_cell_source("git+https://example.invalid/course"), monkeypatch, in_colab=False)
    assert capsys.readouterr() == ("", "")


def test_on_colab_with_the_library_present_the_cell_does_nothing(monkeypatch):
    monkeypatch.setattr(subprocess, "check_call", no_subprocess)
    run_cell(colab.setup_cell_source(None), monkeypatch, in_colab=True, library_installed=True)


def test_on_colab_without_a_source_the_cell_says_what_to_upload_or_set(monkeypatch):
    monkeypatch.setattr(subprocess, "check_call", no_subprocess)
    with pytest.raises(RuntimeError, match=r"upload the course.s wheel.*PAGEDKV_SOURCE.*git URL"):
        run_cell(colab.setup_cell_source(None), monkeypatch, in_colab=True)


@pytest.mark.slow
def test_on_colab_the_cell_installs_the_library_from_a_local_source_and_keeps_torch(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "pagedkv_lib", src / "pagedkv_lib", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.check_call([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(src)])
    wheel, = (tmp_path / "dist").glob("pagedkv_lib-*.whl")
    target = tmp_path / "site"
    monkeypatch.setenv("PIP_TARGET", str(target))   # a throwaway site-packages
    monkeypatch.setenv("PIP_NO_INDEX", "1")          # no network: the cell must need none
    commands = []
    real = subprocess.check_call
    monkeypatch.setattr(subprocess, "check_call", lambda cmd, **kw: commands.append(cmd) or real(cmd, **kw))
    run_cell(colab.setup_cell_source(str(wheel)), monkeypatch, in_colab=True)
    assert (target / "pagedkv_lib" / "blocks" / "manager.py").is_file()
    assert not (target / "torch").exists()
    assert commands == [[sys.executable, "-m", "pip", "install", "-q", "--no-deps", str(wheel)]]


def test_make_colab_writes_the_source_into_the_first_cell_once(tmp_path):
    path = tmp_path / "lesson.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lesson"),
                                         nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, path)
    assert colab.main(["git+https://example.org/course", str(path)]) == 0
    cells = nbformat.read(path, as_version=4).cells
    assert len(cells) == 3 and cells[0].metadata.tags == [colab.TAG]
    assert "PAGEDKV_SOURCE = 'git+https://example.org/course'" in cells[0].source
    assert colab.write_setup_cell(path, "git+https://example.org/course") is False   # already so
    assert colab.write_setup_cell(path, None) is True
    cells = nbformat.read(path, as_version=4).cells
    assert len(cells) == 3 and "PAGEDKV_SOURCE = None" in cells[0].source
    assert [c.source for c in cells[1:]] == ["# A lesson", "x = 1"]


def test_bad_sources_and_usage_are_explained(tmp_path, capsys):
    with pytest.raises(ValueError, match="source must be a pip-installable source"):
        colab.setup_cell_source("  ")
    assert colab.main(["only-a-source"]) == 2
    assert "usage: python -m pagedkv_lib.lesson.colab SOURCE NOTEBOOK" in capsys.readouterr().err


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_starts_with_the_setup_cell(path):
    first = nbformat.read(path, as_version=4).cells[0]
    assert colab.TAG in first.metadata.get("tags", []), (
        f"{path.name} does not start with the Colab setup cell: run `make colab SOURCE=<install source>` "
        "(`SOURCE=` writes the cell with no source set)")
    assert first.source.startswith(colab.setup_cell_source(None).splitlines()[0])
    assert "PAGEDKV_SOURCE = " in first.source
