"""Build the learner release: what learners may see of this (the instructor's) repository, and nothing else.

    python tools/learner_release.py [--out release] [--github ORG/REPO] [--branch main]

``make release`` runs it. The tree it writes is ready to push as its own repository, to upload to
Colab, or to install on the hub (``make hub`` does):

- ``notebooks/``: the lessons; ``exercises/``: the released problem sets (as ``make exercises`` made them);
- ``pagedkv_lib/``: the library without ``course/instructor`` (the grader) and ``course/__main__.py``
  (the instructor's commands), with a ``pyproject.toml`` that builds it, and that wheel in ``dist/``;
- ``README.md`` for learners: Colab, JupyterLab, the variant key, handing in.

With ``--github ORG/REPO`` (where the release will be pushed), every setup cell installs the library from
that repository on Colab and the README links each notebook to Colab; without it the setup cells name no
source (so they never point at the instructor's repository) and Colab users upload the wheel.

Last, it scans every file it wrote, the notebooks' cells and the wheel's members included, for every
line of every solution region and hidden test of ``solutions/`` (:func:`secret_lines`), for nbgrader's
markers, for instructor modules, keys and the course secret (:func:`leaks`), and fails naming each find.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = ".learner-release"
"""A file at the release's root: the builder empties only a folder that holds it (or an empty one)."""
INSTRUCTOR_ONLY = ("pagedkv_lib/course/instructor/", "pagedkv_lib/course/__main__.py")
"""Library paths that stay with the instructor: the grader, whatever its inside looks like, and its commands."""
REGIONS = {"### BEGIN SOLUTION": "### END SOLUTION", "### BEGIN HIDDEN TESTS": "### END HIDDEN TESTS"}
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "GRADER ONLY")
"""nbgrader's region markers and the course's grader-only marker: none may appear in the release."""
PRIVATE_NAMES = {"keys.csv", "course-secret.txt", "gradebook.db", "grades.csv", "status.csv", "collect.json"}
PRIVATE_DIRS = {"solutions", "submitted", "autograded", "feedback", "source", "grading-cache", "grading-logs",
                "results"}
MIN_LINE = 10
"""Solution lines shorter than this many characters (``return ids``) say nothing on their own."""
EXTRAS = ("course", "fast", "triton")
"""The optional dependency groups a learner installs (JupyterLab and nbgrader, numba, triton where it installs);
the test, browser and hub groups stay behind."""
INSTALL_HEADING = "## Open in JupyterLab on your machine"
"""The release README's section whose one ``bash`` block is the learner's install (tests/test_release_route.py runs it)."""
OUTSIDE_HUB = "## Learning outside the hub"
"""The section of this repository's README that the release README carries as it is."""
PLATFORMS = """\
| platform | torch (the first `pip install`) | numba | triton | what changes in the lessons |
|---|---|---|---|---|
| Linux, no NVIDIA GPU | PyTorch's CPU build (`+cpu`: 183 MiB for torch 2.13 on x86-64) | yes | yes | nothing: Triton runs in its CPU interpreter |
| Linux with an NVIDIA GPU | the CPU build as above; or leave that line out for the CUDA build (several GB) | yes | yes | with CUDA torch, Triton runs on the GPU |
| Windows | PyTorch's CPU build | yes | no: no wheels | lesson 03 skips the Triton kernel in one line; ps3's bonus is skipped and costs nothing |
| macOS, Apple silicon | PyTorch's macOS build (the same wheel as the default index's) | yes | no: no wheels | as on Windows |
| macOS, Intel | none: PyTorch stopped at 2.2 there, and the course needs 2.4 | | | use Colab |"""
"""What each platform gets from :func:`install_block`, for the release README."""


