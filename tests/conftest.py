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

# "ci" is the default: enough examples to find real bugs, bounded so `make test` stays quick on 2 cores.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
