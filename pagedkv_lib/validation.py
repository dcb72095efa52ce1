"""The argument checks every public function uses, at the library's edge.

Each message names the argument, the bad value and what is allowed, because learners
read these messages. The exception classes live in :mod:`pagedkv_lib.errors`.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Iterable

import numpy as np

from .errors import DuplicateRequestError


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[minimum, maximum]``.

    ``bool`` is rejected (``True`` is not a token count), and so are floats, even
    integral ones such as ``4.0``: a float length usually means a division went wrong.
    """
    if type(value) is int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value  # the common case, without the slower abstract-base-class test below
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


def check_token_ids(name: str, token_ids) -> Sequence[int]:
    """Token ids as a sequence of Python ints >= 0; a list, tuple or range of such ints comes back as is.

    A 1-D integer numpy array and other sequences (not str or bytes) are converted to a list;
    numpy integer scalars become ints. Called on every append, so the common case (a list of
    ints) is a single pass that copies nothing.
    """
    if type(token_ids) is list or isinstance(token_ids, (tuple, range)):
        toks = token_ids
    elif isinstance(token_ids, np.ndarray):
        if token_ids.ndim != 1 or token_ids.dtype.kind not in "iu":
            raise TypeError(f"{name} must be a 1-D sequence of integer token ids, got an array of "
                            f"shape {token_ids.shape} and dtype {token_ids.dtype}")
        toks = token_ids.tolist()
    elif isinstance(token_ids, Sequence) and not isinstance(token_ids, (str, bytes)):
        toks = list(token_ids)
    else:
        raise TypeError(f"{name} must be a sequence of integer token ids, got {token_ids!r} "
                        f"({type(token_ids).__name__})")
    for t in toks:
        if type(t) is not int or t < 0:  # rare: numpy scalars to convert, or a bad id to report
            return check_ints(name, toks, minimum=0)
    return toks


_SALT_TYPES = (str, bytes, int)


def check_salt(name: str, salt) -> None:
    """A prefix-cache salt is None, a str, bytes, an int (not a bool) or a tuple of these.

    Exact types only: equal values of other types (``1.0``, ``True``, an ``IntEnum``) hash and
    compare equal to an int salt, so they would share its cache entries.
    """
    if not _salt_ok(salt):
        raise TypeError(f"{name} must be None, a str, bytes, an int (not a bool) or a tuple of these, so "
                        f"that different salts never compare equal; got {salt!r} ({type(salt).__name__})")


def _salt_ok(salt) -> bool:
    if salt is None or type(salt) in _SALT_TYPES:
        return True
    return type(salt) is tuple and all(_salt_ok(item) for item in salt)


def check_int_array(name: str, values) -> np.ndarray:
    """``values`` as an int64 numpy array; ragged rows and non-integer dtypes are refused.

    An empty float array (what ``np.asarray([])`` gives) counts as an empty integer array.
    """
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged rows: numpy's "inhomogeneous shape"
        raise ValueError(f"{name} must be a rectangular array of integers (every row the same "
                         f"length), got {values!r}") from exc
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


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
