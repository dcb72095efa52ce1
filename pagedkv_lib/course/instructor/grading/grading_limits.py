"""The limits on grading one notebook, as settings an instructor may change in ``nbgrader_config.py``
(``c.KernelLimits.memory_bytes = 8 * 2**30``); each setting's help text is its documentation.

Read by nbgrader's hooks (through nbgrader's own config) and by the class's autograde
(``course_layout.course_config``).
"""
from __future__ import annotations

from traitlets import Float, Integer
from traitlets.config import Configurable


class KernelLimits(Configurable):
    """What one learner's kernel may use inside the sandbox (``kernel_sandbox.py``)."""

    address_space_bytes = Integer(4 * 2**30, help="Most virtual memory one kernel process may map, in bytes "
                                  "(prlimit --as).").tag(config=True)
    cpu_seconds = Integer(600, help="Most CPU time one kernel process may use, in seconds (prlimit --cpu).").tag(config=True)
    processes = Integer(256, help="Most processes the kernel's own uid may run at once (prlimit --nproc).").tag(config=True)
    file_bytes = Integer(64 * 2**20, help="Largest file the kernel may write, in bytes (prlimit --fsize).").tag(config=True)
    memory_bytes = Integer(4 * 2**30, help="Most memory all the kernel's processes may use together, in bytes "
                           "(a memory cgroup, where the grader may make one).").tag(config=True)
    disk_bytes = Integer(256 * 2**20, help="Most bytes the kernel may write in its home and /tmp together: both "
                         "are one size-limited tmpfs, whose pages count against the kernel's memory "
                         "cgroup; a write past it fails with ENOSPC inside the sandbox.").tag(config=True)


class NotebookLimits(Configurable):
    """What running one notebook may cost (nbgrader's hooks, ``nbgrader_hooks.py``)."""

    max_restarts = Integer(3, help="Fresh kernels one notebook may get after a crash or an unstoppable cell; "
                           "past that the rest of the notebook is not run.").tag(config=True)
    max_output_depth = Integer(100, help="Most levels of nested lists and dicts one output message may hold; "
                               "nbformat converts a message recursively, so a deeper one is replaced by a line "
                               "saying so (a record of results needs under 60).").tag(config=True)
    budget_seconds = Float(600.0, help="Most wall-clock seconds of a grading worker one notebook may use, "
                           "restarts and replays included; past it the worker is stopped, the notebook's "
                           "grades are 0 and its status says 'time budget'.").tag(config=True)
    alone_seconds = Float(300.0, help="Most wall-clock seconds the kernel a set runs alone may take (ps3's bonus: "
                          "its @triton.jit functions in a fresh sandbox, kernel_alone.py); past it that test "
                          "scores 0 with the reason.").tag(config=True)


class WorkerLimits(Configurable):
    """The grader's own worker processes (``grading_worker.py``, ``worker_pool.py``)."""

    jobs_per_worker = Integer(50, help="Notebooks one worker process grades before a fresh one replaces it "
                              "(bounds what nbgrader keeps between jobs).").tag(config=True)
    memory_bytes = Integer(3 * 2**30, help="Most virtual memory one grading worker process may map, in bytes "
                           "(a soft RLIMIT_AS; a worker holding nbgrader and torch maps about 0.75 GiB). Past "
                           "it the notebook fails as a grader error and the worker is replaced; 0: no bound. "
                           "The kernels it starts have their own limits (KernelLimits).").tag(config=True)
    grader_retries = Integer(2, help="Extra tries for a notebook whose run failed with no sign of the learner's "
                             "own doing (a kernel that died before replying: parallel kernels can race for "
                             "ports).").tag(config=True)
