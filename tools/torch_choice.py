"""Which torch `make setup` installs: reuse one already there, PyTorch's CPU-only wheels, or the default.

    python tools/torch_choice.py MODE venv|pip

MODE (``make setup TORCH=...``):
  auto   reuse a torch >= 2.4 that the Python running make already has (a conda env, Colab); else default
  reuse  the same, but fail when there is none
  cpu    PyTorch's CPU-only wheel index (download.pytorch.org/whl/cpu): no CUDA libraries
  pypi   the package index as configured for pip (on Linux that torch is the CUDA build)

``venv`` prints the extra arguments for ``python -m venv`` and ``pip`` those for ``pip install``
(constraints included), one shell word per line, so the Makefile stays a one-liner.
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

MODES = ("auto", "reuse", "cpu", "pypi")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MINIMUM = (2, 4)
REPO = Path(__file__).resolve().parents[1]


def installed_torch() -> str | None:
    """The version of torch this interpreter can import, or None."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def compatible(version: str | None) -> bool:
    """True for a torch release >= 2.4 (local tags such as ``+cpu`` or ``+cu121`` are fine)."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(match) and tuple(map(int, match.groups())) >= MINIMUM


def choose(mode: str, version: str | None) -> str:
    """``"reuse"``, ``"cpu"`` or ``"pypi"`` for ``mode`` when the interpreter has torch ``version``."""
    if mode not in MODES:
        raise ValueError(f"TORCH must be one of {', '.join(MODES)}, got {mode!r}")
    if mode in ("auto", "reuse") and compatible(version):
        return "reuse"
    if mode == "reuse":
        raise ValueError(f"TORCH=reuse needs torch >= 2.4 in the Python that runs make, found "
                         f"{version or 'none'}; use TORCH=cpu or TORCH=pypi")
    return "pypi" if mode == "auto" else mode


def unpinned_constraints(dest: Path) -> Path:
    """constraints.txt without its torch pin, so pip keeps the torch that is there."""
    lines = (REPO / "constraints.txt").read_text().splitlines()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(l for l in lines if not l.startswith("torch==")) + "\n")
    return dest


def arguments(choice: str, what: str, venv: Path) -> list[str]:
    if what == "venv":
        return ["--system-site-packages"] if choice == "reuse" else []
    if choice == "reuse":
        return ["-c", str(unpinned_constraints(venv / "constraints-reuse.txt"))]
    return ["-c", "constraints.txt"] + (["--extra-index-url", CPU_INDEX] if choice == "cpu" else [])


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("venv", "pip"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        choice = choose(argv[0], installed_torch())
    except ValueError as err:
        print(f"make setup: {err}", file=sys.stderr)
        return 2
    print("\n".join(arguments(choice, argv[1], REPO / ".venv")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
