"""The instructor's workflow around nbgrader, and the feedback helpers graded test cells call.

Course layout (see ``nbgrader_config.py``): instructor notebooks in ``solutions/<assignment>/``,
student copies generated into ``exercises/<assignment>/``, submissions in
``submitted/<student>/<assignment>/``. Command line, from the repository root::

    python -m pagedkv_lib.course generate    # solutions/ -> exercises/
    python -m pagedkv_lib.course autograde   # submitted/ -> autograded/, gradebook.db, grades.csv
    python -m pagedkv_lib.course feedback    # autograded/ -> feedback/ (HTML, hidden tests removed)
"""
from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import PagedKVError

SOURCE, RELEASE, SUBMITTED = "solutions", "exercises", "submitted"


# ---------------------------------------------------------------- feedback for test cells

def check_value(name: str, got: Any, expected: Any, *, rel_tol: float = 1e-9, abs_tol: float = 0.0,
                hint: str = "", misconceptions: Iterable[tuple[Any, str]] = ()) -> None:
    """Pass if ``got`` equals ``expected``; else fail with a learner-facing message.

    Integers must match exactly, and a float is refused where an int is expected; other numbers
    match within ``rel_tol``/``abs_tol``. The message never shows ``expected``. It names what was checked and the learner's value, and, when
    ``got`` matches a known wrong answer in ``misconceptions`` (pairs of wrong value and explanation),
    it says which mistake that value points to; otherwise it gives ``hint``.
    """
    if got is None:
        raise AssertionError(f"{name} is still None: write your answer in the cell above and run it.")
    got = _plain(got)
    if _float_for_int(got, expected):
        raise AssertionError(f"{name} should hold whole numbers (ints), got {got!r}: "
                             "use // for integer division, or round where the question says how.")
    if _same(got, expected, rel_tol, abs_tol):
        return
    check_known_mistakes(name, got, misconceptions, rel_tol=rel_tol, abs_tol=abs_tol)
    raise AssertionError(f"{name} = {got!r} is not right. {hint}".rstrip())


def check_known_mistakes(name: str, got: Any, misconceptions: Iterable[tuple[Any, str]], *,
                         rel_tol: float = 1e-9, abs_tol: float = 0.0) -> None:
    """Fail, naming the mistake, if ``got`` equals one of the known wrong answers; else pass.

    Visible test cells use it to explain common mistakes while the exact check stays hidden.
    """
    got = _plain(got)
    for wrong, why in misconceptions:
        if got is not None and _same(got, wrong, rel_tol, abs_tol):
            raise AssertionError(f"{name} = {got!r} is not right. {why}")


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _plain(x: Any) -> Any:
    """numpy scalars and arrays, and torch tensors, as the Python values and lists they hold."""
    return x.tolist() if callable(getattr(x, "tolist", None)) else x


