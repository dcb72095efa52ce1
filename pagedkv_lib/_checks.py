"""The argument checks every public function uses, at the library's edge.

Each message names the argument, the bad value and what is allowed, because learners
read these messages. The exception classes live in :mod:`pagedkv_lib.errors`.
"""
from __future__ import annotations

import math
import numbers
from typing import Iterable

from .errors import DuplicateRequestError


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[minimum, maximum]``.

    ``bool`` is rejected (``True`` is not a token count), and so are floats, even
    integral ones such as ``4.0``: a float length usually means a division went wrong.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        allowed = _range_text(minimum, maximum)
        raise TypeError(f"{name} must be an integer{allowed}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range_text(minimum, maximum)}, got {value}")
    return value


def check_ints(name: str, values, *, minimum: int | None = None, maximum: int | None = None,
               what: str = "integers", each: str | None = None) -> list[int]:
    """Return ``values`` (any iterable but a str or bytes) as a list of ``int``, each checked by :func:`check_int`.

    A bad item's message names it ``name[i]``, or ``each`` when given (e.g. ``"each token of
    prompt_ids"``). A str, bytes or non-iterable ``values`` raises ``TypeError`` saying that
    ``name`` must be a sequence of ``what``.
    """
    if not isinstance(values, (str, bytes)):
        try:
            items = iter(values)
        except TypeError:
            items = None
        if items is not None:
            if each is not None:
                return [check_int(each, v, minimum=minimum, maximum=maximum) for v in items]
            return [check_int(f"{name}[{i}]", v, minimum=minimum, maximum=maximum) for i, v in enumerate(items)]
    raise TypeError(f"{name} must be a sequence of {what}, got {values!r} ({type(values).__name__})")


def check_new_id(name: str, request_id, live, state: str = "a live request") -> None:
    """Refuse a request id that is not a non-empty string, or that ``live`` already holds.

    ``state`` says what a live id is, for the ``DuplicateRequestError`` message
    (``"a live request"``, ``"admitted"``).
    """
    if not isinstance(request_id, str) or not request_id:
        raise TypeError(f"{name} must be a non-empty string, got {request_id!r}")
    if request_id in live:
        raise DuplicateRequestError(f"{name} {request_id!r} is already {state}; ids must be unique")


def unhashable_id_error(name: str, request_id) -> TypeError:
    """The error for a request id that cannot even be looked up (an unhashable value)."""
    return TypeError(f"{name} must be a request id (a non-empty string), got {request_id!r} "
                     f"({type(request_id).__name__}, unhashable)")


def check_number(name: str, value, *, low: float, high: float, low_open: bool = False,
                 high_open: bool = False) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number in the given interval."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in {interval}, got {value!r} ({type(value).__name__})")
    value = float(value)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if math.isnan(value) or too_low or too_high:
        raise ValueError(f"{name} must be a number in {interval}, got {value}")
    return value


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices`` (strings), else raise naming them all."""
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _range_text(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""
