"""The sandbox around student kernels: what it hides and limits, and what autograde does without it."""
from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from classroom import answered, course_copy, solutions_by_cell
from conftest import REPO
from pagedkv_lib import course
from pagedkv_lib.course.instructor.autograde_class import graded_functions
from pagedkv_lib.course.instructor.grading import kernel_sandbox as sandbox
from pagedkv_lib.errors import PagedKVError

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="bubblewrap, run as root (CI installs it in .ci/run)")

PROBE = r"""
import json, os, socket, subprocess, sys
repo = sys.argv[1]  # only the venv inside it is there: the rest of the repository is not
out = {"uid": os.getuid(), "pid": os.getpid(),
       "sees_repo": bool(set(os.listdir(repo) if os.path.isdir(repo) else []) - {".venv"}),
       "sees_solutions": os.path.exists(os.path.join(sys.argv[1], "solutions"))}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    out["network"] = True
except OSError:
    out["network"] = False
try:
    open(os.path.join(sys.prefix, "pyvenv.cfg"), "a").close()
    out["venv_writable"] = True
except OSError:
    out["venv_writable"] = False
import pagedkv_lib.accounting as acc
out["library"] = acc.__file__
try:
    acc.blocks_needed(3, 2)
    out["hidden"] = False
except NotImplementedError:
    out["hidden"] = True
try:
    import pagedkv_lib.course.instructor
    out["instructor"] = True
except ImportError:
    out["instructor"] = False
try:
    bytearray(8 * 2**30)
    out["memory_capped"] = False
except MemoryError:
    out["memory_capped"] = True
subprocess.Popen(["sleep", sys.argv[2]], start_new_session=True)  # must not outlive the sandbox
print(json.dumps(out))
"""


@needs_bwrap
def test_a_sandboxed_process_sees_and_reaches_only_what_it_should(tmp_path):
    uid, gid = sandbox.KERNEL_UIDS[0], sandbox.grader_ids()[1]
    # Other tests run sandboxes under this uid at the same time (pytest -n), so the probe's own orphan is told
    # apart by a sleep length no other process has.
    nap = f"300.{secrets.randbelow(10**9):09d}"
    scratch = sandbox.new_scratch(uid, gid)
    library = sandbox.hidden_library(tmp_path / "lib", ["pagedkv_lib.accounting:blocks_needed"])
    env = {"HOME": str(scratch / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(library)}
    try:
        argv = sandbox.bwrap_argv(scratch, library, uid, gid, env) + [sys.executable, "-c", PROBE, str(REPO), nap]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert seen["uid"] == uid and seen["pid"] < 10  # its own PID namespace
    assert not seen["sees_repo"] and not seen["sees_solutions"] and not seen["network"]
    assert not seen["venv_writable"] and seen["library"].startswith(str(library))
    assert seen["hidden"] and not seen["instructor"] and seen["memory_capped"]
    left = subprocess.run(["ps", "-eo", "uid=,args="], capture_output=True, text=True).stdout.splitlines()
    assert len(left) > 1, "ps listed no processes"
    orphans = [line for line in left if line.split()[0] == str(uid) and nap in line]
    assert not orphans, f"a process started in the sandbox outlived it: {orphans}"


def test_the_hidden_library_keeps_everything_else(tmp_path):
    library = sandbox.hidden_library(tmp_path, ["pagedkv_lib.blocks.manager:BlockManager",
                                                "pagedkv_lib.accounting:blocks_needed"])
    manager = (library / "pagedkv_lib" / "blocks" / "manager.py").read_text(encoding="utf-8")
    assert "class BlockManager:\n    __pagedkv_hidden__ = True" in manager
    assert "def kv_capacity(" in (library / "pagedkv_lib" / "accounting.py").read_text(encoding="utf-8")
    assert not (library / "pagedkv_lib" / "course" / "instructor").exists()
    with pytest.raises(PagedKVError, match="defines no"):
        sandbox.hidden_library(tmp_path / "again", ["pagedkv_lib.accounting:no_such_function"])


#: ps3 Q7 answered by the library: its own ``block_hash.chain_keys`` does the chaining and the salt rule once it
#: is handed the blocks (a composition the stub evidence probe does not try).
CHAIN_ROUTE = """import pagedkv_lib.blocks.block_hash as h
from pagedkv_lib.course.learner.pset_checks.ps3_code import toy_block_hash
tokens, S = list(range(10)), 4
print(h.__file__)
try:
    print(list(h.chain_keys(toy_block_hash, [tuple(tokens[i * S:(i + 1) * S]) for i in range(len(tokens) // S)],
                            "tenant-a")))
except NotImplementedError:
    print("hidden")
"""


def test_ps3_hides_the_library_route_to_q7s_chained_keys(tmp_path):
    """Without ``block_hash:chain_keys`` in ps3's graded functions the composed call hands in Q7's worked answer;
    with it, the call raises in the grading library."""
    graded = json.loads((REPO / "solutions/ps3_code/ps3_code.ipynb").read_text(encoding="utf-8"))["metadata"][
        "pagedkv"]["graded_functions"]
    assert "pagedkv_lib.blocks.block_hash:chain_keys" in graded
    for hidden, want in ((graded, "hidden"), ([g for g in graded if not g.endswith(":chain_keys")],
                                              "['2798786bd564b940', 'aa4be065b7f8fdbc']")):
        library = sandbox.hidden_library(tmp_path / str(len(hidden)), hidden)
        done = subprocess.run([sys.executable, "-c", CHAIN_ROUTE], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(library)})
        assert done.returncode == 0, done.stderr
        where, answer = done.stdout.split("\n")[:2]
        assert where.startswith(str(library)) and answer == want


