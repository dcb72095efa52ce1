"""Numbers a learner can read in a released problem set, and the hidden values they must not give away."""
from __future__ import annotations

import ast
import math
import re
from fractions import Fraction
from pathlib import Path

#: A visible number "one factor" from a hidden value: x2 for K and V, x8 for bits or 64/8 heads.
FACTORS = (1, 2, 8)
_NUMBER = re.compile(r"(?<![\w.])\d[\d_,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ENV = {"GiB": 2**30}


def _constant(node: ast.AST):
    """The value of a constant expression (``2 * 32 * 128``, ``40 * GiB``), or None."""
    try:
        value = eval(compile(ast.Expression(node), "<visible>", "eval"), {"__builtins__": {}}, dict(_ENV))
    except Exception:
        return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _nodes(source: str) -> list:
    """Every node of a code cell's syntax tree (none for a cell that does not parse, such as a magic)."""
    try:
        return list(ast.walk(ast.parse(source)))
    except SyntaxError:
        return []


def code_numbers(source: str) -> set:
    """Literals of a code cell and the values of its constant sub-expressions."""
    found = set()
    for node in _nodes(source):
        if isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp)):
            value = _constant(node)
            if value is not None:
                found.add(value)
    return found


def text_numbers(text: str) -> set:
    """Numbers written in prose: 3072, 262,144, 6.74e9."""
    found = set()
    for token in _NUMBER.findall(text):
        token = token.rstrip(",").replace(",", "").replace("_", "")
        try:
            found.add(float(token) if any(ch in token for ch in ".eE") else int(token))
        except ValueError:
            pass
    return found


def worth_checking(value) -> bool:
    """Scalars that could identify an answer: non-integral numbers, and integers from 1000 up.

    Smaller integers (block sizes, layer counts, the lengths of random sweeps) are everywhere in a
    problem set and identify nothing.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value != int(value) or abs(value) >= 1000


def near(visible, hidden) -> bool:
    """True if ``visible`` equals ``hidden`` or sits one factor (see FACTORS) from it."""
    v, h = Fraction(visible), Fraction(hidden)
    factors = FACTORS if h.denominator == 1 else (1, 2)  # a fraction of a slot: only halving is a slip
    return any(v == h * f or v * f == h for f in factors)


def leaks(visible: set, hidden: set) -> list[tuple]:
    """(visible number, hidden value) pairs that give a hidden value away."""
    return sorted((v, h) for h in hidden if worth_checking(h) for v in visible
                  if (worth_checking(v) or h != int(h)) and near(v, h))


_LIST = re.compile(r"\[\s*-?\d+(?:\s*,\s*-?\d+)+\s*\]")


def code_lists(source: str) -> set[tuple]:
    """Lists and tuples of two or more integers written as literals in a code cell."""
    found = set()
    for node in _nodes(source):
        if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) >= 2:
            try:
                value = ast.literal_eval(node)
            except ValueError:
                continue
            if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
                found.add(tuple(value))
    return found


def text_lists(text: str) -> set[tuple]:
    """Bracketed lists of two or more integers written in prose or code spans: ``[28, 31, 8, 37]``."""
    return {tuple(int(x) for x in m.strip("[] ").split(",")) for m in _LIST.findall(text)}


def learner_leaks(static: set, printed: set, answers: set) -> list[tuple]:
    """Leaks of one learner's ``answers`` (their expected values on their own numbers): a number the
    set-up cell ``printed`` for them at or one factor from an answer, or an answer written as it is in
    the released notebook's ``static`` text (the same for everyone; one factor from it would be chance,
    since the text does not know the learner's numbers)."""
    exact = {(v, h) for h in answers if worth_checking(h) for v in static if Fraction(v) == Fraction(h)}
    return sorted(set(leaks(printed, answers)) | exact)


def visible_checks_source(name: str) -> str:
    """The source of set ``name``'s visible checks in the library (``course/learner/pset_checks``), which
    its test cells call: a learner reads it as they read the cells."""
    return (Path(__file__).resolve().parents[1] / "pagedkv_lib" / "course" / "learner" / "pset_checks"
            / f"{name}.py").read_text(encoding="utf-8")
