"""Every dotted code name a learner reads in backticks names something that exists (issue 36: ps3 cited
`allocator.BlockManager`, a module the library no longer has).

Scanned: the markdown of every lesson and every problem set (the instructor's copies, from which the
released ones are generated) and the README. A name such as `blocks.manager.BlockManager` or
`acc.kv_capacity(...)` is resolved with importlib and getattr: its first part is a module of this library
(by its last name, as a lesson's text shortens it), a short name the lessons bind (``ALIASES``), an
importable module, or a variant's numbers (`V.q1_tokens`, resolved on the set's own practice numbers).
File names (`grades.csv`) are not code. What is left must be in ``NOT_OURS`` with the reason.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from pathlib import Path

import nbformat
import pytest

import pagedkv_lib
from pagedkv_lib.course.learner.variants import SETS, for_set

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
FILE_ENDINGS = {"py", "json", "csv", "txt", "db", "ipynb", "toml", "Dockerfile", "max"}

ALIASES = {
    "acc": "pagedkv_lib.accounting",           # `from pagedkv_lib import accounting as acc` in the lessons
    "W": "pagedkv_lib.lesson.gates",           # `from pagedkv_lib.lesson import gates as W`
    "tl": "triton.language",                   # Triton's own convention
    "bm": "pagedkv_lib.blocks.manager:BlockManager",        # lesson 03's manager
    "the_lab": "pagedkv_lib.lesson.lab_view:AllocationLab",   # lesson 04's lab
    "_t": "pagedkv_lib.course.learner.testcell:Recorder",   # a set's test cell recorder (`testcell.begin`)
}

NOT_OURS = {
    # notebook metadata keys, written as paths into the .ipynb's JSON, not Python attributes
    "metadata.pagedkv.graded_functions": "a solution notebook's metadata key",
    "metadata.pagedkv.kept_visible": "a solution notebook's metadata key",
}


def _sources() -> list[tuple[str, str]]:
    out = [(p.stem, "\n".join(c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown"))
           for p in sorted((ROOT / "notebooks").glob("0*.ipynb")) + sorted((ROOT / "solutions").glob("*/*.ipynb"))]
    return out + [("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))]


@functools.lru_cache(maxsize=1)
def _library_modules() -> tuple[str, ...]:
    return ("pagedkv_lib", *(m.name for m in pkgutil.walk_packages(pagedkv_lib.__path__, "pagedkv_lib.")))


def _modules_named(leaf: str) -> list[str]:
    return [n for n in _library_modules() if n.rsplit(".", 1)[-1] == leaf]


def _resolve_from(start, rest: list[str]) -> bool:
    obj = start
    for part in rest:
        if not hasattr(obj, part):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except (ImportError, AttributeError):
                return False
        obj = getattr(obj, part)
    return True


def _root(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def resolves(name: str, where: str) -> bool:
    """Whether the dotted ``name``, read in ``where`` (a lesson, a set or the README), names something real."""
    first, *rest = name.split(".")
    if first == "V":
        sets = [where] if where.startswith("ps") else list(SETS)   # the README speaks of every set
        return any(hasattr(for_set(s, ""), rest[0]) for s in sets)
    starts = [_root(ALIASES[first])] if first in ALIASES else []
    starts += [importlib.import_module(m) for m in _modules_named(first)]
    if not starts:
        try:
            starts = [importlib.import_module(first)]
        except ImportError:
            return False
    return any(_resolve_from(s, rest) for s in starts)


def unresolved(sources) -> list[str]:
    return [f"{where}: `{name}`" for where, text in sources
            for name in dict.fromkeys(m.group(1) for m in NAME.finditer(text))
            if name.rsplit(".", 1)[-1] not in FILE_ENDINGS and name not in NOT_OURS and not resolves(name, where)]


def test_every_dotted_code_name_in_a_lesson_a_set_or_the_readme_resolves():
    bad = unresolved(_sources())
    assert not bad, "these names in backticks name nothing (fix the text, or add a name that is not ours to " \
                    "NOT_OURS with its reason):\n" + "\n".join(bad)


def test_a_name_that_is_gone_is_caught_and_real_ones_pass():
    said = [("ps3_code", "reference versions (`allocator.BlockManager`, `attention.spec.paged_decode_gather`)"),
            ("03_code", "`blocks.manager.BlockManager`, `acc.kv_capacity(name, 80)`, `bm.add_stuff`")]
    assert unresolved(said) == ["ps3_code: `allocator.BlockManager`", "03_code: `bm.add_stuff`"]


@pytest.mark.parametrize("name", sorted(NOT_OURS))
def test_every_exemption_says_why_and_is_still_used(name):
    assert NOT_OURS[name].strip()
    assert any(f"`{name}`" in text for _, text in _sources()), f"{name} is no longer written anywhere"