#: ps3's bonus answered by the library: a learner's own ``@triton.jit`` kernel, with the bonus's signature, that
#: only calls the library's kernel (a Triton kernel may call another); and the partitioned kernel's public call,
#: which answers the paged decode questions. Prints each one's output, or "hidden".
KERNEL_ROUTES = """import os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from pagedkv_lib.attention import triton_decode as td
from pagedkv_lib.attention.batch import random_paged_batch
from pagedkv_lib.course.learner.pset_checks.ps3_code import launch_paged_decode

@triton.jit
def paged_decode_kernel(q, k, v, out, tables, lens, scale, max_blocks,
                        H_KV: tl.constexpr, GROUP: tl.constexpr, S: tl.constexpr, D: tl.constexpr):
    td._paged_decode_kernel(q, k, v, out, tables, lens, scale * 1.4426950408889634,
                            H_KV * GROUP * D, D, 1, S * H_KV * D, H_KV * D, D, 1, S * H_KV * D, H_KV * D, D, 1,
                            H_KV * GROUP * D, D, 1, max_blocks, 1, 1, GROUP, S, D, 16, 16, 16, "ieee")

batch = random_paged_batch([5, 8], block_size=4, num_kv_heads=2, group=2, head_dim=8, seed=1)
for route in (lambda: launch_paged_decode(paged_decode_kernel, batch),
              lambda: __import__("pagedkv_lib.attention.triton_split_decode", fromlist=["x"])
              .paged_decode_triton_split(*batch.args())):
    try:
        print(route().flatten().tolist())
    except Exception as exc:  # the interpreter wraps what a kernel raised in its own InterpreterError
        print("hidden" if "is hidden while this problem set is graded" in str(exc) else repr(exc))
"""


