"""What the library holds back for one gate or one practice: its answer, reveal, hints and known mistakes.

A lesson cell names a gate by its id and question and passes the live objects it made (an allocator,
a figure, a count); the key computes the answer and the reveal from them, running the checks behind
them first, so nothing that answers a prediction is written in the notebook. The prose of a reveal is
a template here (``str.format`` fields filled from live state), so a test can look for its words in
the notebooks' sources.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

Live = Mapping[str, Any]
"""The live objects a lesson cell passes in, by name (``bm=bm, cow=cow, figure=ax.figure``)."""


@dataclass(frozen=True)
class GateKey:
    """The hidden side of one prediction gate.

    ``choices`` (shown as the options, in order) or ``units`` (a number box) says how the learner
    answers; ``answer(live)`` computes the outcome after checking it; ``reveal(live)`` returns what
    is shown after the commit (text, figures, displayable objects, in order); ``texts`` are the
    reveal's prose templates; ``mistakes`` maps a wrong choice to the misconception it stands for.
    ``outcome(live)``, where a key has one, returns ``(answer, reveal)`` from one computation that
    both need (a simulation, a bisection): :func:`one_pass` builds such a key.
    """
    id: str
    lesson: str
    answer: Callable[[Live], Any]
    reveal: Callable[[Live], list]
    choices: tuple | None = None
    units: str | None = None
    tolerance: float = 0.1
    texts: tuple = ()
    mistakes: Mapping = field(default_factory=dict)
    outcome: Callable[[Live], tuple] | None = None

    def __post_init__(self):
        if (self.choices is None) == (self.units is None):
            raise ValueError(f"gate key {self.id!r} needs exactly one of choices or units")

    def answer_and_reveal(self, live: Live) -> tuple[Any, list]:
        """The answer and the reveal for ``live``, computing what they share once where the key can."""
        if self.outcome is not None:
            return self.outcome(live)
        return self.answer(live), self.reveal(live)


def one_pass(key_id: str, lesson: str, outcome: Callable[[Live], tuple], **kw) -> GateKey:
    """A :class:`GateKey` whose answer and reveal come from one call of ``outcome(live) -> (answer, reveal)``
    (``answer`` and ``reveal`` alone still work, each running ``outcome``)."""
    return GateKey(key_id, lesson, lambda live: outcome(live)[0], lambda live: outcome(live)[1], outcome=outcome, **kw)


@dataclass(frozen=True)
class PracticeKey:
    """The hidden side of one practice: its answer from live state, hints in order, and known mistakes.

    ``mistakes(live)`` returns ``{wrong value: explanation}``; ``mistake_texts`` are those
    explanations as written (for the scan of the notebooks); ``canvas`` and ``bridges`` configure
    the answer canvas (:mod:`..canvas`).
    """
    id: str
    lesson: str
    answer: Callable[[Live], Any]
    hints: tuple
    mistakes: Callable[[Live], dict]
    mistake_texts: tuple
    units: str = ""
    canvas: bool = False
    bridges: tuple = ()

    def __post_init__(self):
        if len(self.hints) > 3:
            raise ValueError(f"practice key {self.id!r} has {len(self.hints)} hints; at most 3")


def need(live: Live, key_id: str, *names: str) -> tuple:
    """The live objects ``names`` in order; a ``TypeError`` naming the missing ones and the gate."""
    missing = [n for n in names if n not in live]
    if missing:
        raise TypeError(f"{key_id!r} needs the live objects {missing} from its cell (got {sorted(live)})")
    return tuple(live[n] for n in names)
