"""The sandbox every student kernel runs in while it is graded: bubblewrap, as an unprivileged user.

What the kernel sees (``bwrap_argv``): the system (``/usr``, ``/etc``), the Python installation and
the venv, all read-only; a copy of this library in which the functions the problem set asks the
learner to write are removed (``hidden_library``), read-only; its own scratch folder (home, working
folder, its sockets' folder and ``/tmp``), which is all it may write. Where the grader is root, that
folder is a tmpfs of ``KernelLimits.disk_bytes`` (:func:`new_scratch`), whose pages count against the
kernel's memory cgroup: a write past it fails with ENOSPC inside the sandbox, the status says ``disk
limit``, and the grader's own disk is never touched (elsewhere only ``/tmp`` is bounded, by bwrap's
``--size``). Nothing else: no course root, ``solutions/``, gradebook, other
submissions, grading cache, or other kernels' connection files. No network (its own empty network
namespace); the kernel's channels are IPC sockets in its scratch folder. Its own PID namespace, so
every process it starts dies with it (``--die-with-parent``), and limits on memory, CPU time,
processes and file size (``prlimit``), and on all its processes' memory together (a cgroup,
``memory_cgroup.py``, where the machine lets the grader make one); the limits are ``KernelLimits``
settings (``grading_limits.py``). It runs under a uid of its own (:data:`KERNEL_UIDS`) in the
group of the system user :data:`USER` (created on first use when the grader is root). ``strace``
watches it from outside and reports what the sandbox denied it and which hidden function it called
(``sandbox_denials.py``).

Where bubblewrap is missing, :func:`check_available` raises with what to install; ``autograde`` then
refuses to run untrusted submissions unless told ``--trust-submissions``.
"""
from __future__ import annotations

import ast
import functools
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Float, Unicode

from ....errors import PagedKVError
from ...learner.variants import KEY_FILE_ENV
from ...protocol import EventKind
from .grading_job import GradingJob
from .grading_limits import KernelLimits
from .memory_cgroup import join_prefix, memory_group
from .sandbox_denials import HIDDEN_CALL_MARK, MAX_SHOWN, denied, hidden_calls, tracer

USER = "pkv-grader"  # the unprivileged system user whose group student kernels run in
LIBRARY = Path(__file__).resolve().parents[3]  # this library's package folder, pagedkv_lib/
#: Each kernel runs under its own unprivileged uid from this range (no login, no files outside its
#: scratch), so a process limit spent by one student never starves a kernel graded beside it.
KERNEL_UIDS = range(200_000, 260_000)
INSTALL_HINT = ("bubblewrap (the bwrap command) is needed to grade untrusted submissions: "
                "install it with `apt-get install bubblewrap` (Debian, Ubuntu) or `dnf install bubblewrap`; "
                "on macOS or Windows grade on Linux, or pass --trust-submissions to run them unsandboxed")


def check_available() -> str:
    """The path of ``bwrap``, or raise :class:`PagedKVError` naming what to install (``prlimit`` and
    ``setpriv``, which set the limits and drop privileges, come with util-linux)."""
    found = shutil.which("bwrap")
    if found is None:
        raise PagedKVError(f"no sandbox: {INSTALL_HINT}")
    missing = [tool for tool in ("prlimit", "setpriv") if shutil.which(tool) is None]
    if missing:
        raise PagedKVError(f"no sandbox: {' and '.join(missing)} (from util-linux, `apt-get install util-linux`) "
                           "is needed beside bubblewrap; or pass --trust-submissions to run submissions unsandboxed")
    return found


def grader_ids() -> tuple[int, int]:
    """(uid, gid) of :data:`USER`, creating that system user if the grader runs as root."""
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        if os.geteuid() != 0:
            raise PagedKVError(f"the sandbox runs kernels as the system user {USER!r}; create it "
                               f"(useradd --system --no-create-home {USER}) or grade as root") from None
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def kernel_ids() -> tuple[int, int]:
    """(uid, gid) for a new kernel: a random uid of :data:`KERNEL_UIDS` in :data:`USER`'s group when the
    grader is root, else the grader's own (bwrap then sets up the sandbox in a user namespace)."""
    if os.geteuid() == 0:
        return KERNEL_UIDS[secrets.randbelow(len(KERNEL_UIDS))], grader_ids()[1]
    return os.geteuid(), os.getegid()