def _float_for_int(got: Any, expected: Any) -> bool:
    """True where ``expected`` holds an int and ``got`` a float at the same place (at any depth)."""
    if _is_int(expected):
        return isinstance(got, float)
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return any(_float_for_int(g, e) for g, e in zip(got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return any(_float_for_int(got[k], expected[k]) for k in expected.keys() & got.keys())
    return False


def _same(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    a, b = _plain(a), _plain(b)
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b
    if _is_int(a) and _is_int(b):
        return a == b  # exact: a float answer must not pass by rounding (10**18 + 1 is not 1e18)
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, rel_tol, abs_tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rel_tol, abs_tol) for k in a)
    return a == b


def concise_errors(nb):
    """Cut every error output of a notebook down to its last line (``AssertionError: message``).

    Feedback should tell learners what went wrong, not show the hidden test lines a traceback quotes.
    """
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
    return nb


try:  # the nbconvert hook nbgrader_config.py names; nbconvert comes with the course extra
    from nbconvert.preprocessors import Preprocessor as _Preprocessor
    from traitlets import Bool

    class ConciseErrors(_Preprocessor):
        """nbconvert preprocessor applying :func:`concise_errors` (used for feedback)."""

        enabled = Bool(True)  # nbconvert preprocessors are off unless enabled

        def preprocess(self, nb, resources):
            return concise_errors(nb), resources
except ImportError:  # pragma: no cover - only without the course extra
    pass


# ---------------------------------------------------------------- the nbgrader workflow

def assignments(course_dir: str | os.PathLike = ".") -> list[str]:
    """Names of the assignments in ``solutions/`` (folders holding at least one notebook)."""
    src = Path(course_dir) / SOURCE
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def nbgrader(*args: str, course_dir: str | os.PathLike = ".") -> str:
    """Run ``nbgrader ARGS`` in ``course_dir`` and return its log; raise with the log's tail on failure.

    The running interpreter's ``bin`` goes first on PATH because nbgrader runs ``alembic`` as a
    subprocess when it creates a gradebook.
    """
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course_dir, env=env,
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise PagedKVError(f"nbgrader {' '.join(args)} failed (exit {proc.returncode}):\n{log[-3000:]}")
    return log


def generate(course_dir: str | os.PathLike = ".", names: Sequence[str] | None = None) -> list[str]:
    """Regenerate ``exercises/<name>/`` from ``solutions/<name>/`` for each assignment (all by default)."""
    names = list(names) if names else assignments(course_dir)
    for name in names:
        nbgrader("generate_assignment", name, "--force", course_dir=course_dir)
    return names


def graded_cell_ids(notebook: str | os.PathLike) -> list[str]:
    """The ``grade_id`` of every graded or solution cell in a notebook, in order."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    ids = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") or meta.get("solution"):
            ids.append(meta.get("grade_id"))
    return ids


def missing_graded_cells(submission: str | os.PathLike, release: str | os.PathLike) -> list[str]:
    """Grade ids present in the released notebook but absent from a submission.

    nbgrader scores a graded cell that was deleted, or lost its metadata (say in an editor that
    drops it), as 0 without any error; this makes that visible before grades go out.
    """
    have = set(graded_cell_ids(submission))
    return [g for g in graded_cell_ids(release) if g not in have]


def autograde(course_dir: str | os.PathLike = ".", grades_csv: str = "grades.csv") -> list[str]:
    """Autograde every submission in ``submitted/`` and export all grades to ``grades_csv``.

    The gradebook learns each assignment's graded cells from ``solutions/`` (generated into a
    temporary folder, so ``exercises/`` is left alone). Returns warnings about submissions missing
    graded cells; they are printed too, because such cells silently score 0.
    """
    root = Path(course_dir)
    sub_root = root / SUBMITTED
    if not sub_root.is_dir():
        raise PagedKVError(f"nothing to grade: {sub_root} does not exist "
                           f"(expected {SUBMITTED}/<student>/<assignment>/<notebook>.ipynb)")
    known = set(assignments(root))
    todo = sorted({p.parent.name for p in sub_root.glob("*/*/*.ipynb")})
    unknown = [a for a in todo if a not in known]
    if unknown:
        raise PagedKVError(f"submissions for unknown assignments {unknown}; known: {sorted(known)}")
    warnings = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in todo:
            nbgrader("generate_assignment", name, "--force",
                     f"--CourseDirectory.release_directory={scratch}", course_dir=root)
            for sub in sorted(sub_root.glob(f"*/{name}/*.ipynb")):
                missing = missing_graded_cells(sub, Path(scratch) / name / sub.name)
                if missing:
                    warnings.append(f"{sub.relative_to(root)}: graded cells missing (scored 0): {missing}")
            nbgrader("autograde", name, "--force", course_dir=root)
    nbgrader("export", f"--to={grades_csv}", course_dir=root)
    for w in warnings:
        print("WARNING:", w, file=sys.stderr)
    return warnings


def feedback(course_dir: str | os.PathLike = ".") -> None:
    """Write HTML feedback for every autograded submission into ``feedback/``."""
    root = Path(course_dir)
    for name in sorted({p.parent.name for p in (root / "autograded").glob("*/*/*.ipynb")}):
        nbgrader("generate_feedback", name, "--force", course_dir=root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedkv_lib.course", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["generate", "autograde", "feedback"])
    parser.add_argument("--course-dir", default=".", help="repository root (default: current folder)")
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            print("generated:", ", ".join(generate(args.course_dir)))
        elif args.command == "autograde":
            autograde(args.course_dir)
            print("grades written to grades.csv")
        else:
            feedback(args.course_dir)
            print("feedback written to feedback/")
    except PagedKVError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
