"""The learner release (``make release``, tools/learner_release.py) holds no solution, hidden test or grader.

The release is built once into a tmp folder and scanned with every solution-region and hidden-test line
of ``solutions/``; then each kind of slip is put into a copy of it (a hidden test in a notebook, a
solution line inside the wheel, an instructor module, the keys file, the course secret) and the scan
must name it; and a repository whose released set still holds a hidden test must fail to build.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("learner_release", REPO / "tools" / "learner_release.py")
release_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release_tool)

GITHUB = "example-org/pagedkv-learners"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "release"
    wheel = release_tool.build(REPO, out, github=GITHUB)
    return out, wheel


@pytest.fixture(scope="module")
def secrets():
    return release_tool.secret_lines(REPO)


def solution_notebooks() -> list[Path]:
    return sorted(REPO.glob("solutions/*/*.ipynb"))


def hidden_and_solution_lines(notebook: Path) -> tuple[list[str], list[str]]:
    """(hidden-test lines, solution lines) of one instructor notebook, by nbgrader's markers."""
    hidden, solution = [], []
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        for begin, end, into in (("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", hidden),
                                 ("### BEGIN SOLUTION", "### END SOLUTION", solution)):
            for block in re.findall(re.escape(begin) + r"\n(.*?)\n[ \t]*" + re.escape(end), source, re.S):
                into += [line.strip() for line in block.split("\n") if len(line.strip()) >= 10]
    return hidden, solution


def copy_of(built, tmp_path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(built[0], dest)
    return dest


# ---- the release as built -----------------------------------------------------------------------------

def test_the_scan_knows_every_sets_hidden_tests_and_solutions(secrets):
    """The scan is not vacuous: each set's hidden tests and solutions are among its lines."""
    for notebook in solution_notebooks():
        hidden, solution = hidden_and_solution_lines(notebook)
        assert hidden and solution, notebook
        assert set(hidden) & secrets and set(solution) & secrets, notebook
        assert "### GRADER ONLY" in notebook.read_text()
    assert len(secrets) > 100


def test_the_release_holds_lessons_sets_library_and_wheel_and_nothing_of_the_instructors(built, secrets):
    out, wheel = built
    assert sorted(p.name for p in (out / "notebooks").glob("*.ipynb")) == sorted(
        p.name for p in (REPO / "notebooks").glob("*.ipynb"))
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("exercises/*/*.ipynb")) == sorted(
        p.relative_to(REPO).as_posix() for p in REPO.glob("exercises/*/*.ipynb"))
    assert not (out / "solutions").exists() and not (out / "pagedkv_lib" / "course" / "instructor").exists()
    members = zipfile.ZipFile(wheel).namelist()
    assert "pagedkv_lib/__init__.py" in members and "pagedkv_lib/course/learner/variants.py" in members
    assert not [m for m in members if "course/instructor" in m or m.endswith("course/__main__.py")]
    assert release_tool.leaks(out, secrets, release_tool.private_values(REPO)) == []


def test_the_released_sets_are_the_instructors_exercises_cell_for_cell_but_the_setup_cell(built):
    out, _ = built
    for theirs in REPO.glob("exercises/*/*.ipynb"):
        mine = json.loads((out / theirs.relative_to(REPO)).read_text())["cells"]
        want = json.loads(theirs.read_text())["cells"]
        assert [c["source"] for c in mine[1:]] == [c["source"] for c in want[1:]], theirs.name


def test_colab_links_and_setup_cells_point_at_the_learner_release(built):
    out, _ = built
    text = (out / "README.md").read_text()
    links = re.findall(rf"https://colab\.research\.google\.com/github/{GITHUB}/blob/main/(\S+?\.ipynb)", text)
    assert len(links) == 8, links
    assert all((out / link).is_file() for link in links), links
    for nb in [*out.glob("notebooks/*.ipynb"), *out.glob("exercises/*/*.ipynb")]:
        first = "".join(json.loads(nb.read_text())["cells"][0]["source"])
        assert f"PAGEDKV_SOURCE = 'git+https://github.com/{GITHUB}'" in first, nb


def test_the_readme_tells_learners_how_to_open_where_the_key_goes_and_how_to_hand_in(built):
    text = (built[0] / "README.md").read_text()
    for needed in ("## Open in Colab", "JupyterLab", "VARIANT_KEY", "## Handing in", "Submit", built[1].name):
        assert needed in text, needed


