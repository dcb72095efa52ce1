"""Every command a learner is told to run exists on the learner's route (the release, Colab, the hub).

A learner has the learner release, Colab or a hub: no ``make`` (that is the instructor's repository), and
no package index that holds ``pagedkv_lib`` (it comes as the release's wheel or a git URL). So no message
the learners' library prints, and no lesson or released set, may tell them to run a target of this
repository's Makefile, or to ``pip install`` anything but the packages the release's install brings
(its dependencies and learner extras, by name). Scanned: every string in the library's modules that the
release ships (docstrings are for readers of the code, not messages), the string literals of every
notebook's code cells (comments are not printed), and the notebooks' markdown.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("learner_release", REPO / "tools" / "learner_release.py")
release_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release_tool)

MAKE = re.compile(r"\bmake ([a-z][\w-]*)")
PIP = re.compile(r"\bpip install ((?:[^\s`'\"]+|'[^']*'|\"[^\"]*\")(?:\s+(?:[^\s`'\"]+|'[^']*'|\"[^\"]*\"))*)")


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def installable() -> set[str]:
    """Package names the learner's route installs by name: the release's dependencies and learner extras."""
    import tomllib
    project = tomllib.loads(release_tool.pyproject(REPO))["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements} | {"pip"}


def wrong_commands(text: str, targets: set[str], names: set[str]) -> list[str]:
    """The commands in ``text`` that the learner's route does not have, as found."""
    found = [f"make {m.group(1)}" for m in MAKE.finditer(text) if m.group(1) in targets]
    for m in PIP.finditer(text):   # the first word that is not an option or its value: what it installs
        words = [w.strip("'\"") for w in m.group(1).split()]
        word = next((w for w in words if not w.startswith("-") and not re.match(r"\w+://", w)), "")
        if word.endswith(".whl") or "/" in word.split("[")[0]:
            continue   # a file the route holds (the release's wheel) or a folder
        name = re.match(r"[A-Za-z0-9_.-]*", word).group(0).lower()
        if name and name not in names:
            found.append(f"pip install {word}")
    return found


def library_strings(path: Path):
    """(line, string) for every string constant of a module but its docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def notebook_texts(path: Path):
    """(cell index, text) for each markdown cell and each string literal of a code cell."""
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            yield i, source
        elif cell["cell_type"] == "code":
            try:
                tree = ast.parse(source)
            except SyntaxError:   # a cell with IPython syntax: its text, comments included
                yield i, source
                continue
            yield from ((i, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


#: (file, command) pairs that name an instructor's command on purpose, with the reason.
ON_PURPOSE = {
    ("pagedkv_lib/lesson/colab.py", "make colab"): "the setup cell's comment says who set its source; nobody runs it",
}


def test_no_message_or_notebook_names_a_command_the_learners_route_lacks():
    targets, names = makefile_targets(), installable()
    assert {"setup", "lab", "colab"} <= targets and {"torch", "numba", "triton", "nbgrader"} <= names
    found = []
    library = [p for p in release_tool.tracked(REPO, "pagedkv_lib")
               if p.endswith(".py") and not p.startswith(release_tool.INSTRUCTOR_ONLY)]
    for rel in library:
        for line, text in library_strings(REPO / rel):
            found += [f"{rel}:{line}: {c}" for c in wrong_commands(text, targets, names) if (rel, c) not in ON_PURPOSE]
    for path in sorted([*REPO.glob("notebooks/*.ipynb"), *REPO.glob("exercises/*/*.ipynb")]):
        for cell, text in notebook_texts(path):
            found += [f"{path.relative_to(REPO)} cell {cell}: {c}" for c in wrong_commands(text, targets, names)]
    assert not found, "commands a learner cannot run on the release, Colab or a hub:\n" + "\n".join(found)


@pytest.mark.parametrize("text, want", [
    ("Skipped: triton is not installed (Linux: make setup installs it).", ["make setup"]),
    ("numba is not installed: `pip install 'pagedkv_lib[fast]'` for the kernel", ["pip install pagedkv_lib[fast]"]),
    ("pip install --index-url https://example.org/simple pagedkv_lib (for the lab)", ["pip install pagedkv_lib"]),
    ("run `python -m pip install numba`, or pip install triton (on Linux only)", []),
    ('pip install "dist/pagedkv_lib-0.1.0-py3-none-any.whl[course,fast]"', []),
    ("we make room for the decode, then make sure it fits", []),
])
def test_the_scan_finds_what_the_issue_found_and_passes_the_routes_own_commands(text, want):
    assert wrong_commands(text, makefile_targets(), installable()) == want
