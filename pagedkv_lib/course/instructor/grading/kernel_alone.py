"""A Triton kernel a set asks for, run alone: only its ``@triton.jit`` functions, in a fresh sandbox, on
batches the notebook never saw, its outputs compared here.

Why: a test cell's record is made inside the learner's kernel, where any Python runs. For most questions a
forged record gains nothing the learner did not write, because the judge checks values and the values
need the work. The bonus asks *how* (a Triton kernel), so a notebook that replaced the checks' launcher,
and the check that would have seen it (``learner/run_time_patches.py``), could hand in its Q5 output
computed in torch. Here nothing of the notebook runs but the kernel:

- :func:`kernel_source` keeps, from the answer cell's source, its imports of ``triton``,
  ``triton.language`` and ``math``, its constants (``BLOCK = 16``), and its ``@triton.jit`` functions. Each
  function's body may use only Triton's language: its arguments and its own local names, those imports, the
  other kernels and constants, a few builtins (:data:`BUILTINS`), attributes of the imported modules, and
  of anything else only the tensor attributes in :data:`TENSOR_ATTRIBUTES`; nothing whose name starts
  with ``_``, no import, no nested function or class, no ``global``. (On a GPU, Triton's compiler refuses
  anything else; in the CPU interpreter the body runs as Python, hence the list.)
- :func:`run_alone` runs those lines and the set's launcher (``RUN_ALONE["launch"]`` in the set's checks
  module) in a new sandbox (``kernel_sandbox.bwrap_argv``, the kernels' limits, its own scratch folder
  and uid) on batches from a seed drawn here, and reads the outputs back as tensors only
  (``torch.load(weights_only=True)``).
- :func:`judge_alone` compares them with the library's reference in this process.

A set opts in with ``RUN_ALONE`` in its checks module (``learner/pset_checks/ps3_code.py``).
"""
from __future__ import annotations

import ast
import importlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from ....errors import PagedKVError
from .grading_job import GradingJob
from .grading_limits import KernelLimits
from .kernel_sandbox import bwrap_argv, hidden_library, kernel_ids, new_scratch, remove_scratch
from .memory_cgroup import join_prefix, memory_group

MODULES = ("triton", "triton.language", "math")  #: what the kept lines may import
BUILTINS = frozenset({"range", "min", "max", "float", "int", "bool", "len", "True", "False", "None"})
#: Attributes a kernel body may read on its own values (Triton tensors and constexprs).
TENSOR_ATTRIBUTES = frozenset({"to", "dtype", "shape", "T", "reshape", "trans", "permute", "broadcast_to",
                               "expand_dims", "sum", "max", "min", "exp", "log", "sqrt", "abs", "view", "value",
                               "numel", "element_ty", "split", "cast"})
_FORBIDDEN = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef,
              ast.ClassDef, ast.Try, ast.With, ast.AsyncWith, ast.Raise, ast.Delete, ast.Await, ast.Yield, ast.YieldFrom,
              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)
OUTPUTS = "outputs.pt"
#: What runs in the sandbox (with the library copy on its path): the kept lines, then the set's launcher on
#: each batch; argv: the set's checks module, the launcher's name, the kernel's name.
RUNNER = """
import runpy, sys, types, torch
module, launch, kernel = sys.argv[1:4]
launch = getattr(__import__(module, fromlist=[launch]), launch)
found = runpy.run_path("kernel_alone.py")[kernel]
batches = torch.load("batches.pt", weights_only=True)
torch.save([launch(found, types.SimpleNamespace(**b)).float() for b in batches], "OUTPUTS")
""".replace("OUTPUTS", OUTPUTS)


class NotAlone(PagedKVError):
    """The kernel could not be run alone, or gave wrong outputs: the message says why, for the learner."""


def spec_for(assignment: str) -> tuple[ModuleType, dict] | None:
    """The set's checks module and its ``RUN_ALONE`` spec, or None for a set with nothing to run alone."""
    try:
        module = importlib.import_module(f"pagedkv_lib.course.learner.pset_checks.{assignment}")
    except ImportError:
        return None
    spec = getattr(module, "RUN_ALONE", None)
    return (module, spec) if spec else None


def _is_jit(node: ast.expr, aliases: dict[str, str]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "jit" and isinstance(node.value, ast.Name)
            and aliases.get(node.value.id) == "triton")