def test_the_wheel_serves_everything_the_released_notebooks_import(built, tmp_path):
    """Each ``pagedkv_lib`` module a lesson or set imports loads from the wheel, with no grader beside it."""
    out, wheel = built
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    modules = set()
    for nb in [*out.glob("notebooks/*.ipynb"), *out.glob("exercises/*/*.ipynb")]:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                modules |= set(re.findall(r"^\s*(?:from|import) (pagedkv_lib[\w.]*)", "".join(cell["source"]), re.M))
    assert "pagedkv_lib.course.learner" in {m.rsplit(".", 1)[0] for m in modules} | modules, modules
    code = ("import importlib, sys\n"
            f"sys.path.insert(0, {str(tmp_path / 'site')!r})\n"
            f"for name in {sorted(modules)!r}:\n"
            "    importlib.import_module(name)\n"
            "import pagedkv_lib\n"
            f"assert pagedkv_lib.__file__.startswith({str(tmp_path / 'site')!r}), pagedkv_lib.__file__\n"
            "assert importlib.util.find_spec('pagedkv_lib.course.instructor') is None\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ---- a slip is caught ---------------------------------------------------------------------------------

def test_a_hidden_test_in_a_released_notebook_is_found(built, secrets, tmp_path):
    tree = copy_of(built, tmp_path)
    hidden, _ = hidden_and_solution_lines(REPO / "solutions" / "ps2_math" / "ps2_math.ipynb")
    line = next(h for h in hidden if h in secrets)
    nb_path = tree / "exercises" / "ps2_math" / "ps2_math.ipynb"
    nb = json.loads(nb_path.read_text())
    nb["cells"][-1]["source"] = ["x = 1\n", "    " + line + "\n"]
    nb_path.write_text(json.dumps(nb, indent=1))
    found = release_tool.leaks(tree, secrets)
    assert found == [f"exercises/ps2_math/ps2_math.ipynb: solution or hidden-test line {line!r}"], found


def test_a_solution_inside_the_wheel_is_found(built, secrets, tmp_path):
    tree = copy_of(built, tmp_path)
    _, solution = hidden_and_solution_lines(REPO / "solutions" / "ps3_code" / "ps3_code.ipynb")
    line = next(s for s in solution if s in secrets)
    (wheel,) = (tree / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("pagedkv_lib/answers.py", f"def f():\n    {line}\n")
    found = release_tool.leaks(tree, secrets)
    assert found == [f"dist/{wheel.name}!pagedkv_lib/answers.py: solution or hidden-test line {line!r}"], found


def test_markers_an_instructor_module_keys_and_the_secret_are_found(built, secrets, tmp_path):
    tree = copy_of(built, tmp_path)
    (tree / "pagedkv_lib" / "course" / "instructor").mkdir()
    (tree / "pagedkv_lib" / "course" / "instructor" / "__init__.py").write_text('"""the grader"""\n')
    (tree / "keys.csv").write_text("id,key\nalice,0123456789abcdef0123456789abcdef\n")
    (tree / "notebooks" / "notes.md").write_text("### GRADER ONLY\nsecret: s3cr3t-course-value\n")
    found = release_tool.leaks(tree, secrets, {"s3cr3t-course-value"})
    assert found == sorted([
        "keys.csv: an instructor-only file",
        "notebooks/notes.md: nbgrader's marker 'GRADER ONLY'",
        "notebooks/notes.md: the course secret or a learner's key",
        "notebooks/notes.md: solution or hidden-test line '### GRADER ONLY'",
        "pagedkv_lib/course/instructor/__init__.py: an instructor module",
    ]), found


@pytest.mark.slow
def test_make_release_fails_when_a_released_set_holds_a_hidden_test(tmp_path, secrets):
    """A repository whose exercises/ kept a hidden test (say, generated by hand) builds no release."""
    repo = tmp_path / "repo"
    for folder in ("notebooks", "exercises", "solutions", "pagedkv_lib"):
        for name in release_tool.tracked(REPO, folder):
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(REPO / name, repo / name)
    hidden, _ = hidden_and_solution_lines(REPO / "solutions" / "ps1_intuition" / "ps1_intuition.ipynb")
    line = next(h for h in hidden if h in secrets)
    target = repo / "exercises" / "ps1_intuition" / "ps1_intuition.ipynb"
    nb = json.loads(target.read_text())
    nb["cells"][-1]["source"].append("\n" + line)
    target.write_text(json.dumps(nb, indent=1))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    with pytest.raises(RuntimeError, match=re.escape(f"exercises/ps1_intuition/ps1_intuition.ipynb: solution "
                                                     f"or hidden-test line {line!r}")):
        release_tool.build(repo, tmp_path / "out")


def test_bad_arguments_are_explained_and_change_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"github must be ORG/REPO .*got 'not a repo'"):
        release_tool.build(REPO, tmp_path / "out", github="not a repo")
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep me")
    with pytest.raises(ValueError, match=r"out .*mine exists and is not a learner release"):
        release_tool.build(REPO, tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "keep me"


# ---- the learners' image on Kubernetes (hub/k8s/learner.Dockerfile) ----------------------------------

LEARNER_IMAGE = REPO / "hub" / "k8s" / "learner.Dockerfile"


def image_tree(dockerfile: str, release: Path, dest: Path) -> Path:
    """What the Dockerfile's COPY lines put in the image, laid out under ``dest``: ``release/...`` from the
    built ``release``, every other source from this repository (a build from the repository's root)."""
    for line in dockerfile.splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if not words or words[0] != "COPY":
            continue
        *sources, target = words[1:]
        for source in sources:
            origin = release / source.removeprefix("release/") if source.startswith("release/") else REPO / source
            into = dest / target.lstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, into, dirs_exist_ok=True)
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, into)
    return dest


