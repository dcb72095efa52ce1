"""The words that would give a gate's answer away, for the scan that keeps them out of the lessons.

A key's choices, reveal and hints are looked for in every lesson cell as they are written
(``tests/test_lesson_sources_hide_answers.py``). A rule can also be stated in other words: "never serves the
last prompt token" answers ``q-hit`` without naming its choice "4". Each entry here maps a gate, practice or
opening lens id to regular expressions for the ways its rule is written; the scan looks for them in every
cell of that id's lesson, markdown and code, and in the lesson's research-room items (shown whatever the learner
has committed), in text folded as the scan folds it (lower case, ``*`` and backticks dropped, white space one
space). Markdown is on screen before any commit, so none may match there.
"""
from __future__ import annotations

_CACHED_PROMPT = (r"last prompt token", r"reuses \$?k ?- ?1\b", r"stops? before the last",
                  r"floor\(\(t ?- ?1\) ?/ ?s\)", r"last token is (?:recomputed|computed again)")

GIVEAWAYS: dict[str, tuple[str, ...]] = {
    # 03: how much of a fully cached prompt the prefix cache serves
    "q-hit": _CACHED_PROMPT,
    "p-hit": _CACHED_PROMPT,
    # 03: what the first write into a block shared after a fork returns
    "q-cow": (r"first write (?:into a shared|copies)", r"copies one partial block"),
    # 03: how far paged decode lands from dense attention ("to float rounding", "to 1e-5"); the online loop's own
    # "holds these values ... up to float rounding" (section 3) names no paged-vs-dense gap and does not match
    "q-attn": (r"(?:paged|dense)[^.;:]{0,80}\b(?:to|by|within|only) (?:float|floating[- ]point) rounding",
               r"(?:paged|dense)[^.;:]{0,80}\b(?:to|within|below|under) \$?1e-0?5",
               r"(?:paged|dense)[^.;:]{0,80}\bnot (?:the same )?bit for bit",
               r"only (?:float|floating[- ]point) rounding differs"),
    # 03: what paging costs in the measured table; for torch's rows (without numba), that its paged version costs
    "q-paging": (r"torch[^.;]{0,80}\bpays for (?:the )?cop(?:y|ies)",),
    # 02: for which block sizes measured slack stays near (S - 1) / 2
    "q-slack": (r"span many blocks", r"fits? inside one block"),
    # 04's opening lens: what paging mainly buys a server on the same GPU
    "lens-04": (r"bigger batch", r"(?:paged|a) batch is (?:larger|bigger)", r"more requests (?:running|at once)"),
}