def _constant(node: ast.stmt) -> str | None:
    """The name a top-level-style constant assignment binds (``X = 16``, ``X: tl.constexpr = 16``), else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        target, value = node.target, node.value
        if not (isinstance(node.annotation, ast.Attribute) and node.annotation.attr == "constexpr"):
            return None
    else:
        return None
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
        return target.id
    return None


def _check_kernel(fn: ast.FunctionDef, modules: set[str], known: set[str]) -> None:
    """Raise :class:`NotAlone` unless ``fn``'s signature and body use only Triton's language (module docstring)."""
    where = f"@triton.jit {fn.name}"
    args = fn.args
    if args.vararg or args.kwarg or args.defaults or args.kw_defaults or args.posonlyargs or fn.returns:
        raise NotAlone(f"{where}: give it plain parameters (no defaults, *args, **kwargs or return annotation)")
    params = {a.arg for a in args.args + args.kwonlyargs}
    for a in args.args + args.kwonlyargs:
        ann = a.annotation
        if ann is not None and not (isinstance(ann, ast.Attribute) and ann.attr == "constexpr"
                                    and isinstance(ann.value, ast.Name) and ann.value.id in modules):
            raise NotAlone(f"{where}: a parameter's annotation may only be tl.constexpr ({a.arg})")
    local = params | {n.id for node in fn.body for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    allowed = local | modules | known | BUILTINS
    for node in (n for stmt in fn.body for n in ast.walk(stmt)):
        if isinstance(node, _FORBIDDEN):
            raise NotAlone(f"{where}: a kernel body may not hold a {type(node).__name__} (line {node.lineno})")
        if isinstance(node, ast.Name) and (node.id.startswith("_") or node.id not in allowed):
            raise NotAlone(f"{where}: line {node.lineno} uses {node.id!r}, which is none of its parameters, its "
                           "own names, triton, tl, math, a constant or another @triton.jit function of the cell")
        if isinstance(node, ast.Attribute):
            on_module = isinstance(node.value, ast.Name) and node.value.id in modules
            if node.attr.startswith("_") or not (on_module or node.attr in TENSOR_ATTRIBUTES):
                raise NotAlone(f"{where}: line {node.lineno} reads .{node.attr}, which is not part of Triton's language")


def _statements(body: list[ast.stmt]):
    """Every statement of ``body`` and of the blocks it holds (``if``, ``for``, ``try`` ...), in source order,
    but not those inside a function or class: what runs when the cell runs."""
    for node in body:
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                yield from _statements(handler.body)


def kernel_source(cell_source: str, kernel: str) -> str:
    """The lines of an answer cell that run alone (module docstring): its imports of :data:`MODULES`, its
    numeric constants and its ``@triton.jit`` functions, in the cell's order; :class:`NotAlone` if
    ``kernel`` is not among them or a function uses more than Triton's language."""
    try:
        tree = ast.parse(cell_source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise NotAlone(f"the answer cell cannot be read ({type(err).__name__})") from None
    kept, aliases, constants, kernels = [], {}, set(), {}
    for node in _statements(tree.body):
        if isinstance(node, ast.Import) and all(a.name in MODULES for a in node.names):
            kept.append(node)
            aliases.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0] for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES \
                and all(a.name != "*" and f"{node.module}.{a.name}" in MODULES for a in node.names):
            kept.append(node)  # from triton import language as tl
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif (name := _constant(node) if isinstance(node, ast.stmt) else None) is not None:
            kept.append(node)
            constants.add(name)
        elif isinstance(node, ast.FunctionDef) and len(node.decorator_list) == 1 and _is_jit(node.decorator_list[0], aliases):
            kernels[node.name] = node  # a later definition of a name wins, as when the cell runs
    if kernel not in kernels:
        raise NotAlone(f"the answer cell defines no @triton.jit function {kernel}")
    for fn in kernels.values():
        _check_kernel(fn, set(aliases), constants | set(kernels))
    kept += list(kernels.values())
    kept.sort(key=lambda n: n.lineno)
    return "\n".join(ast.unparse(n) for n in kept) + "\n"


