"""What the sandbox denied a kernel: its failed reaches for the grader's files, from ``strace``.

The sandbox itself stops a kernel from reading the course or writing the library (those paths do not
exist inside it, or are read-only), but it says nothing. So the grader runs the sandboxed kernel under
``strace`` (outside the sandbox, where the kernel can neither stop nor edit it), logging only the
file system calls that failed, and reads the log when the kernel ends. A failed call counts as a reach
outside when its path lies

- under the course root (the grader's working folder: ``solutions/``, ``submitted/``, the gradebook,
  other students' notebooks), outside what the sandbox binds read-only (the venv may live there);
- under the instructor's own copy of this library (the sandbox shows the kernel only its hidden copy);
- in another kernel's scratch folder;
- or when it tried to write to the read-only library copy or the venv (a bytecode cache excepted).

Honest code touches none of these: imports search only the hidden library and the venv, and the
kernel's home is its own scratch folder. A relative path is taken from the kernel's starting folder
(a kernel that changed folder first is read as if it had not), and a path relative to an open folder
is skipped. The tracer costs 0.45-0.7 s per kernel (``benchmarks/sandbox_kernel.py``).
Without ``strace``, or where it may not trace (a container that forbids ptrace), kernels run untraced
and nothing is flagged this way.

The same log tells which hidden graded function a kernel called. In the sandbox's library copy each
function a set asks the learner to write is a stub (``kernel_sandbox._stub``) that, when called, first
tries to open a path that exists nowhere, :data:`HIDDEN_CALL_MARK` followed by ``module:name``; that
failed open is in the log, and :func:`hidden_calls` reads it back. So a call is seen however the stub was
reached, a computed import (``importlib.import_module("pagedkv_lib." + "acc" + "ounting")``) included,
which reading the notebook's source cannot see; the grader flags it ``library implementation``. The
kernel can make such a line appear (by opening the path itself), which only flags itself, but cannot
remove one. strace's output reaches the log through a filter that stops writing at :data:`MAX_LOG_BYTES`
(a kernel making millions of failed calls costs the grader's disk that much at most); the log says where
it was cut.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

#: The calls traced: every one that opens, creates, changes or runs a file by name (not ``stat``,
#: which imports make thousands of times, so tracing it cost several seconds per kernel).
CALLS = ("open,openat,openat2,creat,truncate,unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,rmdir,"
         "link,linkat,symlink,symlinkat,chmod,fchmodat,chown,fchownat,execve")
_WRITES = {"creat", "truncate", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
           "rmdir", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmodat", "chown", "fchownat"}
_AT_CALLS = {"openat", "openat2", "unlinkat", "renameat", "renameat2", "mkdirat", "linkat", "symlinkat",
             "fchmodat", "fchownat"}  # their paths may be relative to an open folder (a dirfd)
_LINE = re.compile(r"^\d+\s+(?P<call>\w+)\((?P<args>.*)\)\s+=\s+-1\s+(?P<errno>E[A-Z0-9]+)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
MAX_SHOWN = 5  # denied calls named in a status; the count says how many more
MAX_LOG_BYTES = 4 << 20
"""Most bytes one kernel's trace log may take on the grader's disk; lines past it are dropped (bytes)."""
TRUNCATED = "+++ pagedkv: the log stops here, at its size limit +++"
#: Where a hidden graded function's stub reaches when called: ``HIDDEN_CALL_MARK + "pagedkv_lib.x:name"``
#: (a path no sandbox has, so the open fails and the tracer logs it).
HIDDEN_CALL_MARK = "/pagedkv-hidden-call/"
_HIDDEN_CALL = re.compile(r'^\d+\s+(?:open|openat|openat2)\((?:AT_FDCWD, )?"' + re.escape(HIDDEN_CALL_MARK)
                          + r'(?P<function>pagedkv_lib(?:\.\w+)+:\w+)"')
#: The filter between strace and the log (run by the grader's Python, isolated and without site): copies
#: strace's lines to ``argv[1]`` up to ``argv[2]`` bytes, then reads on without writing (strace never blocks).
LOG_FILTER = """
import sys
log, cap = sys.argv[1], int(sys.argv[2])
written = 0
with open(log, "wb") as out:
    for raw in sys.stdin.buffer:
        if written < 0:
            continue
        if written + len(raw) > cap:
            out.write(TRUNCATED.encode() + b"\\n")
            written = -1
        else:
            out.write(raw)
            written += len(raw)
        out.flush()
