"""What every graded test cell runs first and last, so that its verdict does not depend on learner code.

A test cell starts with ``_check_value, _check_known_mistakes = _testcell.begin("q1_tests")`` and ends
with ``_testcell.end("q1_tests")``. :func:`begin` checks that nothing an earlier cell did changes how the
test judges or reports: the builtins and exception classes the checks use, IPython's error display
(``set_custom_exc``, ``showtraceback``), input and AST transformers and cell event hooks, and globals
that hide one of those builtins. It puts back whatever was changed, then fails the test cell naming what it found. The
checkers it returns are loaded afresh from this package's own ``checks.py`` file, so rebinding
``check_value`` in the notebook, or patching ``pagedkv_lib.course``, changes nothing.

:func:`end` shows a pass marker. The autograder counts a test cell as passed only if its marker is
there, so a hook that hides every error earns nothing: a failing check stops the cell before ``end``.

The snapshot that tampering is measured against is taken when this module is first imported, which is in
the notebook's locked set-up cell, before any answer cell has run. In-kernel grading cannot be sealed:
code written against this module (say, editing its snapshot) can still fool it. The autograder also
flags, from outside the kernel, any answer cell that names the grader's machinery (see ``scan.py``).
"""
from __future__ import annotations

import builtins
import importlib.util
import sys
from pathlib import Path

#: The mime type of the pass marker; the autograder looks for it in each test cell's outputs.
PASS_MIME = "application/vnd.pagedkv.test-passed+json"
#: The words :func:`begin` fails with; the autograder looks for them to flag the student.
TAMPER_TEXT = "an earlier cell changed the grading environment"

BUILTIN_NAMES = ("AssertionError", "BaseException", "Exception", "KeyboardInterrupt", "SystemExit",
                  "isinstance", "issubclass", "type", "len", "set", "sorted", "tuple", "list", "dict",
                  "int", "float", "bool", "str", "repr", "sum", "range", "abs", "round", "any", "all",
                  "zip", "enumerate", "getattr", "callable", "print", "__import__", "__build_class__")
_SNAPSHOT = {name: getattr(builtins, name) for name in BUILTIN_NAMES}
# Cell events a hook could use to forge or hide output (matplotlib's inline backend uses others).
_EVENTS = ("pre_run_cell", "post_run_cell")


def _shell():
    ip = sys.modules.get("IPython")
    return ip.get_ipython() if ip is not None and hasattr(ip, "get_ipython") else None


def _shell_state(ip) -> dict:
    """The parts of an IPython shell that decide whether an error is shown, as comparable copies."""
    if ip is None:
        return {}
    return {"input_transformers_post": list(ip.input_transformers_post),
            "input_transformers_cleanup": list(ip.input_transformers_cleanup),
            "ast_transformers": list(ip.ast_transformers),
            "events": {name: list(ip.events.callbacks.get(name, [])) for name in _EVENTS}}


_SHELL_STATE = _shell_state(_shell())


def _restore_shell(ip) -> list[str]:
    """Put the shell's error reporting back as the snapshot has it; return what had been changed."""
    changed = []
    if ip is None:
        return changed
    if ip.custom_exceptions:
        changed.append("set_custom_exc")
        ip.set_custom_exc((), None)
    for attr in ("showtraceback", "showsyntaxerror", "run_cell", "run_cell_async", "run_ast_nodes"):
        if attr in vars(ip):  # a method replaced on the instance
            changed.append(f"get_ipython().{attr}")
            delattr(ip, attr)
    now = _shell_state(ip)
    for key in ("input_transformers_post", "input_transformers_cleanup", "ast_transformers"):
        if key in _SHELL_STATE and now[key] != _SHELL_STATE[key]:
            changed.append(key)
            getattr(ip, key)[:] = _SHELL_STATE[key]
    if "events" in _SHELL_STATE and now["events"] != _SHELL_STATE["events"]:
        changed.append("events.register")
        for name, cbs in _SHELL_STATE["events"].items():
            ip.events.callbacks[name][:] = cbs
    return changed


def tampering() -> list[str]:
    """Undo changes to the builtins and the shell; return a name for each change.

    ``sys.excepthook`` is not compared: ipykernel swaps it around every execution, and IPython shows a
    cell's error without it (a hook there hides nothing; the scan still flags answers that set it).
    """
    changed = [f"builtins.{n}" for n, v in _SNAPSHOT.items() if getattr(builtins, n, None) is not v]
    for name, value in _SNAPSHOT.items():
        setattr(builtins, name, value)
    return changed + _restore_shell(_shell())


def fresh_checks_module():
    """A new load of this package's ``checks.py`` (no earlier cell can have touched it)."""
    path = Path(__file__).with_name("checks.py")
    spec = importlib.util.spec_from_file_location("_pagedkv_sealed_checks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fresh_checkers():
    """``check_value`` and ``check_known_mistakes`` from a new load of this package's ``checks.py``."""
    module = fresh_checks_module()
    return module.check_value, module.check_known_mistakes


def unshadow(namespace: dict) -> list[str]:
    """Remove globals that hide a builtin the checks use; return those that were functions or classes.

    A test cell's ``tuple(result)`` or ``isinstance(x, int)`` looks in the notebook's globals first, so
    ``tuple = lambda r: (52, 6)`` in an answer cell would decide the test. A plain value under such a name
    (``sum = 0``) is removed too, but is not called tampering.
    """
    hidden = [n for n in BUILTIN_NAMES if n in namespace and namespace[n] is not _SNAPSHOT[n]]
    suspicious = [n for n in hidden if callable(namespace[n])]
    for name in hidden:
        del namespace[name]
    return [f"a global named {n}" for n in suspicious]


def _guard(grade_id: str, namespace: dict) -> None:
    """Undo and report tampering (builtins, shell, shadowing globals in ``namespace``)."""
    changed = tampering() + unshadow(namespace)
    if changed:
        raise AssertionError(f"{grade_id}: {TAMPER_TEXT} ({', '.join(changed)}); this test scores 0. "
                             "Remove that code and rerun.")


def begin(grade_id: str):
    """Start test cell ``grade_id``: undo and report tampering, then return fresh checkers."""
    _guard(grade_id, sys._getframe(1).f_globals)
    return fresh_checkers()


def begin_checks(grade_id: str):
    """Like :func:`begin`, but return the whole fresh checks module (``check_value``, ``require``, ...)."""
    _guard(grade_id, sys._getframe(1).f_globals)
    return fresh_checks_module()


def end(grade_id: str) -> None:
    """Show the pass marker of test cell ``grade_id`` (reached only if every check above passed)."""
    from IPython.display import display
    display({PASS_MIME: {"grade_id": grade_id}, "text/plain": f"{grade_id}: the checks in this cell passed."},
            raw=True)
