"""Bounds every handed-in notebook meets before anything parses it further, checked without recursion.

A submission is a file anyone could have written. Python's JSON decoder, its syntax-tree builder and
nbformat's schema check all recurse once per level of nesting, so a 10 KB file nested 5,000 deep stops
them with ``RecursionError``; a file of gigabytes stops the grader's memory. Here each bound is checked
first, by walking with an explicit stack: the file's size, its JSON nesting, then (on the parsed JSON)
its shape, cell count, each cell's output size and source line length, and each answer cell's syntax
tree depth. A file that breaks one raises :class:`Malformed` (or :class:`Unreadable`, for a file that is
not a notebook at all) with the bound and the value found; the limits are :class:`SubmissionLimits`
settings, read from ``nbgrader_config.py``.
"""
from __future__ import annotations

import ast
import json
import os
import re
import stat
from pathlib import Path

from traitlets import Integer
from traitlets.config import Configurable


class Unreadable(ValueError):
    """The file is not a notebook nbgrader could read; the message says why, for the instructor."""


class Malformed(ValueError):
    """The file is a notebook, but one outside the bounds a notebook is graded within; the message says which."""


class SubmissionLimits(Configurable):
    """What one handed-in notebook may hold; a notebook past any of these is not graded (status ``malformed``)."""

    file_bytes = Integer(50 * 2**20, help="Largest notebook file accepted, in bytes (a problem set with its "
                         "outputs and figures is well under 5 MB).").tag(config=True)
    json_depth = Integer(100, help="Most levels of nested JSON lists and objects in a notebook (a record of "
                         "results needs about 65; the JSON decoder and nbformat recurse once per level).").tag(config=True)
    cells = Integer(2_000, help="Most cells in a notebook (a problem set has under 100).").tag(config=True)
    output_bytes = Integer(20 * 2**20, help="Most bytes of saved outputs in one cell, as JSON (the grader clears "
                           "and reruns them; a figure is about 100 kB).").tag(config=True)
    line_chars = Integer(20_000, help="Longest source line in a cell, in characters.").tag(config=True)
    syntax_depth = Integer(100, help="Deepest syntax tree an answer cell's code may have, in nodes from the "
                           "module down (the grader's own scans walk it; ordinary code stays under 30).").tag(config=True)


_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')