""".replace("TRUNCATED", repr(TRUNCATED))


def tracer(log: Path, max_bytes: int = MAX_LOG_BYTES) -> list[str]:
    """The command prefix that traces a kernel's failed file calls into ``log`` (at most ``max_bytes``);
    empty without strace.

    strace dies with the process that started it (``setpriv --pdeathsig``): a grading worker killed for
    overrunning its budget takes the tracer with it, and the sandbox dies with the tracer."""
    found = _working_strace()
    if found is None:
        return []
    keep = shlex.join([sys.executable, "-I", "-S", "-c", LOG_FILTER, str(log), str(max_bytes)])
    return ["setpriv", "--pdeathsig", "KILL", "--", found, "-f", "-qq", "--seccomp-bpf", "-e",
            f"trace={CALLS}", "-e", "status=failed", "-o", f"|{keep}"]


@functools.lru_cache(maxsize=1)
def _working_strace() -> str | None:
    """strace's path if it can trace here (a container may forbid ptrace), else None: kernels then run
    untraced rather than not at all."""
    found = shutil.which("strace")
    if found is None or shutil.which("setpriv") is None:
        return None
    probe = subprocess.run(["setpriv", "--pdeathsig", "KILL", "--", found, "-f", "-qq", "--seccomp-bpf", "-e",
                            "trace=openat", "-e", "status=failed", "-o", os.devnull, "true"], capture_output=True)
    return found if probe.returncode == 0 else None


def hidden_calls(log: Path) -> list[str]:
    """The hidden graded definitions (``"pagedkv_lib.x:name"``) the kernel whose trace ``log`` this is
    called, in the order first called (see the module docstring)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(m["function"] for m in map(_HIDDEN_CALL.match, lines) if m is not None))


def _is_write(call: str, args: str) -> bool:
    return call in _WRITES or (call.startswith("open") and bool(re.search(r"O_(WRONLY|RDWR|CREAT|TRUNC)", args)))


def _paths(call: str, args: str, cwd: Path) -> list[Path]:
    quoted = _QUOTED.findall(args)
    if call in _AT_CALLS:
        if not args.startswith(("AT_FDCWD", '"/')):  # relative to an open folder we cannot name
            quoted = [q for q in quoted if q.startswith("/")]
    if call == "execve":
        quoted = quoted[:1]  # the program; the rest are its arguments
    return [Path(os.path.normpath(cwd / q)) for q in quoted if q]


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _other_kernel(path: Path, own: Path) -> bool:
    """Whether ``path`` is in a kernel scratch folder (``pkv-kernel-*``, see ``sandbox.new_scratch``) not ``own``."""
    return any(p.name.startswith("pkv-kernel-") for p in (path, *path.parents)) and not _under(path, own)


def denied(log: Path, *, cwd: Path, own: Path, course: Path, library: Path, read_only: list[Path]) -> list[str]:
    """The reaches outside in one kernel's trace ``log``, each as ``"call path (ERRNO)"``.

    ``cwd`` is the kernel's starting folder, ``own`` its scratch folder, ``course`` the course root,
    ``library`` the instructor's library package, ``read_only`` what the sandbox binds read-only (the
    Python installation, the venv, the hidden library copy)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        call, args, errno = m["call"], m["args"], m["errno"]
        for path in _paths(call, args, cwd):
            bound = any(_under(path, ro) for ro in read_only)
            off_limits = (_under(path, course) and not bound) or _under(path, library) or _other_kernel(path, own)
            writes_bound = bound and _is_write(call, args) and "__pycache__" not in path.parts
            if off_limits or writes_bound:
                found.append(f"{call} {path} ({errno})")
    return list(dict.fromkeys(found))
