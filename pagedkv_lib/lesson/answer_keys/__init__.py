"""The answer keys of the lessons: each gate's answer and reveal, each practice's answer, hints and known
mistakes, computed from the live state a lesson cell passes in. One module per lesson; the notebooks
name a gate or practice by id and question only (:func:`..gates.ask`, :func:`..practice.exercise`).
"""
from __future__ import annotations

from ..inputs import lookup
from . import code_keys, demo_keys, engines_keys, intuition_keys, math_keys
from .key_types import GateKey, Live, PracticeKey, need  # noqa: F401 (the key types, for readers)

_MODULES = (intuition_keys, math_keys, code_keys, demo_keys, engines_keys)
GATE_KEYS: dict[str, GateKey] = {k: v for m in _MODULES for k, v in m.GATES.items()}
PRACTICE_KEYS: dict[str, PracticeKey] = {k: v for m in _MODULES for k, v in m.PRACTICES.items()}


def gate_key(qid: str) -> GateKey:
    """The key of gate ``qid``; a ``KeyError`` naming the known gate ids if there is none."""
    return lookup(GATE_KEYS, "answer key for a gate", qid)


def practice_key(pid: str) -> PracticeKey:
    """The key of practice ``pid``; a ``KeyError`` naming the known practice ids if there is none."""
    return lookup(PRACTICE_KEYS, "answer key for a practice", pid)
