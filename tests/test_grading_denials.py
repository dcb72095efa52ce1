"""Reading what the sandbox denied a kernel from its strace log: reaches for the grader's files count,
what honest code does (imports probing bytecode caches, a program searched on PATH, its own files) does not."""
import shutil
import subprocess
from pathlib import Path

import pytest

from pagedkv_lib.course.instructor.grading.sandbox_denials import denied, tracer

COURSE, LIBRARY = Path("/srv/course"), Path("/srv/course/pagedkv_lib")
VENV, HIDDEN = Path("/srv/course/.venv"), Path("/tmp/pkv-sandbox-lib-ab/ps2_math")
OWN = Path("/tmp/pkv-worker-x/pkv-kernel-mine")

HONEST = [
    '7 openat(AT_FDCWD, "/tmp/pkv-sandbox-lib-ab/ps2_math/pagedkv_lib/__pycache__/gates.cpython-311.pyc", '
    'O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)',
    '7 execve("/srv/course/.venv/bin/git", ["git", "status"], 0x5 /* 9 vars */) = -1 ENOENT (No such file or directory)',
    '7 mkdir("/tmp/pkv-sandbox-lib-ab/ps2_math/pagedkv_lib/kernels/__pycache__", 0777) = -1 EROFS (Read-only file system)',
    '7 openat(AT_FDCWD, "notes.txt", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)',
    '7 openat(AT_FDCWD, "/srv/course/.venv/lib/python3.11/site-packages/x.pth", O_RDONLY) = -1 ENOENT (No such file)',
    '7 openat(3, "sub/file", O_RDONLY) = -1 ENOENT (No such file or directory)',
    '7 readlink("/usr", 0x7ffd, 1023) = -1 EINVAL (Invalid argument)',
]
HOSTILE = {
    '8 openat(AT_FDCWD, "/srv/course/gradebook.db", O_RDWR|O_CREAT|O_APPEND, 0666) = -1 ENOENT (No such file)':
        "openat /srv/course/gradebook.db (ENOENT)",
    '8 openat(AT_FDCWD, "/srv/course/submitted/bob/ps2_math/ps2_math.ipynb", O_RDONLY) = -1 ENOENT (No such)':
        "openat /srv/course/submitted/bob/ps2_math/ps2_math.ipynb (ENOENT)",
    '8 openat(AT_FDCWD, "/srv/course/pagedkv_lib/accounting.py", O_WRONLY|O_TRUNC) = -1 EACCES (Permission denied)':
        "openat /srv/course/pagedkv_lib/accounting.py (EACCES)",
    '8 openat(AT_FDCWD, "/tmp/pkv-sandbox-lib-ab/ps2_math/pagedkv_lib/accounting.py", O_WRONLY|O_APPEND) '
    '= -1 EROFS (Read-only file system)': "openat /tmp/pkv-sandbox-lib-ab/ps2_math/pagedkv_lib/accounting.py (EROFS)",
    '8 unlink("/srv/course/.venv/lib/python3.11/site-packages/nbgrader/__init__.py") = -1 EROFS (Read-only file system)':
        "unlink /srv/course/.venv/lib/python3.11/site-packages/nbgrader/__init__.py (EROFS)",
    '8 openat(AT_FDCWD, "../../pkv-kernel-theirs/kernel/kernel.json", O_RDONLY) = -1 ENOENT (No such file)':
        "openat /tmp/pkv-worker-x/pkv-kernel-theirs/kernel/kernel.json (ENOENT)",
    '8 renameat2(AT_FDCWD, "/tmp/x", AT_FDCWD, "/srv/course/grades.csv", 0) = -1 ENOENT (No such file)':
        "renameat2 /srv/course/grades.csv (ENOENT)",
    # creat names no folder (it is not an *at call): its relative path is read from the kernel's home
    '8 creat("../../pkv-kernel-theirs/home/answers.py", 0644) = -1 EACCES (Permission denied)':
        "creat /tmp/pkv-worker-x/pkv-kernel-theirs/home/answers.py (EACCES)",
}


def _denied(tmp_path, lines):
    log = tmp_path / "trace.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return denied(log, cwd=OWN / "home", own=OWN, course=COURSE, library=LIBRARY, read_only=[VENV, HIDDEN])


def test_what_honest_code_does_is_never_a_denial(tmp_path):
    assert _denied(tmp_path, HONEST) == []


@pytest.mark.parametrize("line", list(HOSTILE))
def test_each_reach_for_the_graders_files_is_named(tmp_path, line):
    assert _denied(tmp_path, HONEST + [line]) == [HOSTILE[line]]


def test_a_missing_log_or_junk_in_it_gives_nothing(tmp_path):
    assert denied(tmp_path / "none.log", cwd=OWN, own=OWN, course=COURSE, library=LIBRARY, read_only=[]) == []
    assert _denied(tmp_path, ["garbage", '9 openat(AT_FDCWD, "/srv/course/x" <unfinished ...>', ""]) == []


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_the_tracer_logs_a_real_failed_open(tmp_path):
    log = tmp_path / "trace.log"
    target = tmp_path / "course" / "gradebook.db"
    subprocess.run(tracer(log) + ["python3", "-c", f"open({str(target)!r})"], capture_output=True)
    found = denied(log, cwd=tmp_path, own=tmp_path / "own", course=tmp_path / "course", library=LIBRARY, read_only=[])
    assert found == [f"openat {target} (ENOENT)"]


def test_the_log_filter_copies_lines_until_its_cap_then_says_the_log_was_cut(tmp_path):
    """strace's output passes ``LOG_FILTER``: lines are copied as they come, and past the cap one line says
    the log was cut (the filter reads on, so strace never blocks)."""
    import sys

    from pagedkv_lib.course.instructor.grading.sandbox_denials import LOG_FILTER, TRUNCATED
    failed = HONEST[0]
    log, cap = tmp_path / "trace.log", 4000
    subprocess.run([sys.executable, "-I", "-S", "-c", LOG_FILTER, str(log), str(cap)],
                   input="\n".join([failed] * 100_000) + "\n", text=True, check=True)
    text = log.read_text(encoding="utf-8")
    assert text.startswith(failed + "\n")
    assert len(text.encode()) <= cap + len(TRUNCATED) + 1 and text.rstrip("\n").endswith(TRUNCATED)


def test_hidden_calls_reads_the_stubs_marks_and_nothing_else(tmp_path):
    from pagedkv_lib.course.instructor.grading.sandbox_denials import HIDDEN_CALL_MARK, hidden_calls
    log = tmp_path / "trace.log"
    log.write_text("\n".join([
        f'7 openat(AT_FDCWD, "{HIDDEN_CALL_MARK}pagedkv_lib.accounting:tail_slack", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file)',
        f'7 openat(AT_FDCWD, "/srv{HIDDEN_CALL_MARK}pagedkv_lib.accounting:bytes_per_token", O_RDONLY) = -1 ENOENT (No such file)',
        f'8 open("{HIDDEN_CALL_MARK}pagedkv_lib.blocks.manager:BlockManager", O_RDONLY) = -1 ENOENT (No such file)',
        f'7 openat(AT_FDCWD, "{HIDDEN_CALL_MARK}pagedkv_lib.accounting:tail_slack", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file)',
    ]) + "\n")
    assert hidden_calls(log) == ["pagedkv_lib.accounting:tail_slack", "pagedkv_lib.blocks.manager:BlockManager"]
    assert hidden_calls(tmp_path / "missing.log") == []