def run_alone(source: str, spec: dict, module: str, batches: list, job: GradingJob | None,
              limits: KernelLimits, timeout_s: float) -> list:
    """The outputs (tensors) of ``source``'s kernel on ``batches``, run in a fresh sandbox (or, for a job
    graded unsandboxed, a plain subprocess); :class:`NotAlone` with the reason if it fails or runs past ``timeout_s``."""
    import torch
    sandboxed = job is None or job.sandbox
    uid, gid = kernel_ids() if sandboxed else (os.geteuid(), os.getegid())
    scratch = new_scratch(uid, gid, limits.disk_bytes) if sandboxed else Path(tempfile.mkdtemp(prefix="pkv-alone-"))
    memory = memory_group(limits.memory_bytes, scratch.name) if sandboxed else None
    home = scratch / "home" if sandboxed else scratch
    try:
        library = Path(job.library) if job is not None and job.library and Path(job.library).is_dir() \
            else hidden_library(scratch / "library", [])
        (home / "kernel_alone.py").write_text(source, encoding="utf-8")
        torch.save([{"q": b.q, "k_cache": b.k_cache, "v_cache": b.v_cache, "block_tables": b.block_tables,
                     "seq_lens": b.seq_lens} for b in batches], home / "batches.pt")
        for name in ("kernel_alone.py", "batches.pt"):
            os.chmod(home / name, 0o644)
        env = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": "/tmp" if sandboxed else str(home), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(library)}
        env.update({k: os.environ[k] for k in ("TRITON_INTERPRET", "OMP_NUM_THREADS") if k in os.environ})
        argv = [sys.executable, "-c", RUNNER, module, spec["launch"], spec["kernel"]]
        if sandboxed:
            argv = join_prefix(memory) + bwrap_argv(scratch, library, uid, gid, env, limits) + argv
        try:
            done = subprocess.run(argv, cwd=home, env=None if sandboxed else env, capture_output=True, text=True,
                                  timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise NotAlone(f"your kernel, run alone, took more than {timeout_s:.0f} s") from None
        if done.returncode != 0 or not (home / OUTPUTS).is_file():
            last = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit {done.returncode}"]
            raise NotAlone(f"your kernel, run alone, failed: {last[0][:200]}")
        try:
            outputs = torch.load(home / OUTPUTS, weights_only=True)
        except Exception as err:  # not tensors, or not a file torch wrote
            raise NotAlone(f"your kernel's outputs, run alone, could not be read ({type(err).__name__})") from None
        if not (isinstance(outputs, list) and len(outputs) == len(batches) and all(isinstance(o, torch.Tensor) for o in outputs)):
            raise NotAlone("your kernel, run alone, did not give one output tensor per batch")
        return outputs
    finally:
        if memory is not None:
            memory.remove()
        remove_scratch(scratch) if sandboxed else shutil.rmtree(scratch, ignore_errors=True)


def judge_alone(verdicts: dict, cells: list, assignment: str, job: GradingJob | None, limits: KernelLimits,
                timeout_s: float, seed: int | None = None) -> None:
    """Where the set runs a kernel alone and its test passed on the notebook's record, run it alone on new
    batches (``seed``: drawn here when None); if it is not right there, the test fails in ``verdicts``
    (``{grade_id: judge.Verdict}``) with the reason, and its record is named forged: it claimed results the
    kernel does not give. ``cells`` are the submitted notebook's."""
    import torch

    from ..intake.notebook_cleaning import cell_text
    from .judge import Verdict
    found = spec_for(assignment)
    if found is None or not getattr(verdicts.get(found[1]["test"]), "passed", False):
        return
    module, spec = found
    ref_module, _, ref_name = spec["reference"].partition(":")
    reference = getattr(importlib.import_module(ref_module), ref_name)
    answers = [c for c in cells if c.get("cell_type") == "code"
               and c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == spec["answer"]]
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    try:
        if len(answers) != 1:
            raise NotAlone(f"the notebook should hold one {spec['answer']} cell, it holds {len(answers)}")
        source = kernel_source(cell_text(answers[0].get("source", "")), spec["kernel"])
        batches = module.run_alone_batches(seed)
        outputs = run_alone(source, spec, module.__name__, batches, job, limits, timeout_s)
        for i, (batch, got) in enumerate(zip(batches, outputs)):
            want = reference(*batch.args()).float()
            if got.shape != want.shape or torch.isnan(got).any() or not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
                unwritten = " (some are NaN: never written)" if got.shape == want.shape and torch.isnan(got).any() else ""
                raise NotAlone(f"your kernel, run alone on new batch {i + 1} of {len(batches)} (seed {seed}), "
                               f"gave outputs that are not paged attention's{unwritten}")
    except NotAlone as err:
        gid, before = spec["test"], verdicts[spec["test"]]
        verdicts[gid] = Verdict(gid, False, f"{gid}: {err}; the grader runs your @triton.jit functions alone, "
                                "apart from the notebook, and only then scores this test.",
                                before.forged + [f"{gid}: passed on the notebook's record, but not with its kernel run "
                                                 f"alone ({err})"])