def _stub(kind: str, name: str, where: str) -> list[str]:
    """The lines that stand for a graded definition in the sandbox's library copy. Called (the class:
    made), it first tries to open ``HIDDEN_CALL_MARK + "module:name"``, a path that exists nowhere: the
    tracer outside the sandbox logs that failed open, which is how the grader learns of a call however
    the function was reached (:func:`~.sandbox_denials.hidden_calls`). Then it raises."""
    message = f"{where}.{name} is hidden while this problem set is graded: the question asks you to write it"
    mark = f"{HIDDEN_CALL_MARK}{where}:{name}"
    body = ["    try:", f"        open({mark!r})", "    except OSError:", "        pass",
            f"    raise NotImplementedError({message!r})"]
    if kind == "class":
        return [f"class {name}:", "    __pagedkv_hidden__ = True", "", "    def __init__(self, *args, **kwargs):",
                *("    " + line for line in body)]
    return [f"def {name}(*args, **kwargs):", *body, "", f"{name}.__pagedkv_hidden__ = True"]


def hide_definitions(path: Path, names: list[str], module: str) -> None:
    """Replace the top-level definitions ``names`` in the module file ``path`` by stubs that raise."""
    lines = path.read_text(encoding="utf-8").split("\n")
    tree = ast.parse("\n".join(lines))
    spans = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            spans.append((start, node.end_lineno, "class" if isinstance(node, ast.ClassDef) else "def", node.name))
    missing = set(names) - {s[3] for s in spans}
    if missing:
        raise PagedKVError(f"graded_functions: {module} defines no {sorted(missing)}")
    for start, end, kind, name in sorted(spans, reverse=True):
        lines[start:end] = _stub(kind, name, module)
    path.write_text("\n".join(lines), encoding="utf-8")


def hidden_library(dest: Path, graded: list[str]) -> Path:
    """A copy of this library under ``dest`` without the instructor's side, its ``graded`` definitions
    (``"pagedkv_lib.module:name"``) replaced by stubs; returns the folder to put on ``PYTHONPATH``."""
    target = dest / "pagedkv_lib"
    shutil.copytree(LIBRARY, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.rmtree(target / "course" / "instructor")
    by_module: dict[str, list[str]] = {}
    for item in graded:
        module, _, name = item.partition(":")
        if not module.startswith("pagedkv_lib.") or not name:
            raise PagedKVError(f"graded_functions entries read 'pagedkv_lib.module:name', got {item!r}")
        by_module.setdefault(module, []).append(name)
    for module, names in by_module.items():
        rel = Path(*module.split(".")[1:])
        path = target / rel.with_suffix(".py") if (target / rel.with_suffix(".py")).exists() else target / rel / "__init__.py"
        hide_definitions(path, names, module)
    for folder, dirs, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for f in files:
            os.chmod(Path(folder) / f, 0o644)
    return dest


@functools.lru_cache(maxsize=1)
def _font_list() -> Path | None:
    """matplotlib's font list as this (trusted) process built it, or None without one."""
    import matplotlib
    from matplotlib import font_manager  # noqa: F401 (builds the list on first import)
    found = sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    return found[-1] if found else None


def seed_font_cache(config_dir: Path) -> None:
    """Put matplotlib's font list in a kernel's config folder, so that its first plot does not run
    ``fc-list`` and rebuild the list (0.15-0.25 s per kernel, ``benchmarks/sandbox_kernel.py``)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    found = _font_list()
    if found is not None:
        shutil.copy(found, config_dir / found.name)


def _dirs_above(path: Path) -> list[str]:
    """bwrap arguments creating every folder above ``path`` as traversable (0755), top first."""
    out = []
    for parent in reversed(path.parents):
        if str(parent) != "/":
            out += ["--perms", "0755", "--dir", str(parent)]
    return out


def read_only(library: Path | None) -> list[Path]:
    """What the sandbox binds read-only besides ``/usr``: the Python installation, the venv (by its real
    path and by the path the kernel command names: a symlinked .venv, as make hub's course copies have,
    must exist inside too), and the hidden library copy."""
    found = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.prefix).absolute()]
    return found + ([library] if library is not None else [])


def bwrap_argv(scratch: Path, library: Path | None, uid: int, gid: int, env: dict,
               limits: KernelLimits | None = None) -> list[str]:
    """The command prefix that runs a kernel command in the sandbox (see the module docstring)."""
    limits = limits or KernelLimits()
    private_tmp = (["--bind", str(scratch / "tmp"), "/tmp"] if os.path.ismount(scratch)  # inside the quota
                   else ["--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", "/tmp"])
    argv = ["prlimit", f"--as={limits.address_space_bytes}", f"--cpu={limits.cpu_seconds}",
            f"--nproc={limits.processes}", f"--fsize={limits.file_bytes}", "--",
            check_available(), "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
            *private_tmp]  # before the binds below: the scratch folder may itself be under the grader's /tmp
    for name in ("lib", "lib64", "bin", "sbin"):
        if os.path.islink(f"/{name}"):
            argv += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    seen = set()
    for ro in read_only(library):
        if ro in seen or ro == Path("/usr") or Path("/usr") in ro.parents:
            continue
        seen.add(ro)
        argv += _dirs_above(ro) + ["--ro-bind", str(ro), str(ro)]
    argv += _dirs_above(scratch) + ["--bind", str(scratch), str(scratch), "--chdir", str(scratch / "home"),
                                     "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    if os.geteuid() != 0:  # not root: no other uid to switch to (untested here: CI grades as root)
        return argv[:7] + ["--unshare-user"] + argv[7:]  # after prlimit ... -- bwrap
    return argv + ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
                   "--bounding-set=-all", "--"]


def new_scratch(uid: int, gid: int, disk_bytes: int | None = None) -> Path:
    """A fresh scratch folder for one kernel: ``kernel/`` (connection file, IPC sockets), ``home/`` and ``tmp/``.

    With ``disk_bytes``, and a grader that may mount (root), the folder is a tmpfs of that size: every
    byte the kernel writes lands there, and its pages are charged to the memory cgroup of the process
    that writes them (the kernel's). Remove it with :func:`remove_scratch`."""
    scratch = Path(tempfile.mkdtemp(prefix="pkv-kernel-"))
    if disk_bytes and os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_bytes},mode=0711,nosuid,nodev", "pkv-kernel",
                        str(scratch)], capture_output=True)  # where mounting is refused, the folder stays unbounded
    os.chmod(scratch, 0o711)
    for sub in ("kernel", "home", "tmp"):
        (scratch / sub).mkdir()
        os.chown(scratch / sub, uid, gid) if os.geteuid() == 0 else None
        os.chmod(scratch / sub, 0o700 if os.geteuid() == 0 else 0o777)
    return scratch