def json_depth(text: str, limit: int) -> int:
    """How deep ``text`` nests JSON lists and objects, counted until it passes ``limit`` (one pass over
    its brackets, quotes and backslashes, no recursion; brackets inside strings do not count)."""
    depth, deepest, in_string, escaped_at = 0, 0, False, -1
    for match in _JSON_SPECIAL.finditer(text):
        at, ch = match.start(), match.group()
        if at == escaped_at:  # the character after a backslash in a string
            continue
        if in_string:
            if ch == "\\":
                escaped_at = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def read_bounded(path: Path, limits: SubmissionLimits, where: str) -> str:
    """The text of the regular file ``path``, read only if its size is within ``limits``; else raise `Malformed`.

    A symbolic link (it could point at the instructor's solution), a FIFO or a device is `Unreadable` and
    never opened: checked with ``lstat``, then opened with ``O_NOFOLLOW`` and checked again."""
    info = os.lstat(path)
    if kind := file_kind(info.st_mode):
        raise Unreadable(f"{where}: {kind}, not a regular file; never followed or read (hand in the notebook "
                         "file itself)")
    if info.st_size > limits.file_bytes:
        raise Malformed(f"{where}: the file is {info.st_size:,} bytes; at most {limits.file_bytes:,} are accepted")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if kind := file_kind(info.st_mode):
            raise Unreadable(f"{where}: {kind}, not a regular file; never read")
        data = f.read(limits.file_bytes + 1)
    if len(data) > limits.file_bytes:
        raise Malformed(f"{where}: the file grew past {limits.file_bytes:,} bytes while read")
    return data.decode("utf-8", errors="replace")


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (from ``lstat``) is, when it is not a regular file; "" when it is."""
    if stat.S_ISREG(mode):
        return ""
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def parse_bounded(text: str, limits: SubmissionLimits, where: str) -> dict:
    """The notebook JSON in ``text``, parsed only once its nesting is within ``limits``, then its shape checked."""
    if len(text) > limits.file_bytes:
        raise Malformed(f"{where}: the file is {len(text):,} characters; at most {limits.file_bytes:,} are accepted")
    depth = json_depth(text, limits.json_depth)
    if depth > limits.json_depth:
        raise Malformed(f"{where}: its JSON nests more than {limits.json_depth} levels deep (found {depth} or more)")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise Unreadable(f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                         "the file may be truncated") from None
    except (RecursionError, MemoryError, ValueError) as err:  # bounded above; said plainly if it happens anyway
        raise Malformed(f"{where}: its JSON could not be decoded ({type(err).__name__})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise Unreadable(f"{where}: JSON but not an nbformat-4 notebook (no 'cells' list or nbformat != 4)")
    check_shape(nb, limits, where)
    return nb


def _is_source(value) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value))


def check_shape(nb: dict, limits: SubmissionLimits, where: str) -> None:
    """Raise :class:`Malformed` unless ``nb`` has the types a notebook's cells have, within ``limits``."""
    if not isinstance(nb.get("metadata", {}), dict):
        raise Malformed(f"{where}: the notebook's metadata is a {type(nb['metadata']).__name__}, not an object")
    cells = nb["cells"]
    if len(cells) > limits.cells:
        raise Malformed(f"{where}: {len(cells):,} cells; at most {limits.cells:,} are accepted")
    for i, cell in enumerate(cells):
        at = f"{where}: cell {i}"
        if not isinstance(cell, dict):
            raise Malformed(f"{at} is a {type(cell).__name__}, not an object")
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise Malformed(f"{at} has cell_type {str(cell.get('cell_type'))[:40]!r} (code, markdown or raw)")
        if not _is_source(cell.get("source", "")):
            raise Malformed(f"{at}: its source is not text")
        meta = cell.get("metadata", {})
        if not isinstance(meta, dict) or not isinstance(meta.get("nbgrader", {}), dict):
            raise Malformed(f"{at}: its metadata (or metadata.nbgrader) is not an object")
        gid = meta.get("nbgrader", {}).get("grade_id")
        if gid is not None and not isinstance(gid, str):
            raise Malformed(f"{at}: its grade_id is a {type(gid).__name__}, not text")
        longest = max((len(line) for line in "".join(cell.get("source", "")).split("\n")), default=0)
        if longest > limits.line_chars:
            raise Malformed(f"{at} has a source line of {longest:,} characters; at most {limits.line_chars:,}")
        outputs = cell.get("outputs", [])
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise Malformed(f"{at}: its outputs are not a list of objects")
        size = len(json.dumps(outputs))  # nesting is bounded above, so this cannot recurse too deep
        if size > limits.output_bytes:
            raise Malformed(f"{at} saved {size:,} bytes of outputs; at most {limits.output_bytes:,}")


def syntax_depth(tree: ast.AST, limit: int) -> int:
    """The depth of ``tree`` in nodes, counted until it passes ``limit`` (an explicit stack, no recursion)."""
    stack, deepest = [(tree, 1)], 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def parse_answer(source: str, limits: SubmissionLimits) -> ast.Module | None:
    """An answer cell's syntax tree, or None when its code does not parse (a learner's syntax error);
    raise :class:`Malformed` when it is deeper than ``limits.syntax_depth``.

    Python's parser guards its own recursion (it raises ``RecursionError`` past the interpreter's
    limit, or ``SyntaxError`` for brackets nested past 200); both are reported here as too deep."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte in the source
        return None
    except (RecursionError, MemoryError):
        raise Malformed(f"an answer cell's code nests deeper than Python's parser allows "
                        f"(at most {limits.syntax_depth} levels are accepted)") from None
    depth = syntax_depth(tree, limits.syntax_depth)
    if depth > limits.syntax_depth:
        raise Malformed(f"an answer cell's syntax tree is more than {limits.syntax_depth} levels deep (found {depth})")
    return tree
