"""Shared test settings: hypothesis profiles and the repository root."""
import os
from pathlib import Path

from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# "ci" is the default: enough examples to find real bugs, bounded so `make test` stays quick on 2 cores.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
