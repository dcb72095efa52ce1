"""Evidence for a problem set's stub list: which callables of the sandbox's library copy return a graded answer.

Run by ``test_grading_stub_evidence.py`` in two fresh interpreters, each as ``python stub_evidence.py MODE IN OUT``:

- ``capture`` (the full library on the path): runs a solution notebook's code cells (hidden tests
  included) under a variant key, and saves, per graded test cell, what the test asked of the learner's
  code and what the (correct) solution gave: each call of a learner's function or method (its inputs and
  result) and each variable read (its value, with the variant's numbers ``V.<name>`` the question's
  cells use as its inputs).
- ``probe`` (the sandbox's library copy, stubs in place, on the path): imports every module of that copy
  and calls every public function, class and method of an object built from the inputs, on each
  question's inputs (positionally as the test called, by matching parameter names, and in every order
  for up to three inputs); a call that raises or runs past a short alarm is no route. A callable is a
  *route* to a question when it gives the expected answer on every case tried (for a numeric value, also
  the answer per one of the question's counts, as ``n * f(S)`` would need), or when a learner's class is
  replaced by a library class whose methods give the recorded results in order. Compositions of two
  library functions cannot be enumerated: the known one (``gather_kv`` then ``dense_attention`` for a
  paged decode) is tried as one callable, :data:`COMPOSITIONS`.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import itertools
import math
import os
import pickle
import re
import signal
import sys
import time
from fractions import Fraction
from pathlib import Path

CALL_ALARM_S = 0.5  # a call running longer is no route (seconds)
CALLABLE_BUDGET_S = 4.0  # seconds one callable may take on one question; past it, it is listed as untried
# A call the alarm cuts lists its callable as untried too: a first call that compiles (numba) can outlast
# the alarm on a slow machine, and its route then goes unseen (ps3's fused kernel, seen only in CI).
MAX_CASES = 8  # cases of a function question tried per callable
MAX_BINDINGS = 260  # ways of calling one callable on one question's inputs (every order of 3 of 7 inputs)


# ---------------------------------------------------------------- capture (full library)

def _capture(notebook: Path, key: str) -> dict:
    """Per graded test cell: ``{"calls": [(label, args, kwargs, result)], "values": [(name, value)],
    "inputs": {V attribute: value}, "params": {learner name: [parameter names]}, "failed": str | None}``."""
    import nbformat
    from pagedkv_lib.course import plain_values
    from pagedkv_lib.course.learner import testcell
    from pagedkv_lib.course.protocol import EntryKind

    nb = nbformat.read(notebook, as_version=4)
    current: dict = {}
    found: dict = {}

    def add(self, kind, label, inputs, outcome):
        if current and "ok" in outcome:
            raw = outcome["ok"]  # an object of the learner's class stays its tag, {"__instance__": n}
            value = raw if isinstance(raw, dict) and set(raw) == {"__instance__"} else plain_values.decode(raw)
            if kind == EntryKind.CALL:
                args, kwargs = inputs
                current["calls"].append((label, tuple(args), dict(kwargs), value))
            elif kind == EntryKind.VALUE:
                current["values"].append((label, value))

    testcell.Recorder._add = add
    testcell.Recorder.__exit__ = lambda self, *exc: False
    ns: dict = {"__name__": "__main__"}
    answer_sources: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        info = cell.metadata.get("nbgrader", {})
        grade_id, source = info.get("grade_id", ""), cell.source
        if grade_id.endswith("_answer"):
            answer_sources[grade_id.removesuffix("_answer")] = source
        graded = bool(info.get("grade")) and info.get("points")
        if graded:
            current.clear()
            current.update(calls=[], values=[], failed=None)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                exec(compile(source, f"<{grade_id or cell.get('id')}>", "exec"), ns)
        except Exception as err:  # noqa: BLE001 (a solution cell that fails: reported, and the test fails)
            if not graded:
                raise
            current["failed"] = f"{type(err).__name__}: {err}"
        if "VARIANT_KEY" in ns and "V" not in ns:
            ns["VARIANT_KEY"] = key
        if graded:
            question = grade_id.removesuffix("_tests")
            used = set(re.findall(r"\bV\.(\w+)", source + answer_sources.get(question, "")))
            V = ns.get("V")
            current["inputs"] = {n: getattr(V, n) for n in sorted(used)
                                 if V is not None and hasattr(V, n) and not callable(getattr(V, n))}
            labels = {c[0].split("#")[0].split("[")[0] for c in current["calls"]}
            current["params"] = {}
            for label in labels:
                target = ns.get(label)
                with contextlib.suppress(TypeError, ValueError):
                    current["params"][label] = list(inspect.signature(target).parameters)
            found[grade_id] = {k: v for k, v in current.items()}
            current.clear()
    return found


# ---------------------------------------------------------------- probe (the sandbox's library copy)

class _Alarm(Exception):
    pass


def _alarm(signum, frame):
    raise _Alarm()


def same(got, want) -> bool:
    """``got`` equals the expected ``want`` (numbers within 1e-6, tensors within 1e-4, same shape)."""
    if type(got).__name__ == "Tensor" or type(want).__name__ == "Tensor":
        import torch
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
            return False
        if tuple(got.shape) != tuple(want.shape) or got.is_complex():
            return False
        return bool(torch.allclose(got.detach().float().cpu(), want.float(), atol=1e-4, rtol=1e-4, equal_nan=False))
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float, Fraction)) and isinstance(got, (int, float, Fraction)):
        if isinstance(want, int) and isinstance(got, int):
            return got == want
        try:
            return math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-9)
        except OverflowError:
            return False
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return set(got) == set(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, (set, frozenset)) and isinstance(got, (set, frozenset)):
        return got == want
    if isinstance(want, str) and isinstance(got, str):
        return got == want
    return False


def _informative(want) -> bool:
    """Whether matching ``want`` says something (not None, a bool, 0, 1, an empty container)."""
    if want is None or isinstance(want, bool):
        return False
    if isinstance(want, (int, float, Fraction)):
        return float(want) not in (0.0, 1.0)
    if isinstance(want, (str, list, tuple, dict, set)):
        return len(want) > 0
    return True


class _Budget:
    """Seconds of alarms left to the callable being probed on one question (see :data:`CALLABLE_BUDGET_S`)."""
    left = CALLABLE_BUDGET_S
    spent_out = False


def _call(fn, args, kwargs):
    """``fn(*args, **kwargs)``, or a sentinel when it raises, prints its way out, or outlasts the alarm
    (and, once the callable has spent its budget of alarms on this question, without calling it)."""
    if _Budget.left <= 0:
        _Budget.spent_out = True
        return _FAILED
    start = time.monotonic()
    try:
        return _call_now(fn, args, kwargs)
    finally:
        _Budget.left -= time.monotonic() - start


def _call_now(fn, args, kwargs):
    signal.setitimer(signal.ITIMER_REAL, CALL_ALARM_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn(*args, **kwargs)
    except _Alarm:
        _Budget.spent_out = True  # this way was not tried to its end
        return _FAILED
    except BaseException as err:  # noqa: BLE001 (anything raised is "no route"; an exit too)
        if isinstance(err, KeyboardInterrupt):
            raise
        return _FAILED
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


_FAILED = object()


def _bindings(fn, inputs: dict, positional: tuple | None = None) -> list[tuple[tuple, dict]]:
    """Ways to call ``fn`` on ``inputs`` (name -> value): as the test called, by parameter name (an input
    named as the parameter, or ending in ``_<parameter>``), and every order of the inputs for its
    required positional parameters (at most three)."""
    out = []
    if positional is not None:
        out.append((positional, {}))
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return out
    named = {}
    for p in params:
        for name, value in inputs.items():
            bare = re.sub(r"^q\d+_", "", name)  # a variant's number, q9_tokens, without its question
            if p.name in (name, bare) or name.endswith("_" + p.name) or p.name.endswith("_" + bare):
                named[p.name] = value
                break
    required = [p for p in params if p.default is p.empty]
    if named and all(p.name in named for p in required):
        out.append(((), named))
    values = list(inputs.values())
    positional_params = [p for p in required if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional_params) == len(required) and 0 < len(required) <= 3 and len(values) >= len(required):
        for order in itertools.permutations(values, len(required)):
            out.append((tuple(order), {}))
    return out[:MAX_BINDINGS]


def _public_callables(root: Path) -> list[tuple[str, object]]:
    """``("module:name", object)`` for every public function and class defined in the library copy's modules."""
    found = []
    package = root / "pagedkv_lib"
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                module = importlib.import_module(name)
        except BaseException:  # noqa: BLE001 (a module that cannot import here offers no route either)
            continue
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                if not getattr(obj, "__pagedkv_hidden__", False):
                    found.append((f"{name}:{attr}", obj))
    return found


