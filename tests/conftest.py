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
    """Run notebook ``nb`` (read from ``path``) in a fresh kernel, in place; return its error outputs
    (:func:`notebook_runs.notebook_client`: a reply pyzmq did not wake for costs a second, not 600)."""
    from notebook_runs import notebook_client
    notebook_client(nb, path).execute()
    return [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]

# "ci" is the default: enough examples to find real bugs, bounded so `make test` stays quick on 2 cores.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
