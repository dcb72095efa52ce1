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
    "CustomTB", "custom_exceptions", "PASS_MIME", "RECORD_MIME", "Recorder",
})
_MODULES = ("pagedkv_lib.course", "builtins", "IPython.core")
_BUILTINS = frozenset(BUILTIN_NAMES)
_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PARSE = object()
"""The default ``tree`` of each scan: parse ``source`` here. The intake passes the tree it already parsed
(``submission_bounds.parse_answer``; None when the code does not parse), so each answer is parsed once."""


def _tree(source: str, tree) -> ast.Module | None:
    if tree is not PARSE:
        return tree
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # magics, broken or too deep to parse
        return None


def grader_names_used(source: str, tree=PARSE) -> list[str]:
    """The grader names an answer cell's code uses (sorted), or that its text mentions if it does not parse.

    ``AssertionError`` counts only when assigned to or patched, not when raised or caught; a builtin's
    name counts when a function or lambda is bound to it (``def len``, ``tuple = lambda r: ...``).
    """
    tree = _tree(source, tree)
    if tree is None:  # magics, broken or too deep: words in the text
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


#: What an answer has no reason to reach for, by kind: ``(module, name)`` pairs (``name`` None: anything
#: from that module), attributes of frames, and methods that let a value lie about itself (defined in an
#: answer's class). Names alone (a method called ``fork``) are not enough: the module must be the real one.
REACHES = {
    "frame inspection": {("sys", "_getframe"), ("sys", "settrace"), ("sys", "setprofile"), ("inspect", "currentframe"),
                         ("inspect", "stack"), ("inspect", "getouterframes"), ("traceback", "walk_stack")},
    "garbage-collector hunting": {("gc", "get_objects"), ("gc", "get_referrers"), ("gc", "get_referents")},
    "threads or processes": {("threading", None), ("_thread", None), ("subprocess", None), ("multiprocessing", None),
                             ("concurrent.futures", None), ("os", "fork"), ("os", "forkpty"), ("os", "system"),
                             ("os", "popen"), ("os", "posix_spawn"), ("os", "spawnv"), ("os", "spawnl"), ("os", "execv"),
                             ("os", "execve"), ("os", "kill"), ("pty", None)},
}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame"}
_RIGGED = {"__eq__", "__ne__", "__int__", "__index__", "__float__", "__bool__", "__instancecheck__",
           "__subclasscheck__", "__getattribute__"}
#: Text naming the grader's files, another folder, or an absolute path: an answer needs only its own notebook.
_OUTSIDE = re.compile(r"^/|\.\./|submitted|autograded|gradebook|solutions|grades\.csv|status\.csv|grading-|site-packages|"
                      r"\.venv|pagedkv_lib/")


def _kind_of(module: str, name: str | None) -> str | None:
    for kind, pairs in REACHES.items():
        if (module, name) in pairs or (module, None) in pairs or any(module.startswith(m + ".") for m, n in pairs if n is None):
            return kind
    return None


def reaches(source: str, tree=PARSE) -> list[str]:
    """What an answer cell reaches for outside its own question, as ``kind (names)``: other frames, the
    garbage collector, threads or processes, rigged comparison or conversion methods, and paths outside
    its notebook's folder."""
    tree = _tree(source, tree)
    if tree is None:  # broken, or too deep to parse
        return []
    found: dict[str, set] = {}
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if kind := _kind_of(a.name, None if "." not in a.name else a.name.rsplit(".", 1)[1]):
                    found.setdefault(kind, set()).add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                if kind := _kind_of(node.module, a.name):
                    found.setdefault(kind, set()).add(f"{node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            if kind := _kind_of(module, node.attr):
                found.setdefault(kind, set()).add(f"{module}.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
            found.setdefault("frame inspection", set()).add(node.attr)
        if isinstance(node, ast.FunctionDef) and node.name in _RIGGED:
            found.setdefault("rigged comparisons or conversions", set()).add(node.name)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _OUTSIDE.search(node.value):
            found.setdefault("files outside its sandbox", set()).add(repr(node.value[:60]))
    return [f"{kind} ({', '.join(sorted(names))})" for kind, names in sorted(found.items())]


def library_calls(source: str, graded: list[str], tree=PARSE) -> list[str]:
    """The library definitions in ``graded`` (``"pagedkv_lib.module:name"``) that an answer cell imports or uses."""
    wanted = {g.replace(":", ".") for g in graded}
    tree = _tree(source, tree)
    if tree is None:  # broken, or too deep to parse
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