def _methods(obj) -> list[tuple[str, object]]:
    out = []
    for attr in dir(type(obj)):
        if attr.startswith("_"):
            continue
        raw = inspect.getattr_static(type(obj), attr, None)
        if isinstance(raw, property) or inspect.isfunction(raw):
            out.append((attr, raw))
    return out


def _gather_then_dense(q, k_cache, v_cache, block_tables, seq_lens):
    """A paged decode composed from the library's ``gather_kv`` and ``dense_attention``, one request at a time."""
    import torch
    from pagedkv_lib.attention.spec import dense_attention, gather_kv
    rows = []
    for b in range(q.shape[0]):
        k, v = gather_kv(k_cache, v_cache, block_tables[b], int(seq_lens[b]))
        rows.append(dense_attention(q[b:b + 1], k, v)[0])
    return torch.stack(rows)


#: Known compositions of library functions, tried as one callable: id (its parts joined by "+") -> code.
COMPOSITIONS = {"pagedkv_lib.attention.spec:gather_kv+pagedkv_lib.attention.spec:dense_attention": _gather_then_dense}


def _function_cases(question: dict) -> list[tuple[str, tuple, dict, object]]:
    calls = [c for c in question["calls"] if "#" not in c[0] and not (isinstance(c[3], dict) and "__instance__" in c[3])]
    if len(calls) > MAX_CASES:
        step = len(calls) / MAX_CASES
        calls = [calls[int(i * step)] for i in range(MAX_CASES)]
    return calls


