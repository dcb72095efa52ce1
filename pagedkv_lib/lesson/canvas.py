"""The answer canvas's three checks: simple, documented word rules, not a language model.

A learner writes an explanation in their own words; three checks say whether it is ready:

* **Claim**: a concrete answer is there: a number (``7``, ``0.5``, ``800 KiB``) or a named
  quantity (blocks, slots, tokens, bytes, slack, ...; :data:`QUANTITIES`).
* **Mechanism**: it says why: a causal word (:data:`CAUSAL`: because, so, since, ...) *and* a
  named mechanism (:data:`MECHANISMS`: block table, ref count, copy-on-write, tail slack, ...).
* **Bridge**: it links to something beside it: another section, lesson or equation, the lab,
  the paper, or a neighbouring idea (:data:`BRIDGES`: prefill, decode, GQA, latency, ...), or one
  of the practice's own neighbours.

Matching is whole words, case-insensitive. A rule can be fooled by a learner who lists the words;
the checks are there to prompt a complete answer, not to grade it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

QUANTITIES = ("block", "blocks", "slot", "slots", "token", "tokens", "byte", "bytes", "KiB", "MiB", "GiB",
              "slack", "ref count", "block size", "batch", "memory", "reserved", "reservation", "table",
              "blocks in use", "token states", "copies", "copy", "cache hit", "hit")
"""Named quantities the Claim check accepts (besides any number)."""

CAUSAL = ("because", "since", "so", "therefore", "thus", "hence", "which means", "means", "so that",
          "as a result", "due to", "causes", "leads to", "forces", "makes", "why", "otherwise")
"""Words that announce a reason."""

MECHANISMS = ("block table", "block tables", "ref count", "ref counts", "reference count", "copy-on-write",
              "copy on write", "tail slack", "slack", "last block", "partial block", "partly filled",
              "full block", "full blocks", "prefix cache", "prefix caching", "shared prefix", "shared prompt",
              "sharing",
              "fork", "forks", "forked", "slot mapping", "free queue", "reservation", "fragmentation",
              "ceil", "round up", "rounds up", "rounding up", "online softmax", "indirection", "kv head",
              "kv heads", "grouped-query", "evict", "eviction", "logits", "contiguous", "max context")
"""Named mechanisms of the course the Mechanism check looks for."""

BRIDGES = ("lesson", "section", "notebook", "intuition", "math", "code", "demo", "lab", "problem set",
           "equation", "eq", "earlier", "previous", "next", "paper", "pagedattention", "vllm", "prefill",
           "decode", "continuous batching", "gqa", "grouped-query", "mla", "latency", "throughput",
           "cost", "attention", "kernel", "simulator", "a1", "a2", "a3", "beam search",
           "parallel sampling", "system prompt")
"""Other sections, lessons and neighbouring ideas the Bridge check accepts."""

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,_]*(\.\d+)?(e[-+]?\d+)?(?![\w])", re.I)


def _found(text: str, words: Sequence[str]) -> list[str]:
    """The words of ``words`` that occur in ``text`` as whole words (case-insensitive), in list order."""
    low = text.lower()
    return [w for w in words if re.search(rf"(?<![\w-]){re.escape(w.lower())}(?![\w-])", low)]


@dataclass(frozen=True)
class Check:
    """One canvas check: its name, whether it passes, what it found, and what it looks for."""
    name: str
    ok: bool
    found: tuple
    looks_for: str

    def line(self) -> str:
        mark = "ready" if self.ok else "not yet"
        seen = f" (found: {', '.join(self.found)})" if self.ok else f": looks for {self.looks_for}"
        return f"{self.name} {mark}{seen}"


def claim(text: str) -> Check:
    """A concrete answer: a number or a named quantity."""
    found = tuple(dict.fromkeys([m.group(0) for m in _NUMBER.finditer(text)] + _found(text, QUANTITIES)))
    return Check("Claim", bool(found), found[:4], "a number or a named quantity (blocks, slots, tokens, bytes, "
                                                   "slack, ...)")


def mechanism(text: str) -> Check:
    """A reason: a causal word and a named mechanism, both."""
    causal, named = _found(text, CAUSAL), _found(text, MECHANISMS)
    found = tuple(causal[:2] + named[:2]) if causal and named else ()
    return Check("Mechanism", bool(found), found, "a causal word (because, so, since, ...) and a named "
                                                  "mechanism (block table, ref count, copy-on-write, "
                                                  "tail slack, ...)")


def bridge(text: str, extra: Sequence[str] = ()) -> Check:
    """A link: another section or lesson, or a neighbouring idea (``extra``: the practice's own)."""
    found = tuple(_found(text, tuple(extra) + BRIDGES))
    return Check("Bridge", bool(found), found[:3], "a link to another section, lesson or equation, or a "
                                                   "neighbouring idea (prefill, decode, GQA, latency, the "
                                                   "lab, ...)")


def checks(text: str, extra_bridges: Sequence[str] = ()) -> tuple[Check, Check, Check]:
    """The three checks of ``text``, in order Claim, Mechanism, Bridge."""
    if not isinstance(text, str):
        raise TypeError(f"an answer must be text, got {type(text).__name__}")
    return claim(text), mechanism(text), bridge(text, extra_bridges)


def as_record(result: Sequence[Check]) -> dict:
    """``{"claim": bool, "mechanism": bool, "bridge": bool}``, as the saved record holds them."""
    return {c.name.lower(): c.ok for c in result}
