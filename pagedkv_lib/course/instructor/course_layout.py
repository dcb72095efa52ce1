"""The course folder as nbgrader lays it out, and nbgrader itself: what every stage of grading reads.

Folder and file names, the assignments in ``solutions/``, generating student copies (cached in
``grading-cache/``), the gradebook's address, and the course's settings (``nbgrader_config.py``).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from ...errors import PagedKVError

SOURCE, RELEASE, SUBMITTED = "solutions", "exercises", "submitted"
AUTOGRADED, FEEDBACK = "autograded", "feedback"  # nbgrader's graded copies, and the feedback pages made from them
GRADES_CSV = "grades.csv"  # the gradebook's scores, one row per student and assignment, with each status
COLLECT_LOG = "collect.json"  # what collect placed, and what it could not read
STATUS_CSV = "status.csv"  # one row per student and assignment: ok, or each problem found
RESULTS_DIR = "results"  # <assignment>/<student>.json: each graded notebook's result (notebook_result.py)
CACHE_DIR = "grading-cache"  # generated releases, and the hash of the sources they came from
DB_WAIT_S = 120  # seconds a worker waits for sqlite's write lock before giving up
DEFAULT_TIMEOUT_S = 30  # per-cell execution limit; a problem-set cell needs well under a second


def nbgrader_env(extra: dict | None = None) -> dict:
    """The environment nbgrader needs: this interpreter's ``bin`` first on PATH (it runs ``alembic``)."""
    path = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ, PATH=path, **(extra or {}))


def run_nbgrader(*args: str, course_dir=".") -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course_dir``; its stdout (what a command reports, e.g. Validate's report)
    and stderr (its log and its kernels') apart, whatever the exit code."""
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course_dir, env=nbgrader_env(),
                          capture_output=True, text=True)


def nbgrader(*args: str, course_dir=".") -> str:
    """Run ``nbgrader ARGS`` in ``course_dir`` and return its log; raise with the log's tail on failure."""
    proc = run_nbgrader(*args, course_dir=course_dir)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise PagedKVError(f"nbgrader {' '.join(args)} failed (exit {proc.returncode}):\n{log[-3000:]}")
    return log


def assignments(course_dir=".") -> list[str]:
    """Names of the assignments in ``solutions/`` (folders holding at least one notebook)."""
    src = Path(course_dir) / SOURCE
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def generate(course_dir=".", names=None, release_dir: str | None = None, workers: int = 1) -> list[str]:
    """Generate ``<release_dir or exercises>/<name>/`` from ``solutions/<name>/`` (all assignments by default).

    With ``workers > 1`` the assignments after the first are generated in parallel (the first one
    alone, since it may create the gradebook's tables).
    """
    names = list(names) if names else assignments(course_dir)
    extra = [f"--CourseDirectory.release_directory={release_dir}",
             f"--CourseDirectory.db_url={db_url(Path(course_dir))}"] if release_dir else []

    def one(name):
        nbgrader("generate_assignment", name, "--force", *extra, course_dir=course_dir)
    if names:
        one(names[0])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, names[1:]))
    return names


def _digest(root: Path, name: str) -> str:
    """A hash of what generating ``name`` reads: its source folder and the nbgrader config."""
    h = hashlib.sha256()
    for path in sorted((root / SOURCE / name).rglob("*")) + [root / "nbgrader_config.py"]:
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def cached_releases(root: Path, names: list[str], workers: int = 1) -> Path:
    """Generated copies of ``names`` in ``grading-cache/releases/``, regenerated only when needed.

    Generating also records the assignment's cells in the gradebook, so it is redone when the source
    folder or the config changed, or when the gradebook is new.
    """
    cache = root / CACHE_DIR
    stamp, releases = cache / "sources.json", cache / "releases"
    known = json.loads(stamp.read_text()) if stamp.exists() and (root / "gradebook.db").exists() else {}
    digest = {n: _digest(root, n) for n in names}
    stale = [n for n in names if known.get(n) != digest[n] or not (releases / n).is_dir()]
    if stale:  # generate() with no names generates every assignment
        generate(root, stale, release_dir=str(releases.resolve()), workers=workers)
    known.update({n: digest[n] for n in stale})
    cache.mkdir(exist_ok=True)
    stamp.write_text(json.dumps(known, indent=1), encoding="utf-8")
    return releases


def db_url(root: Path) -> str:
    """The course's gradebook, with every connection waiting up to ``DB_WAIT_S`` for sqlite's write lock."""
    return f"sqlite:///{(root / 'gradebook.db').resolve()}?timeout={DB_WAIT_S}"


def course_config(root: Path) -> Config:
    """The settings in the course's ``nbgrader_config.py`` (empty without one), as nbgrader reads them."""
    path = Path(root) / "nbgrader_config.py"
    if not path.exists():
        return Config()
    return PyFileConfigLoader(path.name, path=str(path.parent.resolve())).load_config()
