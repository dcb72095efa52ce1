"""The README is the test: a learner's route from the learner release alone, in new virtual environments.

JupyterLab on a laptop: build the release, run the install block read from the release's own README.md
(tools/learner_release.py writes it) in bash in the release folder, as written where PyTorch's index can be
reached (a CI runner); where it cannot (this machine, whose pip configuration serves the CPU wheel), the
``--index-url`` of PyTorch's CPU index is dropped, and nothing else. The block's last line starts
JupyterLab on the first lesson; the test waits until the server serves that lesson and has started its
kernel, then stops the server by its process group. Then, from the release folder and with the new venv only,
every lesson runs with every gate committed (tests/test_lessons_gated.py's probe), and every released set,
answered as a learner would (the reference answers typed into its answer cells), passes ``nbgrader
validate``. The time of each step and the venv's size go to ``artifacts/release-route.json`` and
benchmarks/RESULTS.md.

Colab: a new venv standing in for a Colab runtime (its torch, numpy, matplotlib, ipykernel, and Colab's
widget pins from the Makefile's ``COLAB_PINS``; no pagedkv_lib, no tqdm), a ``google.colab`` module present
in every kernel, and each lesson's first cell as the release wrote it, with ``PAGEDKV_SOURCE`` set to the
release's wheel as the release README tells a Colab learner to: the first lesson's cell installs the
library, and every lesson then runs with every gate committed. Then Colab's *Validate* (*Runtime > Run all*; no
nbgrader there): every released set, answered as for JupyterLab, runs with its setup cell pointed the same way,
shows no error, and each test cell prints its pass line (the Triton bonus may print its skip line).

Cost: pip's cache makes the installs quick after the first run; the measured minutes are in RESULTS.md.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO
from test_bonus_without_triton import answered
from test_lessons_gated import PROBE

pytestmark = [pytest.mark.long, pytest.mark.slow]

spec = importlib.util.spec_from_file_location("learner_release", REPO / "tools" / "learner_release.py")
release_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release_tool)

UNREACHABLE_HERE = " --index-url https://download.pytorch.org/whl/cpu"
"""The one change the test may make to the README's block, where PyTorch's index cannot be reached (this
machine: its pip configuration serves the same CPU wheel); where it can, the block runs as written."""
ARTIFACT = REPO / "artifacts" / "release-route.json"
RUNNER = Path(__file__).with_name("notebook_runs.py")
"""The tests' notebook runner, copied beside the scripts below, which import it in the learner's venv."""

RUN_LESSONS = r'''
import json, sys, time
from pathlib import Path
import nbformat
from notebook_runs import notebook_client   # copied beside this script: a kernel on Unix sockets, polls in slices
probe, out, first_cell = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
report = {"lessons": {}}
for path in sorted(Path("notebooks").glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    if first_cell:
        nb.cells[0].source = nb.cells[0].source.replace(first_cell[0], first_cell[1])
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code":
            cells.append(nbformat.v4.new_code_cell(Path(probe).read_text()))
    nb.cells = cells
    start = time.monotonic()
    notebook_client(nb, path, timeout=900).execute()
    errors = [o.get("evalue", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    committed = [g for line in printed.splitlines() if line.startswith("COMMITTED ") for g in json.loads(line[10:])]
    gates = sum(c.source.count(call) for c in nb.cells for call in ("W.ask(", "W.predict(", "AllocationLab(", "SimulatorLab("))
    report["lessons"][path.stem] = {"errors": errors, "committed": committed, "gates": gates,
                                    "seconds": round(time.monotonic() - start, 1)}
import importlib
importlib.invalidate_caches()
import pagedkv_lib  # after the lessons: on the Colab stand-in the first lesson installs it
report["library"] = pagedkv_lib.__file__
Path(out).write_text(json.dumps(report))
'''

RUN_SETS = r'''
import json, sys
from pathlib import Path
import nbformat
from notebook_runs import notebook_client   # copied beside this script: a kernel on Unix sockets, polls in slices
out, first_cell, paths = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
report = {}
for path in map(Path, paths):
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace(first_cell[0], first_cell[1])
    client = notebook_client(nb, path, timeout=900)
    client.allow_errors = True
    client.execute()
    text = lambda o: o.get("text", "") + o.get("data", {}).get("text/plain", "")
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    report[path.stem] = {"errors": [o.get("evalue", "") for o in outputs if o.get("output_type") == "error"],
                         "tests": {c.metadata["nbgrader"]["grade_id"]: "".join(text(o) for o in c.get("outputs", []))
                                   for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
                                   and not c.metadata["nbgrader"].get("solution")}}
Path(out).write_text(json.dumps(report))
'''


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("route") / "release"
    wheel = release_tool.build(REPO, out)
    return out, wheel


def reachable(index: str) -> bool:
    """Whether pip could read ``index`` from here (a CI runner can; this course's build machine cannot)."""
    try:
        with urllib.request.urlopen(index.rstrip("/") + "/torch/", timeout=10):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**more) -> dict:
    """This process's environment without its venv or paths, so nothing of the repository's .venv leaks in."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO)))
    return {**env, "MPLBACKEND": "Agg", **more}


def fetch(url: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except OSError:
        return 0, None


def wait_for_lesson(port: int, token: str, proc, limit_s: float) -> None:
    """Until the server serves the first lesson and has started a kernel for it, as opening it in the
    browser does (or fail); the kernel is shut down again."""
    base = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + limit_s
    while fetch(f"{base}/contents/notebooks/01_intuition.ipynb?token={token}")[0] != 200:
        assert proc.poll() is None, f"the block stopped (exit {proc.returncode}) before JupyterLab served the lesson"
        assert time.monotonic() < deadline, "JupyterLab did not serve the first lesson in time"
        time.sleep(1)
    body = json.dumps({"path": "notebooks/01_intuition.ipynb", "type": "notebook", "name": "",
                       "kernel": {"name": "python3"}}).encode()
    request = urllib.request.Request(f"{base}/sessions?token={token}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        assert r.status == 201, r.status
        kernel = json.loads(r.read())["kernel"]["id"]
    stop = urllib.request.Request(f"{base}/kernels/{kernel}?token={token}", method="DELETE")
    with urllib.request.urlopen(stop, timeout=60) as r:
        assert r.status == 204, r.status


def run_block(release: Path, home: Path) -> dict:
    """Run the README's block in bash in ``release``; the step times (s) and the venv's size (bytes)."""
    lines = release_tool.install_block_in((release / "README.md").read_text())
    block = "\n".join(lines)
    assert block.count(UNREACHABLE_HERE) == 1, f"the block no longer installs from PyTorch's CPU index:\n{block}"
    if not reachable(UNREACHABLE_HERE.split()[-1]):
        block = block.replace(UNREACHABLE_HERE, "")
    port, token = free_port(), "route-test-token"
    config = home / "jupyter-config"
    config.mkdir(parents=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {
        "ip": "127.0.0.1", "port": port, "port_retries": 0, "open_browser": False, "allow_root": True,
        "token": token}, "IdentityProvider": {"token": token}}))
    env = clean_env(JUPYTER_CONFIG_DIR=str(config))
    timed = "PS4='+ $(date +%s.%N) '\n" + block   # bash takes no PS4 from a root's environment
    log = open(home / "block.log", "w")
    start, epoch = time.monotonic(), time.time()
    proc = subprocess.Popen(["bash", "-e", "-x", "-c", timed], cwd=release, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for_lesson(port, token, proc, limit_s=1200)
        opened = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # the block's own process group: bash and the server it started
        proc.wait(timeout=60)
        log.close()
    steps = step_times(block.splitlines(), (home / "block.log").read_text(), epoch + opened)
    size = sum(f.stat().st_size for f in (release / ".venv").rglob("*") if f.is_file() and not f.is_symlink())
    return {"first_lesson_open_s": round(opened, 1), "steps_s": steps, "venv_bytes": size}


def step_times(lines: list[str], trace: str, end: float) -> dict[str, float]:
    """Seconds each line of the block took, from bash's ``-x`` trace (a time stamp before each command);
    the last line (JupyterLab) until ``end``, when it had served the first lesson and started its kernel."""
    plain = lambda text: " ".join(re.sub(r"['\"]", "", text.split("#")[0]).split())  # noqa: E731
    wanted = {plain(line): line.split("#")[0].strip() for line in lines}
    stamps = [(float(m.group(1)), wanted[plain(m.group(2))]) for m in re.finditer(r"^\+ (\d+\.\d+) (.*)$", trace, re.M)
              if plain(m.group(2)) in wanted]
    return {line: round(b - a, 1) for (a, line), (b, _) in zip(stamps, stamps[1:] + [(end, "")])}


def run_lessons(python: Path, release: Path, tmp: Path, env: dict, first_cell=None) -> dict:
    (tmp / "probe.py").write_text(PROBE)
    (tmp / "run_lessons.py").write_text(RUN_LESSONS)
    shutil.copy(RUNNER, tmp)
    out = tmp / "lessons.json"
    proc = subprocess.run([str(python), str(tmp / "run_lessons.py"), str(tmp / "probe.py"), str(out),
                           json.dumps(first_cell)], cwd=release, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def run_answered_sets(python: Path, release: Path, tmp: Path, env: dict, first_cell: list[str]) -> dict:
    """Each released set, answered as :func:`answered` types the reference answers in, run in ``python``'s kernel
    from ``release``: ``{set: {"errors": [...], "tests": {grade_id: what the test cell printed}}}``."""
    mine = [answered(released, release / "colab-work" / released.parent.name / released.name)
            for released in sorted(release.glob("exercises/*/*.ipynb"))]
    (tmp / "run_sets.py").write_text(RUN_SETS)
    shutil.copy(RUNNER, tmp)
    out = tmp / "sets.json"
    proc = subprocess.run([str(python), str(tmp / "run_sets.py"), str(out), json.dumps(first_cell), *map(str, mine)],
                          cwd=release, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def assert_every_set_passes(report: dict) -> None:
    """No error, and every test cell printed its pass line (the Triton bonus may print its skip line instead)."""
    assert len(report) == 4, sorted(report)
    for name, ran in report.items():
        assert not ran["errors"], (name, ran["errors"][:3])
        assert ran["tests"], name
        for grade_id, printed in ran["tests"].items():
            skipped = grade_id == "bonus_tests" and "Bonus skipped: " in printed
            assert skipped or f"{grade_id}: the checks in this cell passed." in printed, (name, grade_id, printed[-600:])


def assert_every_gate_committed(report: dict, venv: Path) -> None:
    assert report["library"].startswith(str(venv)), f"the lessons imported {report['library']}, not the new venv's"
    assert len(report["lessons"]) == 4, report["lessons"]
    for stem, lesson in report["lessons"].items():
        assert not lesson["errors"], (stem, lesson["errors"][:3])
        assert lesson["gates"] >= 1 and len(lesson["committed"]) >= lesson["gates"], (stem, lesson)


@pytest.mark.xdist_group("release-route-lab")
def test_the_readmes_block_installs_the_course_opens_lesson_01_runs_every_lesson_and_validates_every_set(
        release, tmp_path):
    out, wheel = release
    route = run_block(out, tmp_path)
    venv = out / ".venv"
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-c", "import torch, importlib.metadata as m; print(torch.__version__); "
                                "print(*sorted(d.metadata['Name'] for d in m.distributions()))"],
                               capture_output=True, text=True, env=clean_env(), check=True).stdout.split()
    assert installed[0].endswith("+cpu"), f"the block installed torch {installed[0]}, not PyTorch's CPU build"
    assert not [d for d in installed[1:] if d.lower().startswith(("nvidia-", "cuda-"))], "CUDA libraries came with it"
    assert {"numba", "triton", "jupyterlab", "nbgrader"} <= set(installed[1:]), installed
    env = clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{clean_env()['PATH']}", VIRTUAL_ENV=str(venv))
    start = time.monotonic()
    lessons = run_lessons(python, out, tmp_path, env)
    route["lessons_s"] = round(time.monotonic() - start, 1)
    route["per_lesson_s"] = {k: v["seconds"] for k, v in lessons["lessons"].items()}
    assert_every_gate_committed(lessons, venv)
    start = time.monotonic()
    for released in sorted(out.glob("exercises/*/*.ipynb")):
        name = released.parent.name
        mine = answered(released, out / "my-work" / name / f"{name}.ipynb")
        proc = subprocess.run([str(venv / "bin" / "nbgrader"), "validate", str(mine.relative_to(out))], cwd=out, env=env,
                              capture_output=True, text=True, timeout=1800)
        assert "Success! Your notebook passes all the tests." in proc.stdout, (name, proc.stdout[-3000:], proc.stderr[-2000:])
    route["validate_s"] = round(time.monotonic() - start, 1)
    route["wheel"] = wheel.name
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"lab": route}, indent=1))
    print("release route (lab):", json.dumps(route))


def colab_pins() -> list[str]:
    """Colab's widget stack, as the Makefile pins it for ``make test-colab``."""
    line = re.search(r"^COLAB_PINS\s*:=\s*(.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    return [w.strip("'") for w in line.split()]


GOOGLE_COLAB = "import sys, types\nsys.modules.setdefault('google.colab', types.ModuleType('google.colab'))\n"
"""A ``sitecustomize`` for the Colab stand-in: the setup cell sees ``google.colab`` as on Colab."""


@pytest.mark.xdist_group("release-route-colab")
def test_on_a_colab_stand_in_the_releases_setup_cell_installs_the_wheel_and_every_lesson_runs(release, tmp_path):
    out, wheel = release
    venv = tmp_path / "colab"
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    runtime = [f"torch=={release_tool.torch_pin(REPO)}", "numpy", "matplotlib", "ipykernel", "nbclient", *colab_pins()]
    index = UNREACHABLE_HERE.split()[-1]
    runtime += ["--extra-index-url", index] if reachable(index) else []   # the CPU build, as here, not CUDA's GBs
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *runtime], check=True, env=clean_env(),
                   timeout=1800)
    installed = time.monotonic() - start
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import importlib.util as u, ipywidgets; "
                            "print(ipywidgets.__version__, u.find_spec('pagedkv_lib'), u.find_spec('tqdm'))"],
                           capture_output=True, text=True, env=clean_env(), cwd=tmp_path)
    assert probe.stdout.split() == ["7.7.1", "None", "None"], probe
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(GOOGLE_COLAB)
    env = clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{clean_env()['PATH']}", VIRTUAL_ENV=str(venv),
                    PYTHONPATH=str(tmp_path / "site"))
    readme = (out / "README.md").read_text()
    assert f"PAGEDKV_SOURCE = '/content/{wheel.name}'" in readme, "the README tells a Colab learner what to set"
    first = "PAGEDKV_SOURCE = None"
    assert all(first in "".join(json.loads(nb.read_text())["cells"][0]["source"])
               for nb in [*out.glob("notebooks/*.ipynb"), *out.glob("exercises/*/*.ipynb")])
    start = time.monotonic()
    lessons = run_lessons(python, out, tmp_path, env, first_cell=[first, f"PAGEDKV_SOURCE = {str(wheel)!r}"])
    assert_every_gate_committed(lessons, venv)
    lessons_s = round(time.monotonic() - start, 1)
    start = time.monotonic()
    sets = run_answered_sets(python, out, tmp_path, env, [first, f"PAGEDKV_SOURCE = {str(wheel)!r}"])
    assert_every_set_passes(sets)
    route = {"runtime_install_s": round(installed, 1), "lessons_s": lessons_s, "sets_s": round(time.monotonic() - start, 1),
             "per_lesson_s": {k: v["seconds"] for k, v in lessons["lessons"].items()}}
    ARTIFACT.parent.mkdir(exist_ok=True)
    before = json.loads(ARTIFACT.read_text()) if ARTIFACT.is_file() else {}
    ARTIFACT.write_text(json.dumps({**before, "colab": route}, indent=1))
    print("release route (colab):", json.dumps(route))