def test_the_learner_image_copies_only_the_release_and_the_learners_settings(built, secrets, tmp_path):
    """Every file the learners' image gets is scanned as the release is: no solution, hidden test or grader."""
    tree = image_tree(LEARNER_IMAGE.read_text(), built[0], tmp_path / "image")
    assert (tree / "opt/pagedkv/notebooks").is_dir() and list((tree / "opt/pagedkv/dist").glob("*.whl"))
    assert (tree / "opt/pagedkv/hub/singleuser/learner/labconfig/page_config.json").is_file()
    assert release_tool.leaks(tree, secrets) == []


def test_a_learner_image_that_copies_the_repository_is_caught(built, secrets, tmp_path):
    slipped = LEARNER_IMAGE.read_text().replace("COPY --chown=root:root release/README.md",
                                                "COPY --chown=root:root solutions /opt/pagedkv/solutions\n"
                                                "COPY --chown=root:root release/README.md")
    tree = image_tree(slipped, built[0], tmp_path / "image")
    assert any(find.startswith("opt/pagedkv/solutions/") for find in release_tool.leaks(tree, secrets))


# ---- the learner's install and the section for learners outside the hub ---------------------------------

def test_one_block_installs_cpu_torch_then_the_course_with_its_extras_then_opens_jupyterlab(built):
    out, wheel = built
    text = (out / "README.md").read_text()
    lines = release_tool.install_block_in(text)
    step = lambda needle: next(i for i, line in enumerate(lines) if needle in line)  # noqa: E731
    torch, course, lab = step(f"pip install torch=={release_tool.torch_pin(REPO)} --index-url "
                              "https://download.pytorch.org/whl/cpu"), \
        step(f'pip install "dist/{wheel.name}['), step("jupyter lab --ServerApp.root_dir=. notebooks/01_intuition.ipynb")
    assert step("-m venv .venv") < step(".venv/bin/activate") < torch < course < lab == len(lines) - 1, lines
    extras = re.search(r"\[([\w,]+)\]", lines[course]).group(1).split(",")
    assert extras == list(release_tool.EXTRAS) and (out / "dist" / wheel.name).is_file()
    optional = tomllib.loads((out / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert optional["triton"] == ["triton>=3.0; platform_system == 'Linux'"], optional["triton"]
    assert optional["fast"] and not any(";" in r for r in optional["fast"]), "numba: on every platform"
    assert {"jupyterlab", "nbgrader"} <= {re.match(r"[\w-]+", r).group(0) for r in optional["course"]}
    for platform in ("| Linux, no NVIDIA GPU |", "| Windows |", "| macOS, Apple silicon |", "| macOS, Intel |"):
        assert platform in text, platform


def test_the_release_readme_carries_the_section_for_learners_outside_the_hub(built):
    text = (built[0] / "README.md").read_text()
    section = release_tool.outside_hub_section(REPO)
    assert section in text and section == section.strip() + "\n"
    for needed in ("nbgrader validate exercises/", "PRACTICE numbers", "from pagedkv_lib.lesson.gates import commit",
                   "gates.save_record(", "Bonus skipped"):
        assert needed in section, needed
    assert "\n## " not in section.split("\n", 1)[1], "the section stops at the next one"


def test_constraints_without_a_torch_pin_are_named(tmp_path):
    (tmp_path / "constraints.txt").write_text("numpy==2.3.0\ntorchvision==0.1\n")
    with pytest.raises(ValueError, match=r"constraints.txt pins no torch \(a line torch==X.Y.Z\)"):
        release_tool.torch_pin(tmp_path)


def test_a_readme_without_the_section_is_named(tmp_path):
    (tmp_path / "README.md").write_text("# a course\n\n## Quick start\n")
    with pytest.raises(ValueError, match=r"has no section '## Learning outside the hub'"):
        release_tool.outside_hub_section(tmp_path)