def tracked(repo: Path, folder: str) -> list[str]:
    """Files of ``folder`` that a clone of ``repo`` holds (tracked, or untracked and not ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", folder],
                         cwd=repo, check=True, capture_output=True).stdout.decode()
    return sorted(n for n in set(out.split("\0")) if n and (repo / n).is_file())


# ---- what must never appear -------------------------------------------------------------------------

def regions(source: str, whole: bool) -> list[str]:
    """Lines inside the solution and hidden-test regions of one cell's ``source``; ``whole``: a solution
    cell without markers, which nbgrader replaces as a whole (a written answer), so every line."""
    if whole and not any(begin in source for begin in REGIONS):
        return source.split("\n")
    found, end = [], None
    for line in source.split("\n"):
        if end is None and line.strip() in REGIONS:
            end = REGIONS[line.strip()]
        elif end is not None and line.strip() == end:
            end = None
        elif end is not None:
            found.append(line)
    return found


def secret_lines(repo: Path) -> set[str]:
    """Every distinct line (stripped, at least :data:`MIN_LINE` characters) of a solution region or hidden
    test in ``repo``'s ``solutions/`` notebooks, less the lines the learners' library or the lessons
    themselves hold (``accounting.py`` computes some answers in the open, a lesson imports what a solution
    imports; those are public by design, not leaks). The released sets are never taken as public."""
    lines = set()
    for path in tracked(repo, "solutions"):
        if path.endswith(".ipynb"):
            for cell in json.loads((repo / path).read_text(encoding="utf-8"))["cells"]:
                source = "".join(cell["source"])
                solution = bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))
                lines |= {s.strip() for s in regions(source, whole=solution)}
    library = "\n".join((repo / p).read_text(encoding="utf-8") for p in tracked(repo, "pagedkv_lib")
                        if p.endswith(".py") and not p.startswith(INSTRUCTOR_ONLY))
    lessons = "\n".join("".join(cell["source"]) for p in tracked(repo, "notebooks") if p.endswith(".ipynb")
                        for cell in json.loads((repo / p).read_text(encoding="utf-8"))["cells"])
    return {s for s in lines if len(s) >= MIN_LINE and s not in library and s not in lessons}


def private_values(repo: Path) -> set[str]:
    """The course secret and every learner's key, where this checkout holds them (``make keys``)."""
    values = set()
    secret = repo / "course-secret.txt"
    if secret.is_file() and secret.read_text().strip():
        values.add(secret.read_text().strip())
    keys = repo / "keys.csv"
    if keys.is_file():
        values |= set(re.findall(r"\b[0-9a-f]{32}\b", keys.read_text()))
    return values


def texts(name: str, data: bytes):
    """(name, text) for a file and, inside a wheel or zip, for each member; a JSON file (a notebook)
    as its decoded strings, one per line, so a line of code reads as it does in the cell."""
    if name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for member in z.namelist():
                yield f"{name}!{member}", member   # a member's name counts too (an instructor module)
                yield from texts(f"{name}!{member}", z.read(member))
        return
    text = data.decode("utf-8", errors="replace")
    if name.endswith((".ipynb", ".json")):
        try:
            strings = []
            _strings(json.loads(text), strings)
            text = "\n".join(strings)
        except ValueError:
            pass   # not JSON after all: scanned as text
    yield name, text


def _strings(value, out: list[str]) -> None:
    """Every string in a JSON value, in order (an iterative walk: any nesting depth)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(reversed([*v.keys(), *v.values()]))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def leaks(tree: Path, secrets: set[str], private: set[str] = frozenset()) -> list[str]:
    """Everything in ``tree`` a learner must not get, as ``path: what`` lines (empty: the tree is clean)."""
    found = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree).as_posix()
        if path.name in PRIVATE_NAMES or PRIVATE_DIRS & set(Path(rel).parts[:-1]):
            found.append(f"{rel}: an instructor-only file")
        for name, text in texts(rel, path.read_bytes()):
            if any(part in name.replace("!", "/") for part in ("course/instructor", "course/__main__.py")):
                found.append(f"{name}: an instructor module")
            found += [f"{name}: nbgrader's marker {m!r}" for m in MARKERS if m in text]
            found += [f"{name}: the course secret or a learner's key" for v in private if v in text]
            found += [f"{name}: solution or hidden-test line {s!r}" for s in sorted(secrets) if s in text]
    return sorted(set(found))


# ---- what the release holds -------------------------------------------------------------------------

def pyproject(repo: Path) -> str:
    """The release's pyproject.toml: the library's metadata and run-time dependencies, the learner extras."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    lines = ['[build-system]', 'requires = ["setuptools>=77"]', 'build-backend = "setuptools.build_meta"', '',
             '[project]']
    for key in ("name", "version", "description", "requires-python", "dependencies"):
        lines.append(f"{key} = {json.dumps(project[key])}")
    lines += ['readme = "README.md"', '', '[project.optional-dependencies]']
    lines += [f"{k} = {json.dumps(extras[k])}" for k in EXTRAS if k in extras]
    lines += ['', '[tool.setuptools.packages.find]', 'include = ["pagedkv_lib*"]', '']
    return "\n".join(lines)


def copy_files(repo: Path, out: Path, files: list[str]) -> None:
    for name in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, out / name)


