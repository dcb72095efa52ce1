"""The feedback checks graded test cells call: pass right answers, explain wrong ones, never reveal the answer.

Comparisons trust only the expected value: a learner's object with a rigged ``__eq__`` (or an int
subclass that says it equals everything) is judged by the plain value it holds, never by its own methods.
A failure is a :class:`CheckFailed`, which IPython shows as its one-line message, not as a traceback
through this file.
"""
from __future__ import annotations

import decimal
import fractions
import math
import numbers
import operator
from typing import Any, Iterable


class CheckFailed(AssertionError):
    """A check's verdict for the learner: shown as the message alone (IPython calls ``_render_traceback_``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"CheckFailed: {self}"]


def require(condition: Any, message: str) -> None:
    """Fail with ``message`` unless ``condition`` is true (a visible check of type, units or range)."""
    if not condition:
        raise CheckFailed(message)


def check_value(name: str, got: Any, expected: Any, *, rel_tol: float = 1e-9, abs_tol: float = 0.0,
                hint: str = "", misconceptions: Iterable[tuple[Any, str]] = ()) -> None:
    """Pass if ``got`` equals ``expected``; else fail with a learner-facing message.

    Integers must match exactly, and a float is refused where an int is expected; other numbers
    match within ``rel_tol``/``abs_tol``. The message never shows ``expected``. It names what was
    checked and the learner's value, and, when ``got`` matches a known wrong answer in
    ``misconceptions`` (pairs of wrong value and explanation), it says which mistake that value
    points to; otherwise it gives ``hint``.
    """
    __tracebackhide__ = True  # IPython and pytest leave this frame out: the learner sees the message
    if got is None:
        raise CheckFailed(f"{name} is still None: write your answer in the cell above and run it.")
    got = plain(got)
    if _float_for_int(got, expected):
        raise CheckFailed(f"{name} should hold whole numbers (ints), got {_show(got)}: "
                             "use // for integer division, or round where the question says how.")
    if _same(got, expected, rel_tol, abs_tol):
        return
    check_known_mistakes(name, got, misconceptions, rel_tol=rel_tol, abs_tol=abs_tol)
    raise CheckFailed(f"{name} = {_show(got)} is not right. {hint}".rstrip())


def check_known_mistakes(name: str, got: Any, misconceptions: Iterable[tuple[Any, str]], *,
                         rel_tol: float = 1e-9, abs_tol: float = 0.0) -> None:
    """Fail, naming the mistake, if ``got`` equals one of the known wrong answers; else pass.

    Visible test cells use it to explain common mistakes while the exact check stays hidden.
    """
    __tracebackhide__ = True
    got = plain(got)
    for wrong, why in misconceptions:
        if got is not None and _same(got, wrong, rel_tol, abs_tol):
            raise CheckFailed(f"{name} = {_show(got)} is not right. {why}")


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def plain(x: Any) -> Any:
    """numpy scalars and arrays, and torch tensors, as the Python values and lists they hold."""
    if type(x) in (int, float, bool, str, list, tuple, dict) or x is None:
        return x
    if type(x) is fractions.Fraction:  # exact values: a whole one is an int, the rest floats
        return int(x) if x.denominator == 1 else float(x)
    if type(x) is decimal.Decimal:
        return int(x) if x.is_finite() and x == x.to_integral_value() else float(x)
    to_list = getattr(type(x), "tolist", None)  # looked up on numpy/torch types, not on the instance
    return to_list(x) if callable(to_list) and type(x).__module__.split(".")[0] in ("numpy", "torch") else x


def _show(x: Any) -> str:
    """repr of a learner's value, cut to 200 characters (a huge answer must not flood the feedback)."""
    try:
        text = repr(x)
    except Exception:  # a learner's object whose __repr__ raises
        text = f"<{type(x).__name__} object>"
    return text if len(text) <= 200 else text[:200] + "..."


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
    """``a`` (the learner's) equals ``b`` (trusted); only ``b``'s type and plain conversions decide."""
    a, b = plain(a), plain(b)
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b
    if _is_int(a) and _is_int(b):
        value = int.__index__(a) if isinstance(a, int) else operator.index(a)
        return int.__eq__(int(b), value) is True  # exact, and a's own __eq__ is never asked
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, rel_tol, abs_tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a.keys()) == set(b.keys()) and all(_same(a[k], b[k], rel_tol, abs_tol) for k in b)
    return type(a) is type(b) and b == a
