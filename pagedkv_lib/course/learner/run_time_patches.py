"""Whether the code a test cell records through was changed while the kernel ran (patched at run time).

A test cell's record is only worth what the code that made it is worth: the recorder (``testcell``), the
checks (``checks``), the sets' checks (``pset_checks``), the variants, the protocol, the value encoding,
the builtins they call and the kernel's display publisher, which carries the record out. Code in a
notebook can rebind any of them, through a name it computes (``setattr(sys.modules[...], ...)``), so
reading the notebook's source cannot see it. Here the objects themselves are compared with the files:

- every function and method these modules define at top level must carry the code object Python compiles
  from the module's file, found under the library's own folder or the Python installation and venv (read-only
  in the grader's sandbox), at the same qualified name, with that module's globals and no closure (a
  method's ``super()`` cell excepted, holding its own class);
- every name they import must still be the object it names, each module must be the one in
  ``sys.modules``, a plain module, and no instance of theirs may hold a method of its own;
- the builtins they use must be the interpreter's own, and the display publisher (IPython's or ipykernel's)
  must be its class's, with no method of its own and no transform hook.

:func:`found` runs the whole comparison (the sources are compiled once per kernel) and remembers what it
found for the rest of the kernel's life; :func:`unchanged_since` compares only identities against what the
last whole comparison saw, cheaply enough for every recorded result. ``testcell`` puts what was found in
the record (``protocol.Record.patched``), drops the results, and the grader judges that record forged.

This runs inside the learner's kernel, where any Python runs: an attacker who reads this module and
rebinds the check itself, or replaces the recorder whole, is not seen here (README, "What an attacker can
still do"). Python's audit hooks would not see these patches either: CPython 3.11 raises no audit event
for ``setattr`` on a module or a class, only for a function's ``__code__`` (``object.__setattr__``).
"""
from __future__ import annotations

import ast
import builtins
import sys
import sysconfig
import types
from pathlib import Path

