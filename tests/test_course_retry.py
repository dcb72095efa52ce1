"""A grading run that fails through no doing of the student's is tried again; a student's own failure is not."""
from pagedkv_lib.course.instructor.grading import worker_pool as grade
from pagedkv_lib.course.instructor.grading.grading_limits import WorkerLimits
from pagedkv_lib.course.instructor.notebook_result import NotebookResult as Status


def _fake_runs(monkeypatch, outcomes):
    calls = []

    def fake_grade_one(worker, root, assignment, student, budget_s, job=None):
        problems = outcomes[min(len(calls), len(outcomes) - 1)]
        calls.append(problems)
        return Status(student, assignment, problems=list(problems), failed=bool(problems))

    monkeypatch.setattr(grade, "grade_one", fake_grade_one)
    return calls


def test_a_grader_error_is_retried_and_the_later_clean_run_counts(monkeypatch):
    calls = _fake_runs(monkeypatch, [["grader error"], []])
    status = grade.grade_one_retrying(None, ".", "ps2_math", "ann", 60)
    assert len(calls) == 2 and status.label == "ok" and not status.failed
    assert "try 2" in status.details[-1]


def test_a_failure_the_student_caused_is_not_retried(monkeypatch):
    calls = _fake_runs(monkeypatch, [["kernel died"]])
    status = grade.grade_one_retrying(None, ".", "ps2_math", "bob", 60)
    assert len(calls) == 1 and status.problems == ["kernel died"]


def test_a_grader_error_that_persists_is_reported_after_the_last_try(monkeypatch):
    calls = _fake_runs(monkeypatch, [["grader error"]])
    status = grade.grade_one_retrying(None, ".", "ps2_math", "cy", 60)
    assert len(calls) == WorkerLimits().grader_retries + 1 and status.problems == ["grader error"] and status.failed


def test_jobs_start_with_the_assignment_that_took_longest_in_the_last_run(tmp_path):
    jobs = [("ps1_intuition", "ann"), ("ps3_code", "ann"), ("ps1_intuition", "bob"), ("ps3_code", "bob")]
    assert grade.longest_first(tmp_path, jobs) == jobs  # no run yet: as given
    grade._remember_seconds(tmp_path, [Status("ann", "ps1_intuition", seconds=2.0),
                                       Status("ann", "ps3_code", seconds=9.0)])
    assert grade.longest_first(tmp_path, jobs) == [("ps3_code", "ann"), ("ps3_code", "bob"),
                                                   ("ps1_intuition", "ann"), ("ps1_intuition", "bob")]
    for damaged in ("[1, 2", "[1, 2]", '{"ps3_code": "slow"}'):
        (tmp_path / grade.CACHE_DIR / grade.SECONDS).write_text(damaged, encoding="utf-8")
        assert grade.longest_first(tmp_path, jobs) == jobs, damaged


def test_the_worker_settings_in_the_course_config_reach_every_worker_the_pool_starts(tmp_path, monkeypatch):
    """``c.WorkerLimits`` in ``nbgrader_config.py`` is what each worker is started with: its quota of
    notebooks before a fresh process replaces it, and its address-space bound (test_grading_worker.py
    shows a real worker honouring both)."""
    from pagedkv_lib.course.instructor.course_layout import course_config
    from pagedkv_lib.course.instructor.grading.grading_job import GradingJob
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.WorkerLimits.jobs_per_worker = 3\n"
                                                 "c.WorkerLimits.memory_bytes = 2**31\n", encoding="utf-8")
    started = []

    class FakeWorker:
        def __init__(self, root, timeout_s, db_url, env, log, jobs_per_worker, memory_bytes):
            started.append((jobs_per_worker, memory_bytes))

        def close(self):
            pass

    monkeypatch.setattr(grade, "Worker", FakeWorker)
    monkeypatch.setattr(grade, "grade_one", lambda worker, root, a, s, budget_s, job=None: Status(s, a))
    limits = WorkerLimits(config=course_config(tmp_path))
    jobs = [GradingJob(str(tmp_path), "ps1_intuition", s) for s in ("ann", "bob", "cy")]
    done = grade.grade_all(tmp_path, jobs, 30, 600.0, 2, progress=False, limits=limits)
    assert [st.student for st in done] == ["ann", "bob", "cy"]
    assert started and set(started) == {(3, 2**31)}, started
