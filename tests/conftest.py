"""Shared test settings: hypothesis profiles and the repository root."""
import os
from pathlib import Path

import torch
from hypothesis import HealthCheck, settings

# Without a GPU, Triton kernels run in its CPU interpreter. The variable must be set before triton is
# first imported anywhere in the process (its language helpers are bound at that import).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))


def execute_lesson(nb, path: Path) -> list:
    """Run notebook ``nb`` (read from ``path``) in a fresh kernel, in place; return its error outputs.

    Under ``make test-colab`` (jupyter_client 7.4.9) a cell's execute reply has been seen to sit unread in
    this process's shell socket (1 of 78 lesson runs, 2026-12-04): the kernel had run the cell and answered
    a new connection at once. pyzmq's last poll when the cell's ``timeout`` ends finds the reply, so that
    test passes about 600 s late: a slow ``make test-colab`` is this, not a slow lesson.
    """
    from nbclient import NotebookClient  # imported here: most test files never run a notebook
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]

# "ci" is the default: enough examples to find real bugs, bounded so `make test` stays quick on 2 cores.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