def _route_for_calls(fn, cases, params: dict) -> bool:
    """Whether one way of calling ``fn`` gives every case's result (and at least one result says something)."""
    if not cases or not any(_informative(c[3]) for c in cases):
        return False
    label = cases[0][0]
    first_inputs = dict(zip(params.get(label, []), cases[0][1]))
    first_inputs.update(cases[0][2])
    for n, (args, kwargs) in enumerate(_bindings(fn, first_inputs, tuple(cases[0][1]) if not cases[0][2] else None)):
        ok = True
        for case_label, cargs, ckwargs, want in cases:
            inputs = dict(zip(params.get(case_label, []), cargs))
            inputs.update(ckwargs)
            ways = _bindings(fn, inputs, tuple(cargs) if not ckwargs else None)
            if n >= len(ways):
                ok = False
                break
            got = _call(fn, *ways[n])
            if got is _FAILED or not same(got, want):
                ok = False
                break
        if ok:
            return True
    return False


def _fits(got, want, inputs: dict, scale) -> bool:
    """``got`` is ``want``, or (``scale`` naming one of the inputs) ``got * inputs[scale]`` is."""
    if scale is None:
        return same(got, want)
    factor = inputs.get(scale)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor == 0:
        return False
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    return same(got * factor, want)


def _route_for_values(fn, variants: list[tuple[dict, object]]) -> bool:
    """Whether one way of calling ``fn`` on each variant's inputs gives its answer (or its answer per one
    of the question's counts) in every variant."""
    if not variants or not any(_informative(want) for _, want in variants):
        return False
    scales = (None, *variants[0][0])
    for n in range(len(_bindings(fn, variants[0][0]))):
        fitting = set(scales)
        for inputs, want in variants:
            ways = _bindings(fn, inputs)
            got = _call(fn, *ways[n]) if n < len(ways) else _FAILED
            fitting = set() if got is _FAILED else {sc for sc in fitting if _fits(got, want, inputs, sc)}
            if not fitting:
                break
        if fitting:
            return True
    return False


