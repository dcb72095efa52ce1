"""Find answer cells that touch the grader's machinery, read from outside the kernel (nothing runs).

Nothing in the kernel decides a score (``judge.py``), so these tricks gain nothing; this scan makes each
attempt visible to the instructor anyway.
"""
from __future__ import annotations

import ast
import re

#: Builtins a test cell relies on: an answer that binds a function to one of these names is flagged.
BUILTIN_NAMES = ("AssertionError", "BaseException", "Exception", "KeyboardInterrupt", "SystemExit",
                 "isinstance", "issubclass", "type", "len", "set", "sorted", "tuple", "list", "dict",
                 "int", "float", "bool", "str", "repr", "sum", "range", "abs", "round", "any", "all",
                 "zip", "enumerate", "getattr", "callable", "print", "__import__", "__build_class__")

#: Names an answer has no reason to use: the checkers, the test-cell guard, and the hooks that change
#: how errors are raised or shown.
GRADER_NAMES = frozenset({
    "check_value", "check_known_mistakes", "testcell", "_testcell", "_check_value", "_check_known_mistakes", "_checks",
    "builtins", "__builtins__", "AssertionError", "set_custom_exc", "excepthook", "showtraceback",
    "input_transformers_post", "input_transformers_cleanup", "ast_transformers",
    "CustomTB", "custom_exceptions", "PASS_MIME", "RECORD_MIME", "Recorder", "fresh_checkers", "tampering",
})
_MODULES = ("pagedkv_lib.course", "builtins", "IPython.core")
_BUILTINS = frozenset(BUILTIN_NAMES)
_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def grader_names_used(source: str) -> list[str]:
    """The grader names an answer cell's code uses (sorted), or that its text mentions if it does not parse.

    ``AssertionError`` counts only when assigned to or patched, not when raised or caught; a builtin's
    name counts when a function or lambda is bound to it (``def len``, ``tuple = lambda r: ...``).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics or broken code: fall back to words in the text
        return sorted(set(_TEXT.findall(source)) & (GRADER_NAMES - {"AssertionError"}))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in GRADER_NAMES and node.id != "AssertionError":
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in GRADER_NAMES and node.attr != "AssertionError":
            found.add(node.attr)
        elif isinstance(node, ast.Attribute) and node.attr == "register" and getattr(node.value, "attr", "") == "events":
            found.add("events.register")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found.update(m for m in mods if m.startswith(_MODULES))
            found.update(a.asname or a.name for a in node.names if (a.asname or a.name) in GRADER_NAMES)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in _BUILTINS:
            found.add(f"def {node.name}")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            found.update(f"def {t.id}" for t in node.targets if isinstance(t, ast.Name) and t.id in _BUILTINS)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Name, ast.Attribute)) and "AssertionError" in (getattr(t, "id", ""), getattr(t, "attr", ""))
                   for t in targets):
                found.add("AssertionError")
    return sorted(found)