def test_ps3_hides_the_library_kernels_a_learner_could_call(tmp_path):
    """Without the Triton kernels in ps3's graded functions, a bonus kernel that calls the library's kernel, and the
    partitioned kernel's public call, both give the worked example's attention; with them, both raise."""
    from pagedkv_lib.attention.batch import random_paged_batch
    from pagedkv_lib.attention.spec import paged_decode_reference
    graded = graded_functions(REPO, "ps3_code")
    kernels = {"pagedkv_lib.attention.triton_decode:_paged_decode_kernel",
               *(f"pagedkv_lib.attention.triton_split_decode:{name}"
                 for name in ("paged_decode_triton_split", "_launch_unchecked", "_paged_decode_partition_kernel",
                              "_merge_partitions_kernel"))}
    assert kernels <= set(graded)
    expected = paged_decode_reference(*random_paged_batch([5, 8], block_size=4, num_kv_heads=2, group=2, head_dim=8,
                                                          seed=1).args())
    for hidden, stubbed in ((graded, True), ([g for g in graded if g not in kernels], False)):
        library = sandbox.hidden_library(tmp_path / str(len(hidden)), hidden)
        done = subprocess.run([sys.executable, "-c", KERNEL_ROUTES], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                "PYTHONPATH": str(library)})
        assert done.returncode == 0, done.stderr[-3000:]
        outputs = done.stdout.strip().split("\n")
        assert len(outputs) == 2, done.stdout
        for out in outputs:
            if stubbed:
                assert out == "hidden", out[:200]
            else:
                assert out.startswith("["), out[:300]
                got = torch.tensor(json.loads(out)).reshape(expected.shape)
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def _triton_kernels(root: Path = REPO) -> set[str]:
    """Every definition in ``root``'s library decorated from Triton (``@triton.jit``, ``@tr.autotune(...)`` after
    ``import triton as tr``, ``@jit`` after ``from triton import jit``), as ``"pagedkv_lib.module:name"``."""
    import ast
    found = set()
    for path in sorted((root / "pagedkv_lib").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules, names = {"triton"}, set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "triton"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
                names |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    target = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                    if target.split(".")[0] in names | modules:
                        found.add(f"{module}:{node.name}")
    return found


def test_the_kernel_walk_finds_each_way_of_writing_a_triton_decorator(tmp_path):
    (tmp_path / "pagedkv_lib" / "sub").mkdir(parents=True)
    (tmp_path / "pagedkv_lib/a.py").write_text("import triton as tr\n@tr.jit\ndef k1(x):\n    pass\n")
    (tmp_path / "pagedkv_lib/sub/__init__.py").write_text(
        "from triton import jit\n@jit\ndef k2(x):\n    pass\n@other\ndef plain(x):\n    pass\n")
    (tmp_path / "pagedkv_lib/c.py").write_text(
        "import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k3(x):\n    pass\ndef f():\n    pass\n")
    assert _triton_kernels(tmp_path) == {"pagedkv_lib.a:k1", "pagedkv_lib.sub:k2", "pagedkv_lib.c:k3"}


def test_every_triton_kernel_in_the_library_is_hidden_while_ps3_is_graded_or_kept_with_a_reason():
    """A learner's bonus kernel may call any Triton kernel the grading library holds, and the stub evidence
    probe cannot call a kernel from a kernel: so the list is derived from the code, not remembered. A kernel
    added to the library fails here until ps3 hides it or says in ``kept_visible`` why it gives no answer."""
    meta = json.loads((REPO / "solutions/ps3_code/ps3_code.ipynb").read_text(encoding="utf-8"))["metadata"]["pagedkv"]
    kernels = _triton_kernels()
    assert "pagedkv_lib.attention.triton_decode:_paged_decode_kernel" in kernels   # the walk finds the lesson's kernel
    exposed = kernels - set(meta["graded_functions"]) - set(meta.get("kept_visible", {}))
    assert not exposed, f"Triton kernels a ps3 bonus kernel could call while graded: {sorted(exposed)}"


def _course(tmp_path: Path, name="ps1_intuition") -> Path:
    root = course_copy(tmp_path / "course", name)
    release = json.loads((root / course.RELEASE / name / f"{name}.ipynb").read_text(encoding="utf-8"))
    good = solutions_by_cell(json.loads((root / course.SOURCE / name / f"{name}.ipynb").read_text(encoding="utf-8")))
    folder = root / course.SUBMITTED / "ada" / name
    folder.mkdir(parents=True)
    (folder / f"{name}.ipynb").write_text(json.dumps(answered(release, good)), encoding="utf-8")
    return root


@pytest.mark.slow
@pytest.mark.xdist_group("nbgrader-class")
def test_without_bubblewrap_autograde_refuses_and_trust_submissions_grades_unsandboxed(tmp_path, monkeypatch):
    root = _course(tmp_path)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # the venv's tools, no bwrap
    assert shutil.which("bwrap") is None
    with pytest.raises(PagedKVError, match="apt-get install bubblewrap") as refused:
        course.autograde(root, progress=False)
    assert "--trust-submissions" in str(refused.value)
    assert not (root / "grades.csv").exists()
    cli = subprocess.run([sys.executable, "-m", "pagedkv_lib.course", "autograde", "--course-dir", str(root)],
                         capture_output=True, text=True)
    assert cli.returncode == 1 and "bubblewrap" in cli.stderr
    statuses = course.autograde(root, progress=False, trust_submissions=True, workers=1)
    assert [s.label for s in statuses] == ["unsandboxed"]
    rows = list(csv.DictReader((root / "grades.csv").open(encoding="utf-8")))
    assert float(rows[0]["raw_score"]) == 18.0 and rows[0]["status"] == "unsandboxed"
