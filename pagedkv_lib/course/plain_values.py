"""Learner values as plain JSON data, and a digest of a call's inputs: the values inside a record's entries
(``protocol.py``), encoded in the learner's kernel and decoded by the grader.

JSON holds no object: a value with a rigged ``__eq__`` or ``__int__`` arrives as the plain value it
holds (an ``int`` subclass as its ``int``), or as an opaque tag that equals nothing. Tags, each a dict
with one key: ``__tuple__``, ``__set__``, ``__dict__`` (a list of key, value pairs), ``__float__``
("nan", "inf", "-inf"), ``__tensor__`` (dtype, shape, data), ``__instance__`` (the n-th object of the
learner's class in this test) and ``__object__`` (the type's name: anything else).
"""
from __future__ import annotations

import decimal
import fractions
import hashlib
import json
import math
from typing import Any

def _is(x: Any, kind: type) -> bool:
    return isinstance(x, kind) and not isinstance(x, bool)


def _float(x: float) -> Any:
    x = float.__float__(x)
    return x if math.isfinite(x) else {"__float__": "nan" if x != x else ("inf" if x > 0 else "-inf")}


def encode(x: Any, depth: int = 0) -> Any:
    """``x`` as JSON-ready data; exact types are read through their base class, never their own methods."""
    if depth > 50:
        return {"__object__": "too deeply nested"}
    if x is None or x is True or x is False:
        return x
    if _is(x, int):
        return int.__index__(x)
    if _is(x, float):
        return _float(x)
    if isinstance(x, str):
        return str.__str__(x)
    if type(x) is fractions.Fraction:
        return int(x) if x.denominator == 1 else _float(float(x))
    if type(x) is decimal.Decimal:
        return int(x) if x.is_finite() and x == x.to_integral_value() else _float(float(x))
    if type(x) is list:
        return [encode(v, depth + 1) for v in x]
    if type(x) is tuple:
        return {"__tuple__": [encode(v, depth + 1) for v in x]}
    if type(x) in (set, frozenset):
        return {"__set__": [encode(v, depth + 1) for v in x]}
    if type(x) is dict:
        return {"__dict__": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(x)]}
    module = type(x).__module__.split(".")[0]
    if module == "torch" and type(x).__name__ in ("Tensor", "Parameter"):
        t = x.detach().cpu()
        return {"__tensor__": {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                               "data": encode(t.tolist(), depth + 1)}}
    if module == "numpy" and hasattr(type(x), "tolist"):  # numpy arrays and scalars: the values they hold
        return encode(type(x).tolist(x), depth + 1)
    return {"__object__": type(x).__name__}


class Opaque:
    """A learner's value the record could not hold as data: it equals nothing, and says what it was."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def decode(x: Any) -> Any:
    """The Python value of encoded data (torch tensors come back as tensors)."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) != 1:
        return Opaque("malformed record entry")
    (tag, body), = x.items()
    if tag == "__tuple__":
        return tuple(decode(v) for v in body)
    if tag == "__set__":
        return {decode(v) for v in body}
    if tag == "__dict__":
        return {_hashable(decode(k)): decode(v) for k, v in body}
    if tag == "__float__":
        return float(body)
    if tag == "__tensor__":
        import torch
        dtype = getattr(torch, str(body["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            return Opaque(f"tensor of dtype {body['dtype']!r}")
        return torch.tensor(decode(body["data"]), dtype=dtype).reshape(body["shape"])
    if tag == "__object__":
        return Opaque(str(body))
    return Opaque(f"unknown tag {tag!r}")


def _hashable(k: Any) -> Any:
    return k if isinstance(k, (int, float, str, bool, tuple, type(None))) else repr(k)


def digest(x: Any) -> str:
    """A short hash of a call's inputs, the same in the learner's kernel and in the grader for equal inputs."""
    h = hashlib.sha256()
    _feed(h, x, 0)
    return h.hexdigest()[:16]


def _feed(h, x: Any, depth: int) -> None:
    if depth > 20:
        h.update(b"<deep>")
        return
    module = type(x).__module__.split(".")[0]
    if module == "torch" and type(x).__name__ == "Tensor":
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{list(t.shape)}".encode())
        h.update(t.view(-1).view(__import__("torch").uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, (list, tuple)):
        h.update(f"{type(x).__name__}{len(x)}[".encode())
        for v in x:
            _feed(h, v, depth + 1)
        h.update(b"]")
    elif isinstance(x, dict):
        h.update(f"dict{len(x)}{{".encode())
        for k, v in x.items():
            _feed(h, k, depth + 1)
            _feed(h, v, depth + 1)
        h.update(b"}")
    elif hasattr(x, "__dataclass_fields__"):
        h.update(type(x).__name__.encode())
        for name in x.__dataclass_fields__:
            _feed(h, getattr(x, name), depth + 1)
    else:
        h.update(json.dumps(encode(x), sort_keys=True).encode())