def _route_for_class(cls, question: dict) -> bool:
    """Whether ``cls``, built as the learner's class was, gives the recorded results of its first object's
    method calls (by the same method names, at least three informative ones)."""
    calls = question["calls"]
    ctor = next((c for c in calls if "#" not in c[0] and c[3] is not None and isinstance(c[3], dict)
                 and "__instance__" in c[3]), None)
    if ctor is None:
        return False
    label, number = ctor[0], ctor[3]["__instance__"]
    steps = [c for c in calls if c[0].startswith(f"{label}#{number}.")]
    if sum(_informative(c[3]) for c in steps) < 3:
        return False
    obj = _call(cls, ctor[1], ctor[2])
    if obj is _FAILED:
        return False
    for step_label, args, kwargs, want in steps:
        method = _call(getattr, (obj, step_label.rsplit(".", 1)[1]), {})
        got = _FAILED if method is _FAILED or not callable(method) else _call(method, args, kwargs)
        if got is _FAILED or not (same(got, want) or (want is None and got is None)):
            return False
    return True


def _route_by_method(cls, values: list[tuple[dict, object]]) -> str | None:
    """The public method or property of ``cls`` (built from each variant's inputs, every way tried) that gives
    every variant's answer with no further input, else None."""
    if not any(_informative(want) for _, want in values):
        return None
    for n in range(len(_bindings(cls, values[0][0])[:6])):
        objs = []
        for inputs, _ in values:
            ways = _bindings(cls, inputs)
            obj = _call(cls, *ways[n]) if n < len(ways) else _FAILED
            if obj is _FAILED:
                break
            objs.append(obj)
        if len(objs) != len(values):
            continue
        for attr, raw in _methods(objs[0]):
            got = [_call(getattr, (o, attr), {}) for o in objs]
            if not isinstance(raw, property):
                got = [_FAILED if g is _FAILED else _call(g, (), {}) for g in got]
            if all(g is not _FAILED and same(g, want) for g, (_, want) in zip(got, values)):
                return attr
    return None


def _with_bytes(inputs: dict) -> dict:
    """A question's inputs, with each amount in GiB (``*_gib``) also in bytes (``*_bytes``)."""
    out = dict(inputs)
    for name, value in inputs.items():
        if name.endswith("_gib") and isinstance(value, (int, float)):
            out[name.removesuffix("_gib") + "_bytes"] = int(value * 2**30)
    return out


def probe(root: Path, questions: dict) -> dict:
    """``{grade_id: [callable id, ...]}``: the routes found (see the module docstring).

    ``questions[grade_id]`` is the list of :func:`_capture` results for that test cell, one per variant."""
    signal.signal(signal.SIGALRM, _alarm)
    callables = _public_callables(root) + list(COMPOSITIONS.items())
    routes: dict = {}
    slow: dict[str, list[str]] = {}
    for grade_id, per_variant in questions.items():
        found = []
        first = per_variant[0]
        cases = _function_cases(first)
        names = list(dict.fromkeys(name for name, _ in first["values"]))
        by_name = [[(_with_bytes(v["inputs"]), dict(v["values"])[name]) for v in per_variant
                    if v["inputs"] and name in dict(v["values"])] for name in names]
        values = by_name[0] if by_name else []
        if cases and not values:  # a function question's cases, by the learner's parameter names, for methods
            values = [({**dict(zip(first["params"].get(c[0], []), c[1])), **c[2]}, c[3]) for c in cases]
            values = [v for v in values if v[0]]
        classes = any("#" in c[0] for c in first["calls"])
        for ident, obj in callables:
            _Budget.left, _Budget.spent_out = CALLABLE_BUDGET_S, False
            hit = False
            if cases and _route_for_calls(obj, cases, first["params"]):
                hit = True
            elif any(v and _route_for_values(obj, v) for v in (by_name or [values])):
                hit = True
            elif classes and inspect.isclass(obj) and _route_for_class(obj, first):
                hit = True
            elif values and inspect.isclass(obj):
                attr = next((a for v in (by_name or [values]) if v for a in [_route_by_method(obj, v)] if a), None)
                if attr:
                    hit, ident = True, f"{ident}.{attr}"
            if hit:
                found.append(ident)
            elif _Budget.spent_out:
                slow.setdefault(grade_id, []).append(ident)
        routes[grade_id] = found
    routes["__untried__"] = slow  # callables cut by the alarm, or out of budget, before every way was tried
    return routes


def main() -> None:
    mode, source, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if mode == "capture":
        keys = sys.argv[4].split(",")
        result = {key: _capture(source, key) for key in keys}
    else:
        result = probe(Path(os.environ["PYTHONPATH"]), pickle.loads(source.read_bytes()))
    out.write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    main()
