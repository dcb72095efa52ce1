"""The feedback checks graded test cells call: pass right answers, explain wrong ones, never reveal the answer.

Comparisons trust only the expected value: a learner's object with a rigged ``__eq__`` (or an int
subclass that says it equals everything) is judged by the plain value it holds, never by its own methods.
A failure is a :class:`CheckFailed`, which IPython shows as its one-line message, not as a traceback
through this file. Test cells reach learner code through :func:`yours`, so that an error raised inside
the learner's own function (a stub's ``NotImplementedError``, a slip) is one such line too.
"""
from __future__ import annotations

import decimal
import fractions
import itertools
import linecache
import math
import numbers
import operator
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable


class CheckFailed(AssertionError):
    """A check's verdict for the learner: shown as the message alone (IPython calls ``_render_traceback_``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"CheckFailed: {self}"]


class NotWritten(CheckFailed):
    """The learner's function or class is still the stub (it raised ``NotImplementedError``).

    A test that expects the learner's code to raise (say, when the pool is out of blocks) lets this one
    through: a stub has not raised "correctly".
    """


class Skipped(CheckFailed):
    """A test this machine cannot run (the bonus without triton). The learner's kernel shows its message and
    goes on without an error, so Validate passes; the grader, which judges from the record, fails the test
    with the same message, as for any failed check (``instructor/grading/judge.py``)."""


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


def name_slips(what: str, fits: Callable[[frozenset], bool], slips: dict[str, str], *, most: int = 2) -> None:
    """Fail naming the fewest known slips (up to ``most`` at once) that explain a wrong result; else pass.

    ``slips`` maps each slip's key to what to do instead; ``fits(keys)`` says whether the learner's result
    equals the right one computed with the slips ``keys`` (a frozenset) all made. One slip that fits is
    named alone; two that fit only together are named both, so the message never sends the learner to
    one part while another is wrong too. When nothing fits, this passes: the caller then says what the
    failing cases show.
    """
    __tracebackhide__ = True
    for size in range(1, most + 1):
        for combo in itertools.combinations(slips, size):
            if fits(frozenset(combo)):
                found = [slips[key].rstrip(".") for key in combo]
                raise CheckFailed(f"{what}: {found[0]}." if size == 1 else f"{what}: {_COUNTED.get(size, size)} slips at once: "
                                  + "; ".join(f"({i}) {text}" for i, text in enumerate(found, 1)) + ".")


_COUNTED = {2: "two", 3: "three", 4: "four"}


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


def yours(name: str) -> Any:
    """The learner's function or class ``name``, from the calling cell's globals, made safe to call.

    Calling it (and, for a class, every method of the instance it makes) turns a learner's exception
    into one :class:`CheckFailed` line: a stub's ``NotImplementedError`` says the answer is not written
    yet; any other error names the call, the exception and the line of the learner's cell it came
    from. ``KeyboardInterrupt`` and ``SystemExit`` are not ``Exception`` subclasses: they pass through.
    """
    __tracebackhide__ = True
    return yours_in(sys._getframe(1).f_globals, name)


def yours_in(namespace: dict, name: str) -> Any:
    """:func:`yours` for ``name`` in ``namespace`` (a notebook's globals)."""
    __tracebackhide__ = True
    if name not in namespace:
        raise NotWritten(f"{name} is not defined yet: write it in its answer cell above (in place of "
                          "raise NotImplementedError()) and run that cell.")
    target = namespace[name]
    if not callable(target):
        raise CheckFailed(f"{name} should be a {'class' if name[:1].isupper() else 'function'}, "
                          f"got {_show(target)}: run its answer cell again.")
    return Guarded(target, name)


class Guarded:
    """A learner's callable, called inside a guard; an instance of the learner's class comes back guarded too."""

    __slots__ = ("_target", "_name")

    def __init__(self, target: Any, name: str):
        self._target, self._name = target, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        target, name = self._target, self._name
        shown = ", ".join([_arg(a) for a in args] + [f"{k}={_arg(v)}" for k, v in kwargs.items()])
        call = f"{name}({shown if len(shown) <= 150 else shown[:150] + '...'})"
        try:
            result = target(*args, **kwargs)
        except CheckFailed:
            raise
        except Exception as exc:
            if any(isinstance(e, NotImplementedError) for e in _causes(exc)):
                raise NotWritten(f"{name.split('[')[0]} is not written yet: replace raise NotImplementedError() "
                                 "in its answer cell with your code and run that cell.") from None
            raise CheckFailed(f"{call} raised {describe(exc)}") from None
        return GuardedInstance(result, name) if isinstance(target, type) and isinstance(result, target) else result

    def __getitem__(self, key: Any) -> "Guarded":
        """``kernel[grid]``, as a Triton kernel is launched: the launcher is guarded like a call."""
        __tracebackhide__ = True
        target, name = self._target, self._name
        try:
            return Guarded(target[key], f"{name}[{_arg(key)}]")
        except Exception as exc:
            raise CheckFailed(f"{name}[{_arg(key)}] raised {describe(exc)}") from None


class GuardedInstance:
    """An object of a learner's class whose methods, looked up through it, are each :class:`Guarded`."""

    __slots__ = ("_target", "_name")

    def __init__(self, target: Any, class_name: str):
        self._target, self._name = target, class_name

    def __getattr__(self, attr: str) -> Any:
        __tracebackhide__ = True
        target, name = self._target, self._name
        try:
            value = getattr(target, attr)
        except AttributeError:
            raise CheckFailed(f"{name} has no {attr}: the question's interface lists it.") from None
        except Exception as exc:
            raise CheckFailed(f"{name}.{attr} raised {describe(exc)}") from None
        return Guarded(value, f"{name}.{attr}") if callable(value) else value


def _arg(x: Any) -> str:
    """A call argument as the message shows it: tensors and arrays by shape, the rest by a short repr."""
    shape = getattr(x, "shape", None) if type(x).__module__.split(".")[0] in ("numpy", "torch") else None
    if shape is not None:
        return f"<{type(x).__name__} of shape {list(shape)}>"
    text = _show(x)
    return text if len(text) <= 60 else text[:60] + "..."


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first (Triton's interpreter wraps errors)."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    return chain


def describe(exc: BaseException) -> str:
    """``Type: message (line N: source)`` on one line, the line being the learner's that raised it."""
    try:
        message = " ".join(str(exc).split())
    except Exception:  # an exception whose __str__ raises
        message = "(its message could not be shown)"
    message = message if len(message) <= 200 else message[:200] + "..."
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    where = next(filter(None, (_learner_frame(e.__traceback__) for e in reversed(_causes(exc)))), None)
    if where is None:
        return text
    lineno, source = where
    return f"{text} (line {lineno}: {source})" if source else f"{text} (line {lineno})"


def _learner_frame(tb) -> tuple[int, str] | None:
    """(line, source) of the innermost frame in learner code: not in Python, an installed package or this library."""
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    ours = str(Path(__file__).resolve().parents[2])
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if not any(filename.startswith(p) for p in installed | {ours}):
            found = (lineno, linecache.getline(filename, lineno).strip())
    return found


def isolated(label: str, fn: Any, *args: Any, timeout_s: float = 300) -> Any:
    """``fn(*args)`` run in a forked child process, so that a crash costs one line, not the kernel.

    A learner's Triton kernel that stores outside its tensor can kill the process that launches it. Here
    the child dies instead, and the crash comes back as a :class:`CheckFailed` naming the signal and its
    likely cause; an exception in the child comes back as one line too. The result travels by pickle.
    Past ``timeout_s`` seconds (or on an interrupt), the child and every process it started are killed:
    the child leads a process group of its own.
    """
    import os
    import pickle
    import select
    import signal
    import time
    if not hasattr(os, "fork"):
        return fn(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the result or the one-line failure, and leave without cleanup
        os.setpgid(0, 0)
        os.close(read)
        try:
            payload = ("ok", fn(*args))
        except CheckFailed as failed:
            payload = ("failed", str(failed))
        except BaseException as exc:
            payload = ("failed", f"{label} raised {describe(exc)}")
        try:
            data = pickle.dumps(payload)
        except Exception:
            data = pickle.dumps(("failed", f"{label} returned a value that cannot be sent back"))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write)
    os.set_blocking(read, False)
    poller = select.poll()
    poller.register(read, select.POLLIN)
    chunks, deadline, exited = [], time.monotonic() + timeout_s, False

    def drain() -> None:  # what the child has written so far (it may not fit the pipe at once)
        while True:
            try:
                chunk = os.read(read, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    try:
        while not exited:  # until the child exits (not reaped yet, so its group id stays its own)
            left = deadline - time.monotonic()
            if left <= 0:
                raise CheckFailed(f"{label} ran past {timeout_s:.0f} s")
            poller.poll(min(left, 0.05) * 1000)
            drain()
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        drain()  # its last bytes, written just before it left
    finally:  # done, past its time or interrupted (a KeyboardInterrupt from nbclient): all it started goes
        os.close(read)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise CheckFailed(f"{label} crashed the process ({name}): most likely a tl.store or tl.load whose "
                          "offsets point outside its tensor (a sign or an index in a pointer sum)")
    kind, value = pickle.loads(b"".join(chunks)) if chunks else ("failed", f"{label} stopped with no result")
    if kind == "failed":
        raise CheckFailed(value)
    return value