#: The library's package folder (pagedkv_lib/), as this file was imported from: never read from a module's
#: own ``__file__``, which a patch can point at a file of its own.
_LIBRARY = Path(__file__).resolve().parents[2]
_INSTALLED = tuple({Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")})

#: The learner-side modules a record passes through (checked where imported).
COURSE_MODULES = ("pagedkv_lib.course.learner", "pagedkv_lib.course.learner.testcell", "pagedkv_lib.course.learner.checks",
                  "pagedkv_lib.course.learner.variants", "pagedkv_lib.course.learner.run_time_patches",
                  "pagedkv_lib.course.learner.pset_checks", "pagedkv_lib.course.learner.pset_checks.ps1_intuition",
                  "pagedkv_lib.course.learner.pset_checks.ps2_math", "pagedkv_lib.course.learner.pset_checks.ps3_code",
                  "pagedkv_lib.course.learner.pset_checks.ps4_demo", "pagedkv_lib.course.protocol",
                  "pagedkv_lib.course.plain_values")
#: The modules a display passes through on its way out of the kernel (checked where imported).
DISPLAY_MODULES = ("IPython.display", "IPython.core.display_functions", "IPython.core.displaypub",
                   "ipykernel.zmqshell", "jupyter_client.session", "ipykernel.iostream")
#: Builtins the recorder, the checks and the sets' checks call.
BUILTINS = ("isinstance", "issubclass", "getattr", "hasattr", "callable", "len", "type", "list", "dict", "tuple", "set",
            "frozenset", "int", "float", "bool", "str", "repr", "sum", "range", "abs", "round", "any", "all", "zip",
            "enumerate", "min", "max", "sorted", "iter", "next", "map", "filter", "id", "object", "print", "super",
            "__import__", "__build_class__", "Exception", "BaseException", "AssertionError", "NotImplementedError",
            "KeyError", "TypeError", "ValueError", "AttributeError")
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time, not one of the interpreter's own


class _Layout:
    """What a module's file defines at top level, read from the file: functions, classes (with their
    methods and their attributes bound to a module name), imported names, and code by qualified name."""

    def __init__(self, path: Path, module: str, package: str):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        self.code: dict[str, types.CodeType] = {}
        stack = [compile(source, str(path), "exec", dont_inherit=True)]
        while stack:
            code = stack.pop()
            self.code.setdefault(code.co_qualname, code)
            stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        once = {name for name in defined if defined.count(name) == 1}
        assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        self.functions: dict[str, bool] = {}  # name: decorated
        self.classes: dict[str, tuple[dict[str, bool], dict[str, str]]] = {}  # name: ({method: decorated}, {attr: name})
        self.imports: dict[str, tuple[str, str | None]] = {}  # name: (module, attribute or None for the module)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in once - assigned:
                self.functions[node.name] = bool(node.decorator_list)
            elif isinstance(node, ast.ClassDef) and node.name in once - assigned:
                defs = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
                names = [m.name for m in defs]
                bound = {t.id: m.value.id for m in node.body if isinstance(m, ast.Assign) and isinstance(m.value, ast.Name)
                         for t in m.targets if isinstance(t, ast.Name)}
                self.classes[node.name] = ({m.name: bool(m.decorator_list) for m in defs if names.count(m.name) == 1}, bound)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    self.imports[name] = (alias.name if alias.asname else alias.name.split(".")[0], None)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                for alias in node.names:
                    if alias.name != "*":
                        self.imports[alias.asname or alias.name] = (base, alias.name)
        for name in defined + list(assigned):  # a name bound twice is left out
            if name in self.imports and (name in defined or name in assigned):
                del self.imports[name]


_layouts: dict[str, _Layout | None] = {}
_found: list[str] = []          # what any whole comparison found, for the kernel's life
_seen: list[tuple] = []         # (namespace, name, object) the last whole comparison found unchanged


def _trusted_file(path: Path) -> bool:
    return any(path == root or root in path.parents for root in (_LIBRARY, *_INSTALLED))


def _course_file(name: str) -> Path:
    rel = Path(*name.split(".")[1:])
    folder = _LIBRARY / rel
    return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")


def _layout(path: Path, module: str, package: str) -> _Layout | None:
    key = str(path)
    if key not in _layouts:
        try:
            _layouts[key] = _Layout(path, module, package) if _trusted_file(path) else None
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            _layouts[key] = None
    return _layouts[key]


def _same_code(fn, layout: _Layout, qualname: str, globals_: dict | None, owner: type | None = None) -> bool:
    """Whether ``fn`` is a plain function carrying the file's code for ``qualname`` (and ``globals_``, if given);
    a method of ``owner`` may close over ``__class__`` (``super()``), and only over that class."""
    if type(fn) is not types.FunctionType:
        return False
    code = fn.__code__
    closure_ok = fn.__closure__ is None or (owner is not None and code.co_freevars == ("__class__",)
                                            and fn.__closure__[0].cell_contents is owner)
    return (code == layout.code.get(qualname) and code.co_qualname == qualname and closure_ok
            and (globals_ is None or fn.__globals__ is globals_))


def _code_from_installed(fn) -> bool:
    """Whether function ``fn`` carries the code compiled from the trusted file its code names."""
    if type(fn) is not types.FunctionType:
        return False
    path = Path(fn.__code__.co_filename)
    found = _layout(path, "", "") if path.is_absolute() else None
    return found is not None and fn.__code__ == found.code.get(fn.__code__.co_qualname)


def _decorated_ok(raw, layout: _Layout, qualname: str, space: dict, owner: type | None = None) -> bool:
    """Whether a decorated definition still holds the file's function: inside a staticmethod, classmethod or
    property, the function itself (a decorator that registers it), or a wrapper (``functools.wraps``) whose
    own code is an installed file's. Other decorators (traitlets' handlers) are compared by identity only."""
    if isinstance(raw, (staticmethod, classmethod)):
        return _same_code(raw.__func__, layout, qualname, space, owner)
    if isinstance(raw, property):
        return _same_code(raw.fget, layout, qualname, space, owner)
    if type(raw) is types.FunctionType:
        inner = raw.__dict__.get("__wrapped__")
        if inner is None:
            return _same_code(raw, layout, qualname, space, owner)
        return _same_code(inner, layout, qualname, space, owner) and _code_from_installed(raw)
    return raw is not None


def _check_module(name: str, path: Path, problems: list[str], seen: list) -> None:
    module = sys.modules.get(name)
    if module is None:
        return
    if type(module) is not types.ModuleType:
        problems.append(f"{name} (not a plain module)")
        return
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    layout = _layout(path, name, package)
    if layout is None:
        problems.append(f"{name} (its file {path.name} cannot be read from the installation)")
        return
    space = module.__dict__
    for fname, decorated in layout.functions.items():
        fn = space.get(fname)
        if not (_decorated_ok(fn, layout, fname, space) if decorated else _same_code(fn, layout, fname, space)):
            problems.append(f"{name}.{fname}")
        seen.append((space, fname, fn))
    for cname, (methods, bound) in layout.classes.items():
        cls = space.get(cname)
        if not isinstance(cls, type) or cls.__module__ != name or cls.__qualname__ != cname:
            problems.append(f"{name}.{cname}")
            continue
        seen.append((space, cname, cls))
        own = cls.__dict__
        for mname, decorated in methods.items():
            raw, qualname = own.get(mname), f"{cname}.{mname}"
            if not (_decorated_ok(raw, layout, qualname, space, cls) if decorated
                    else _same_code(raw, layout, qualname, space, cls)):
                problems.append(f"{name}.{cname}.{mname}")
            seen.append((own, mname, raw))
        for attr, target in bound.items():
            if own.get(attr) is not (own.get(target) if target in own else space.get(target)):
                problems.append(f"{name}.{cname}.{attr}")
    for alias, (source, attr) in layout.imports.items():
        origin = sys.modules.get(source)
        if origin is None:
            continue
        want = origin if attr is None else getattr(origin, attr, None)
        if attr is not None and want is None:
            want = sys.modules.get(f"{source}.{attr}")
        if space.get(alias) is not want:
            problems.append(f"{name}.{alias}")
        seen.append((space, alias, space.get(alias)))


def _check_builtins(problems: list[str]) -> None:
    space = builtins.__dict__
    for name in BUILTINS:
        value = space.get(name)
        if isinstance(value, type):
            ok = value.__module__ == "builtins" and value.__name__ == name and not value.__flags__ & _HEAPTYPE
        else:
            ok = type(value) is types.BuiltinFunctionType and value.__self__ is builtins and value.__name__ == name
        if not ok:
            problems.append(f"builtins.{name}")


def _own_method(obj, names: tuple[str, ...]) -> list[str]:
    held = getattr(obj, "__dict__", {})
    return [n for n in names if n in held]


def _check_publisher(problems: list[str]) -> None:
    """The shell's display publisher, its session and socket: their classes' own, with nothing of their own."""
    shells = sys.modules.get("IPython.core.interactiveshell")
    if shells is None or type(shells) is not types.ModuleType:
        return
    shell_class = shells.__dict__.get("InteractiveShell")
    shell = getattr(shell_class, "_instance", None)
    if shell is None:
        return
    publisher = getattr(shell, "display_pub", None)
    allowed = [getattr(sys.modules.get(m), c, None) for m, c in
               (("ipykernel.zmqshell", "ZMQDisplayPublisher"), ("IPython.core.displaypub", "DisplayPublisher"),
                ("IPython.core.displaypub", "CapturingDisplayPublisher"))]
    if type(publisher) not in [a for a in allowed if a is not None]:
        problems.append("the display publisher (not IPython's or ipykernel's)")
        return
    if held := _own_method(publisher, ("publish", "clear_output", "session", "pub_socket")):
        problems.append(f"the display publisher's own {', '.join(held)}")
    if not _code_from_installed(type(publisher).publish):
        problems.append("the display publisher's class publish")
    if isinstance(type(publisher).__dict__.get("_hooks"), property) and publisher._hooks:
        problems.append("a transform hook on the display publisher")
    if "instance" in shell_class.__dict__:
        problems.append("IPython's InteractiveShell.instance")
    session = getattr(publisher, "session", None)
    if session is not None:
        session_class = getattr(sys.modules.get("jupyter_client.session"), "Session", None)
        if type(session) is not session_class:
            problems.append("the display publisher's session (not jupyter_client's)")
        else:
            if held := _own_method(session, ("send", "serialize", "sign", "msg", "msg_header")):
                problems.append(f"the session's own {', '.join(held)}")
            for method in ("send", "serialize", "sign", "msg"):
                if not _code_from_installed(getattr(session_class, method, None)):
                    problems.append(f"jupyter_client.session.Session.{method}")
    socket = getattr(publisher, "pub_socket", None)
    if socket is not None:
        socket_class = getattr(sys.modules.get("ipykernel.iostream"), "BackgroundSocket", None)
        if type(socket) is socket_class:
            if held := _own_method(socket, ("send", "send_multipart")):
                problems.append(f"the display socket's own {', '.join(held)}")
            for method in ("send", "send_multipart"):
                if not _code_from_installed(getattr(socket_class, method, None)):
                    problems.append(f"ipykernel.iostream.BackgroundSocket.{method}")


def _display_file(name: str) -> Path | None:
    spec = getattr(sys.modules.get(name), "__spec__", None)
    origin = getattr(spec, "origin", None)
    return Path(origin).resolve() if origin else None


def found() -> list[str]:
    """What was patched in this kernel so far (sorted, empty if nothing): the whole comparison, run now."""
    problems: list[str] = []
    seen: list = []
    try:
        for name in COURSE_MODULES:
            _check_module(name, _course_file(name), problems, seen)
        for name in DISPLAY_MODULES:
            path = _display_file(name)
            if path is not None:
                _check_module(name, path, problems, seen)
        shown = sys.modules.get("IPython.display")
        if shown is not None and shown.__dict__.get("display") is not getattr(
                sys.modules.get("IPython.core.display_functions"), "display", None):
            problems.append("IPython.display.display")
        _check_builtins(problems)
        _check_publisher(problems)
    except Exception as exc:  # a patched object that raises when looked at is itself a patch
        problems.append(f"the check itself raised {type(exc).__name__}")
    for problem in problems:
        if problem not in _found:
            _found.append(problem)
    _seen[:] = seen
    return sorted(_found)


def unchanged_since() -> bool:
    """Whether every object the last :func:`found` saw is still in its place (identities only: cheap)."""
    return not _found and all(space.get(name) is obj for space, name, obj in _seen)


def holds_own(obj, allowed: frozenset) -> list[str]:
    """The attributes an instance holds beyond ``allowed`` (a method set on the instance itself, say)."""
    return sorted(set(getattr(obj, "__dict__", {})) - allowed)
