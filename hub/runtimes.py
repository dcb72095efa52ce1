"""What the class's users run on the hub, and the check that each can run it (``accounts.py create``).

Learners run the learner release in ``--runtime`` (its own venv, readable by all: :func:`install_runtime`); the
instructor runs their course directory's own ``.venv`` (:func:`instructor_venv`). Both venvs are this
checkout's venv hard-linked, without this checkout's library. :func:`check_runs` tries each as its user and
stops naming the folder that keeps them out.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _checkout_library(rel: str) -> bool:
    """This checkout's own install of pagedkv_lib inside its venv (editable: it points into the checkout)."""
    name = rel.rsplit("/", 1)[-1]
    return (name.startswith("__editable__") and "pagedkv_lib" in name) or name.startswith("pagedkv_lib-")


def venv_copy(dest: Path) -> Path:
    """A copy of this checkout's venv at ``dest``, without the checkout's own library; returns its site-packages.

    Files are hard links (the venv is about 3 GB), except the scripts in ``bin/`` that name the venv's
    path, which are rewritten to name ``dest``. Nothing is ever written through a link: the copy is root's."""
    src = (REPO / ".venv").resolve()
    if dest.exists():
        shutil.rmtree(dest)
    for folder, dirs, files in os.walk(src):
        rel_dir = Path(folder).relative_to(src)
        dirs[:] = [d for d in dirs if not _checkout_library(d)]
        (dest / rel_dir).mkdir(mode=0o755, exist_ok=True)
        for name in [*files, *(d for d in dirs if (Path(folder) / d).is_symlink())]:
            here, there = Path(folder) / name, dest / rel_dir / name
            if _checkout_library(name):
                continue
            if here.is_symlink():
                target = os.readlink(here)
                there.symlink_to(target.replace(str(src), str(dest), 1) if target.startswith(str(src)) else target)
            elif rel_dir.parts[:1] == ("bin",) and str(src).encode() in (data := here.read_bytes()):
                there.write_bytes(data.replace(str(src).encode(), str(dest).encode()))
                there.chmod(here.stat().st_mode & 0o777)
            else:
                try:
                    os.link(here, there)
                except OSError:   # another filesystem: a copy
                    shutil.copy2(here, there)
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
    (site,) = dest.glob("lib/python*/site-packages")
    return site


def install_runtime(release: Path, runtime: Path) -> Path:
    """The learners' side in ``runtime``, readable by all: the release, the servers' config, a venv with the
    release's wheel. Rebuilt on every run (stop the hub first). Returns the venv's python."""
    if not (release / ".learner-release").exists() or not list(release.glob("dist/pagedkv_lib-*.whl")):
        raise SystemExit(f"release {release} is not a built learner release: run `make release` first")
    runtime.mkdir(mode=0o755, parents=True, exist_ok=True)
    runtime.chmod(0o755)
    old = os.umask(0o022)
    try:
        for name, src in (("release", release), ("singleuser", HERE / "singleuser"),
                          ("handout/lessons", release / "notebooks")):
            if (runtime / name).exists():
                shutil.rmtree(runtime / name)
            shutil.copytree(src, runtime / name, ignore=shutil.ignore_patterns("__pycache__"))
        venv_copy(runtime / "venv")
        (wheel,) = (runtime / "release" / "dist").glob("pagedkv_lib-*.whl")
        subprocess.run([str(runtime / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                        "--no-index", "--disable-pip-version-check", str(wheel)], check=True)
    finally:
        os.umask(old)
    return runtime / "venv" / "bin" / "python"


def instructor_venv(course: Path) -> None:
    """The course directory's own ``.venv``: the same venv, importing pagedkv_lib from ``course`` (a .pth)."""
    site = venv_copy(course / ".venv")
    (site / "pagedkv-course.pth").write_text(f"{course}\n")


def _unsearchable(path: Path) -> Path | None:
    """The first folder above ``path`` (or ``path`` itself) that other users cannot search or read."""
    real = Path(os.path.realpath(path))
    for p in [*reversed(real.parents), real]:
        mode = os.stat(p).st_mode
        if not mode & stat.S_IXOTH or (not p.is_dir() and not mode & stat.S_IROTH):
            return p
    return None


def check_runs(user: str, python: Path, code: str) -> None:
    """``user`` runs ``python -c code``; else stop, naming the folder that keeps them out and the fix."""
    proc = subprocess.run(["runuser", "-u", user, "--", str(python), "-c", code], cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        blocked = next((b for b in map(_unsearchable, (python, python.parents[1] / "lib")) if b), None)
        what, fix = ("searchable", "o+x") if blocked and blocked.is_dir() else ("readable", "o+r")
        why = (f"{blocked} is not {what} by other users (mode {stat.filemode(os.stat(blocked).st_mode)}): "
               f"chmod {fix} {blocked}, or use a Python installed where every user can run it"
               if blocked else "see the error below")
        raise SystemExit(f"user {user} cannot run {python} and import the course: {why}\n{proc.stderr[-1500:]}")


def check_learner(members: list[Member], python: Path) -> None:
    """A learner runs the runtime's venv and imports the release's library (no grader), and cannot list this checkout."""
    learner = next((m.id for m in members if m.role == "learner"), None)
    if learner is not None:
        check_runs(learner, python, "import os, pagedkv_lib, nbgrader, jupyterhub, importlib.util as u\n"
                   f"assert pagedkv_lib.__file__.startswith({str(python.parents[1])!r}), pagedkv_lib.__file__\n"
                   "assert u.find_spec('pagedkv_lib.course.instructor') is None, 'the grader is importable'\n"
                   f"try:\n    os.listdir({str(REPO)!r})\nexcept PermissionError:\n    pass\n"
                   f"else:\n    raise SystemExit('a learner can list {REPO}')\n")
