"""The warm grading worker: one process grades notebook after notebook; one past its budget is killed
with its sandboxed kernel, leaves nothing behind, and the next notebook is graded by a fresh worker."""
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from classroom import answered, solutions_by_cell

from pagedkv_lib.course.instructor.course_layout import cached_releases, db_url, nbgrader_env
from pagedkv_lib.course.instructor.grading import memory_cgroup as cgroup
from pagedkv_lib.course.instructor.grading.grading_job import GradingJob
from pagedkv_lib.course.instructor.grading.grading_worker import Worker, WorkerTimeout, _answer
from pagedkv_lib.course.instructor.grading.kernel_sandbox import hidden_library
from test_grading_sandbox import _course

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nbgrader-class")]
NAME = "ps1_intuition"


def _mentions(text: str) -> list[str]:
    return [line for line in subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True)
            .stdout.splitlines() if text in line]


def _slow_student(root: Path) -> None:
    """``slow``: the first answer sleeps for two minutes, so a short budget stops the job mid-cell."""
    release = json.loads((root / "exercises" / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))
    first = sorted(solutions_by_cell(json.loads((root / "solutions" / NAME / f"{NAME}.ipynb").read_text(encoding="utf-8"))))[0]
    folder = root / "submitted" / "slow" / NAME
    folder.mkdir(parents=True)
    nb = answered(release, {first: "import time\ntime.sleep(120)"})
    (folder / f"{NAME}.ipynb").write_text(json.dumps(nb), encoding="utf-8")


def _close_on_exec(worker: Worker) -> bool:
    """Whether the worker process holds its answers descriptor close-on-exec (so no kernel it starts has it)."""
    fd = next(a.split("=")[1] for a in worker.proc.args if a.startswith("--answers-fd="))
    flags = next(ln for ln in Path(f"/proc/{worker.proc.pid}/fdinfo/{fd}").read_text().splitlines()
                 if ln.startswith("flags:"))
    return bool(int(flags.split()[1], 8) & 0o2000000)  # O_CLOEXEC


def test_only_a_well_formed_answer_with_the_jobs_own_id_ends_a_job():
    good = {"id": "a1", "success": True, "log": "", "error": ""}
    assert _answer(json.dumps(good).encode(), "a1") == good
    forged = [b"not json", b"[]", json.dumps({**good, "id": "b2"}).encode(), json.dumps({**good, "log": None}).encode(),
              json.dumps({k: v for k, v in good.items() if k != "id"}).encode(),
              json.dumps({**good, "success": "yes"}).encode()]
    assert [_answer(line, "a1") for line in forged] == [None] * len(forged)


@pytest.mark.long
def test_one_worker_grades_several_notebooks_and_a_runaway_job_takes_only_itself(tmp_path):
    root = _course(tmp_path, NAME)
    _slow_student(root)
    cached_releases(root, [NAME])  # records the assignment in the gradebook, as autograde does first
    library = hidden_library(tmp_path / "lib", [])
    library.chmod(0o755)
    for student in ("ada", "slow"):
        GradingJob(str(root.resolve()), NAME, student, sandbox=True, library=str(library)).write()
    with open(tmp_path / "worker.log", "ab") as log:
        worker = Worker(root, 30, db_url(root), nbgrader_env(), log)
        try:
            first = worker.autograde(NAME, "ada", budget_s=300)
            pid = worker.proc.pid
            second = worker.autograde(NAME, "ada", budget_s=300)
            assert first["success"] and second["success"], (first["error"], second["error"])
            assert worker.proc.pid == pid and worker.jobs == 2  # the same process, warm
            assert "Autograding" in second["log"]
            assert _close_on_exec(worker), "the worker's answers descriptor would be inherited by its kernels"

            scratch = worker.tmp
            kernels: list[str] = []  # the running kernel's scratch names whose cgroup was seen mid-job

            def spy() -> None:
                own = cgroup._own_memory_cgroup()
                for _ in range(280):  # until the slow job's kernel is running (at most 14 s)
                    found = [p.name for p in Path(scratch).glob("pkv-kernel-*") if p.is_dir()]
                    if found and own is not None and all((own[0] / k).is_dir() for k in found):
                        kernels.extend(found)
                        return
                    time.sleep(0.05)

            spy = threading.Thread(target=spy)
            spy.start()
            with pytest.raises(WorkerTimeout):
                worker.autograde(NAME, "slow", budget_s=15)  # killed mid-cell, its kernel running
            spy.join()
            time.sleep(1)
            assert worker.proc is None and not Path(scratch).exists()
            assert not _mentions(scratch), "a process of the killed worker or its kernel is still running"
            own = cgroup._own_memory_cgroup()
            if own is not None and cgroup.available():
                assert kernels, "no cgroup was seen for the slow job's kernel"
                assert not [k for k in kernels if (own[0] / k).exists()], "the killed kernel's cgroup is left"

            third = worker.autograde(NAME, "ada", budget_s=300)
            assert third["success"] and worker.proc.pid != pid
        finally:
            worker.close()


@pytest.mark.long
def test_a_worker_is_replaced_after_its_quota_of_jobs(tmp_path, monkeypatch):
    root = _course(tmp_path, NAME)
    cached_releases(root, [NAME])
    GradingJob(str(root.resolve()), NAME, "ada", sandbox=False).write()
    with open(tmp_path / "worker.log", "ab") as log:
        worker = Worker(root, 30, db_url(root), nbgrader_env(), log, jobs_per_worker=1)
        try:
            assert worker.autograde(NAME, "ada", budget_s=300)["success"]
            pid, tmp = worker.proc.pid, worker.tmp
            assert worker.autograde(NAME, "ada", budget_s=300)["success"]
            assert worker.proc.pid != pid and not Path(tmp).exists()
        finally:
            worker.close()


def test_a_worker_process_is_bounded_by_its_memory_setting(tmp_path):
    from pagedkv_lib.course.instructor.grading.grading_limits import WorkerLimits
    root = _course(tmp_path, NAME)
    with open(tmp_path / "worker.log", "ab") as log:
        worker = Worker(root, 30, db_url(root), nbgrader_env(), log, memory_bytes=WorkerLimits().memory_bytes)
        try:
            worker._start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the limit is set once the worker's Python has parsed its options
                line = next(ln for ln in Path(f"/proc/{worker.proc.pid}/limits").read_text().splitlines()
                            if ln.startswith("Max address space"))
                if line.split()[3] != "unlimited":
                    break
                time.sleep(0.1)
            assert int(line.split()[3]) == WorkerLimits().memory_bytes, line
        finally:
            worker.close()