def remove_scratch(scratch: Path) -> None:
    """Remove a kernel's scratch folder, unmounting its tmpfs first (lazily: a killed kernel may hold files open)."""
    if os.path.ismount(scratch):
        subprocess.run(["umount", "--lazy", str(scratch)], capture_output=True)
    shutil.rmtree(scratch, ignore_errors=True)


DISK_FULL_MARGIN = 1 << 20
"""A kernel's quota counts as reached when less than this many bytes of it are left free (bytes)."""


def disk_full(scratch: Path) -> bool:
    """Whether the kernel's tmpfs has less than :data:`DISK_FULL_MARGIN` free (False where there is none)."""
    if not os.path.ismount(scratch):
        return False
    found = os.statvfs(scratch)
    return found.f_bavail * found.f_frsize < DISK_FULL_MARGIN


class SandboxKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in :func:`bwrap_argv`'s sandbox, talking over IPC sockets.

    ``job`` (set by nbgrader's hooks before the kernel starts) gives the hidden library copy, the
    student's variant key and where to record what the sandbox saw; without one the kernel gets
    ``library`` (else a library copy of its own), no key, and its events are not kept.
    """

    library = Unicode(help="folder with a hidden library copy, put on the kernel's PYTHONPATH when no job "
                      "gives one (a copy without the instructor's side is made otherwise)").tag(config=True)
    # A finished kernel is ended 0.2 s after its shutdown request by SIGTERM (to the tracer and bwrap; the
    # sandbox dies with them) instead of jupyter_client's 2.5 s wait. ipykernel 7.4 sometimes hangs in its
    # own shutdown (the control thread flushes a stream whose IOPub thread has already stopped), and a
    # graded kernel then cost 3 s more: 5 of 10 ps2_math runs took 5.0 s instead of 1.9 s. Its outputs
    # are all in by then (nbclient waited for the kernel to be idle), and strace's log of what the kernel
    # was denied is complete either way: strace flushes its log after every line it writes.
    shutdown_wait_time = Float(0.4, help="seconds from a shutdown request to SIGKILL; SIGTERM at half").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.job: GradingJob | None = None
        self.limits = KernelLimits(config=self.config)
        self._uid, self._gid = kernel_ids()
        self.scratch = new_scratch(self._uid, self._gid, self.limits.disk_bytes)
        self.trace: Path | None = None  # the current kernel's strace log (``sandbox_denials.py``)
        # all its processes together (``memory_cgroup.py``), named as its scratch folder; None: none can be made here
        self.memory = memory_group(self.limits.memory_bytes, self.scratch.name)
        self._limit_kills = 0
        self._launches = 0
        self.transport = "ipc"
        self.ip = str(self.scratch / "kernel" / "ipc")
        self.connection_file = str(self.scratch / "kernel" / "kernel.json")

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"  # a signal would reach bwrap, not the kernel
        return spec

    def write_connection_file(self, **kwargs):
        super().write_connection_file(**kwargs)
        if os.geteuid() == 0:  # the kernel (another user) reads it and creates its sockets beside it
            os.chown(self.connection_file, self._uid, self._gid)
            os.chown(self.scratch / "kernel", self._uid, self._gid)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        home = self.scratch / "home"
        for child in [*home.iterdir(), *(self.scratch / "tmp").iterdir()]:  # a restarted kernel starts empty
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        env = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "agg",
               "MPLCONFIGDIR": str(home / ".matplotlib")}
        seed_font_cache(home / ".matplotlib")
        if os.geteuid() == 0:
            for path in (home / ".matplotlib", *(home / ".matplotlib").iterdir()):
                os.chown(path, self._uid, self._gid)
        if self.job is not None and self.job.library and Path(self.job.library).is_dir():
            self.library = self.job.library
        if not self.library:  # no job's copy: the library without the instructor's side
            self.library = str(hidden_library(self.scratch / "library", []))
        env["PYTHONPATH"] = self.library
        for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TRITON_INTERPRET"):
            if key in os.environ:
                env[key] = os.environ[key]
        env[KEY_FILE_ENV] = str(self._key_file(home))
        kw["env"] = env
        kw["cwd"] = str(home)
        self._launches += 1
        self.trace = self.scratch.parent / f"{self.scratch.name}.trace{self._launches}"  # outside the sandbox
        return await super()._async_launch_kernel(
            join_prefix(self.memory) + tracer(self.trace)
            + bwrap_argv(self.scratch, Path(self.library), self._uid, self._gid, env, self.limits) + list(kernel_cmd), **kw)

    def _key_file(self, home: Path) -> Path:
        """The student's variant key (the job's), in a file only the kernel can read."""
        path = home / ".variant-key"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(self.job.variant_key if self.job is not None else "")
        if os.geteuid() == 0:
            os.chown(path, self._uid, self._gid)
        return path

    def denied(self) -> list[str]:
        """What the sandbox denied this kernel so far (see ``sandbox_denials.py``)."""
        return denied(self.trace, cwd=self.scratch / "home", own=self.scratch, course=Path.cwd().resolve(),
                      library=LIBRARY,
                      read_only=read_only(Path(self.library).resolve())) if self.trace else []

    def hidden_called(self) -> list[str]:
        """The hidden graded definitions (``module:name``) this kernel called (see :func:`~.sandbox_denials.hidden_calls`)."""
        return hidden_calls(self.trace) if self.trace else []

    async def cleanup_resources(self, restart: bool = False) -> None:
        """What nbclient calls after a shutdown (``AsyncKernelManager`` binds it to the base class's code)."""
        await self._async_cleanup_resources(restart=restart)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        found = self.denied()
        if found:
            self._record(EventKind.DENIED, calls=found[:MAX_SHOWN], more=max(0, len(found) - MAX_SHOWN))
        called = self.hidden_called()
        if called:
            self._record(EventKind.HIDDEN_CALLED, functions=called)
        killed = self.memory.limit_kills() if self.memory is not None else 0
        if killed > self._limit_kills:  # new since the last cleanup (the group outlives a restart)
            self._record(EventKind.MEMORY, limit=self.limits.memory_bytes, killed=killed - self._limit_kills)
            self._limit_kills = killed
        if disk_full(self.scratch):
            self._record(EventKind.DISK, limit=self.limits.disk_bytes)
        if self.trace is not None:
            self.trace.unlink(missing_ok=True)
        if not restart:
            remove_scratch(self.scratch)  # the kernel's files and any library copy made for it; its tmpfs pages
            if self.memory is not None:
                self.memory.remove()

    def _record(self, kind: str, **details) -> None:
        if self.job is not None:
            self.job.record(kind, **details)
