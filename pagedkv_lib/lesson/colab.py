"""The first cell of every course notebook: install the course library on Google Colab only.

A Colab runtime starts without ``pagedkv_lib``. The setup cell installs it from one source (a
git URL, a wheel, or a path the learner uploaded), set once for the whole course by the
instructor with ``make colab SOURCE=...``, which runs this module on every notebook:

    python -m pagedkv_lib.lesson.colab SOURCE NOTEBOOK.ipynb [NOTEBOOK.ipynb ...]

The cell keeps Colab's preinstalled torch (a CUDA build that must not be replaced): it installs
the library with ``--no-deps`` and then only the light dependencies the runtime lacks. Outside
Colab (JupyterLab, nbclient, nbgrader) it does nothing: the library is already installed there.
The cell carries the tag :data:`TAG`, so the writer finds it again after any edit.
"""
from __future__ import annotations

import sys
from pathlib import Path

TAG = "colab-setup"
LIGHT_DEPS = ("numpy", "matplotlib", "ipywidgets", "tqdm")
"""The library's dependencies other than torch (see pyproject.toml), by import name."""

_CELL = '''\
# Setup: on Google Colab this installs the course library; elsewhere it does nothing.
PAGEDKV_SOURCE = {source!r}  # set by the instructor's `make colab SOURCE=...`
import importlib.util, subprocess, sys
if "google.colab" in sys.modules and importlib.util.find_spec("pagedkv_lib") is None:
    if not PAGEDKV_SOURCE:
        raise RuntimeError(
            "This notebook needs the course library pagedkv_lib. Either upload the "
            "course's wheel (pagedkv_lib-*.whl) in the Files pane and set "
            "PAGEDKV_SOURCE to its path, such as "
            "'/content/pagedkv_lib-0.1.0-py3-none-any.whl', or set it to the git URL "
            "your instructor gave you, such as "
            "'git+https://github.com/ORG/REPO'; then run this cell again.")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.check_call(pip + ["--no-deps", PAGEDKV_SOURCE])  # keeps Colab's torch
    light = {deps!r}  # the other dependencies
    missing = [m for m in light if importlib.util.find_spec(m) is None]
    if missing:
        subprocess.check_call(pip + missing)
    importlib.invalidate_caches()'''


def setup_cell_source(source: str | None) -> str:
    """The setup cell's code with ``source`` (a pip-installable source, or ``None``) filled in."""
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise ValueError(f"source must be a pip-installable source (a git URL, a wheel or a path) "
                         f"or None, got {source!r}")
    return _CELL.format(source=source.strip() if source else None, deps=LIGHT_DEPS)


def write_setup_cell(path: str | Path, source: str | None) -> bool:
    """Make the first cell of notebook ``path`` the setup cell for ``source``; True if it changed.

    An existing cell tagged :data:`TAG` is rewritten in place (and moved first if it is not);
    otherwise a new cell is inserted first. Everything else in the notebook stays as it is.
    """
    import nbformat  # only the instructor's tool needs it, not the library

    code = setup_cell_source(source)
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if TAG in c.get("metadata", {}).get("tags", [])]
    if len(tagged) > 1:
        raise ValueError(f"{path} has {len(tagged)} cells tagged {TAG!r}; keep exactly one")
    if tagged and nb.cells[0] is tagged[0] and tagged[0].source == code:
        return False
    cell = tagged[0] if tagged else nbformat.v4.new_code_cell(metadata={"tags": [TAG]})
    if tagged:
        nb.cells.remove(cell)
    cell.source = code
    nb.cells.insert(0, cell)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m pagedkv_lib.lesson.colab SOURCE NOTEBOOK...``; an empty SOURCE clears the setting."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m pagedkv_lib.lesson.colab SOURCE NOTEBOOK.ipynb [NOTEBOOK.ipynb ...]\n"
              "SOURCE: what Colab should pip-install (a git URL, a wheel URL or path); '' clears it",
              file=sys.stderr)
        return 2
    source = args[0] or None
    for path in args[1:]:
        changed = write_setup_cell(path, source)
        print(f"{path}: {'setup cell written' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