def set_colab_source(out: Path, source: str | None) -> None:
    """Every notebook's setup cell installs from ``source`` (the release), or names none."""
    sys.path.insert(0, str(out))   # the release's own copy of the library writes the cell
    try:
        from pagedkv_lib.lesson.colab import write_setup_cell
        for nb in sorted([*out.glob("notebooks/*.ipynb"), *out.glob("exercises/*/*.ipynb")]):
            write_setup_cell(nb, source)
    finally:
        sys.path.remove(str(out))


def build_wheel(out: Path) -> Path:
    """The library's wheel, built from a scratch copy of the release (so the tree gets no build/ folder)."""
    with tempfile.TemporaryDirectory() as scratch:
        src = Path(scratch) / "src"
        shutil.copytree(out, src, ignore=shutil.ignore_patterns("dist", "__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(out / "dist"), str(src)], check=True)
    (wheel,) = (out / "dist").glob("pagedkv_lib-*.whl")
    return wheel


def cpu_index() -> str:
    """PyTorch's CPU-only wheel index, as ``make setup TORCH=cpu`` uses it (tools/torch_choice.py)."""
    spec = importlib.util.spec_from_file_location("torch_choice", Path(__file__).with_name("torch_choice.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CPU_INDEX


def torch_pin(repo: Path) -> str:
    """The torch version ``repo``'s constraints.txt pins: the one the course is tested with."""
    found = re.search(r"^torch==([\w.]+)\s*$", (repo / "constraints.txt").read_text(), re.M)
    if not found:
        raise ValueError(f"{repo / 'constraints.txt'} pins no torch (a line torch==X.Y.Z): the learner's install names it")
    return found.group(1)


def install_block(wheel: str, torch: str) -> str:
    """The learner's install, one step a line in the order they must run: a venv, PyTorch's CPU build of
    version ``torch``, the course's wheel with :data:`EXTRAS`, JupyterLab on the first lesson with the release
    folder as its root (given a file alone, JupyterLab would serve only that file's folder). POSIX shell;
    the comments say what Windows runs instead, after which every line is the same there."""
    return "\n".join([
        "python3 -m venv .venv            # Windows: py -m venv .venv",
        ". .venv/bin/activate             # Windows: .venv\\Scripts\\activate",
        f"python -m pip install torch=={torch} --index-url {cpu_index()}",
        f'python -m pip install "dist/{wheel}[{",".join(EXTRAS)}]"',
        "jupyter lab --ServerApp.root_dir=. notebooks/01_intuition.ipynb",
    ])


def install_block_in(readme_text: str) -> list[str]:
    """The lines of the one ``bash`` block under :data:`INSTALL_HEADING` in a release README's text."""
    if INSTALL_HEADING + "\n" not in readme_text:
        raise ValueError(f"the README has no section {INSTALL_HEADING!r}")
    section = readme_text.split(INSTALL_HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    if len(blocks) != 1:
        raise ValueError(f"{INSTALL_HEADING} should hold one bash block, found {len(blocks)}")
    return blocks[0].strip().splitlines()


def outside_hub_section(repo: Path) -> str:
    """The :data:`OUTSIDE_HUB` section of ``repo``'s README, up to the next section of its level."""
    text = (repo / "README.md").read_text(encoding="utf-8")
    if OUTSIDE_HUB + "\n" not in text:
        raise ValueError(f"{repo / 'README.md'} has no section {OUTSIDE_HUB!r}: the learner release carries it")
    section = text.split(OUTSIDE_HUB + "\n", 1)[1]
    end = re.search(r"^## ", section, re.M)
    return OUTSIDE_HUB + "\n" + (section[:end.start()] if end else section).rstrip() + "\n"


def readme(repo: Path, github: str | None, branch: str, wheel: str) -> str:
    lessons = sorted(p.name for p in (repo / "notebooks").glob("*.ipynb"))
    sets = sorted(p.parent.name for p in (repo / "exercises").glob("*/*.ipynb"))
    def link(path: str) -> str:
        if not github:
            return f"`{path}`"
        return f"[`{path}`](https://colab.research.google.com/github/{github}/blob/{branch}/{path})"
    rows = "\n".join(f"| {link('notebooks/' + lesson)} | {link(f'exercises/{ps}/{ps}.ipynb') if ps else ''} |"
                     for lesson, ps in zip(lessons, sets + [""] * (len(lessons) - len(sets))))
    colab = (f"Open a notebook from the table: each link opens it in Colab from `github.com/{github}`. "
             f"Run its first cell: it installs the course library from that repository and keeps Colab's own torch."
             if github else
             f"In Colab choose *File > Open notebook > Upload* and pick a notebook of this folder. Upload "
             f"`dist/{wheel}` in the *Files* pane, set `PAGEDKV_SOURCE = '/content/{wheel}'` in the first cell "
             f"and run it: it installs the course library and keeps Colab's own torch.")
    return f"""# pagedkv: paged KV-cache allocation and PagedAttention (learner release)

Four lessons, each with its problem set. Start with the first lesson, then its problem set.

| lesson | problem set |
|---|---|
{rows}

## Open in Colab

{colab} Outside Colab the first cell does nothing.

## Open in JupyterLab on your machine

Python 3.10 or newer. In this folder, run these lines in order (on Windows, the comments say what differs):

```bash
{install_block(wheel, torch_pin(repo))}
```

The first `pip install` takes PyTorch's CPU build of the version the course is tested with: the course
never needs a GPU, and on Linux the default torch is the CUDA build, several GB. The second installs the course, JupyterLab and nbgrader (its
*Validate* button), numba for the fused CPU kernel of lesson 03, and triton where it installs (Linux):

{PLATFORMS}

On your class's JupyterHub everything is installed already: the lessons are in `~/lessons`, and the
problem sets come from *Nbgrader > Assignment List > Fetch*.

## Your variant key

Each problem set asks about your own numbers. Your instructor gives you a variant key (32 hex digits):
paste it into the first cell of each problem set, `VARIANT_KEY = "..."`, and run all cells. Without a
key the set runs on practice numbers, the same for everyone, which are not the ones you are graded on.
On the class's JupyterHub your key is already set: there is nothing to paste.

## Handing in

- On the class's JupyterHub: *Nbgrader > Assignment List*, *Validate*, then *Submit*. Hand in your
  lessons the same way (the row `lessons`): the predictions you commit are saved in each lesson, and your
  instructor sees the class's predictions together, without names unless they ask for them.
- Elsewhere: save the notebook, download the `.ipynb` (Colab: *File > Download > Download .ipynb*) and
  hand in that file as your instructor says. Keep the `# ANSWER ...` line at the top of each answer cell:
  the grader finds your answer by it.

Your instructor grades your notebook by running it again, in a sandbox, on your numbers; the checks you
see in the notebook are there to help you before you hand in.

{outside_hub_section(repo)}
## The library

`pagedkv_lib/` is the library the lessons call: read it, it is part of the course. The grader is not
in this release.
"""


def build(repo: Path, out: Path, github: str | None = None, branch: str = "main") -> Path:
    """Write the learner release of ``repo`` into ``out`` (emptied first) and check it; returns the wheel."""
    if github is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", github):
        raise ValueError(f"github must be ORG/REPO (the learner release's GitHub repository), got {github!r}")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"out {out} exists and is not a learner release (no {MARKER}): give an empty or new folder")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("Built by the instructor's `make release` (tools/learner_release.py); "
                              "the builder empties this folder on every build.\n")
    library = [p for p in tracked(repo, "pagedkv_lib") if not p.startswith(INSTRUCTOR_ONLY)]
    notebooks = [p for p in tracked(repo, "notebooks") + tracked(repo, "exercises") if p.endswith(".ipynb")]
    copy_files(repo, out, library + notebooks)
    set_colab_source(out, f"git+https://github.com/{github}" if github else None)
    (out / "pyproject.toml").write_text(pyproject(repo))
    (out / ".gitignore").write_text(".venv/\n__pycache__/\n.ipynb_checkpoints/\n*.egg-info/\nbuild/\n")
    (out / "README.md").write_text(readme(repo, github, branch, "pagedkv_lib-WHEEL.whl"))
    wheel = build_wheel(out)
    (out / "README.md").write_text(readme(repo, github, branch, wheel.name))
    found = leaks(out, secret_lines(repo), private_values(repo))
    if found:
        raise RuntimeError(f"the learner release in {out} holds instructor material:\n" + "\n".join(found[:50]))
    return wheel


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tools/learner_release.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(REPO / "release"), help="the folder to write (default release/)")
    p.add_argument("--github", default=None, help="ORG/REPO where the release is pushed: Colab links and setup cells")
    p.add_argument("--branch", default="main", help="the release repository's branch for the Colab links")
    args = p.parse_args(argv)
    try:
        wheel = build(REPO, Path(args.out).resolve(), args.github, args.branch)
    except (ValueError, RuntimeError) as err:
        print(err, file=sys.stderr)
        return 1
    print(f"learner release in {args.out}: lessons, problem sets, library and {wheel.name}; "
          f"scanned for {len(secret_lines(REPO))} solution and hidden-test lines: none found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
