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


#: What an answer has no reason to reach for, by kind: other frames, the garbage collector, threads and
#: processes, and methods that let a value lie about itself (defined in an answer's class).
REACHES = {
    "frame inspection": {"_getframe", "currentframe", "stack", "f_back", "f_locals", "f_globals", "settrace",
                         "setprofile", "tb_frame", "gi_frame"},
    "garbage-collector hunting": {"get_objects", "get_referrers", "get_referents"},
    "threads or processes": {"Thread", "start_new_thread", "fork", "forkpty", "Popen", "system", "popen", "spawnv",
                             "spawnl", "posix_spawn", "execv", "execve", "Process", "Pool"},
    "rigged comparisons or conversions": {"__eq__", "__ne__", "__int__", "__index__", "__float__", "__bool__",
                                          "__instancecheck__", "__subclasscheck__", "__getattribute__"},
}
#: Text naming the grader's files, another folder, or an absolute path: an answer needs only its own notebook.
_OUTSIDE = re.compile(r"^/|\.\./|submitted|autograded|gradebook|solutions|grades\.csv|status\.csv|grading-|site-packages|"
                      r"\.venv|pagedkv_lib/")


def reaches(source: str) -> list[str]:
    """What an answer cell reaches for outside its own question (see :data:`REACHES`), as ``kind (names)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: dict[str, set] = {}
    for node in ast.walk(tree):
        name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                else node.name if isinstance(node, ast.FunctionDef) else None)
        for kind, names in REACHES.items():
            if name in names and (kind != "rigged comparisons or conversions" or isinstance(node, ast.FunctionDef)):
                found.setdefault(kind, set()).add(name)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _OUTSIDE.search(node.value):
            found.setdefault("files outside its sandbox", set()).add(repr(node.value[:60]))
    return [f"{kind} ({', '.join(sorted(names))})" for kind, names in sorted(found.items())]


def library_calls(source: str, graded: list[str]) -> list[str]:
    """The library definitions in ``graded`` (``"pagedkv_lib.module:name"``) that an answer cell imports or uses."""
    wanted = {g.replace(":", ".") for g in graded}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return sorted(w for w in wanted if w.rsplit(".", 1)[1] in source and "pagedkv_lib" in source)
    aliases, found = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.update({full} & wanted)
                aliases[a.asname or a.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                full = ".".join([aliases[inner.id], *reversed(parts)])
                found.update(w for w in wanted if full == w or full.startswith(w + "."))
    return sorted(found)
