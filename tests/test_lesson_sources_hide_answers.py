"""No lesson's file holds what its predictions and practices keep back until the learner commits.

What is kept back comes from the library's registry (:mod:`pagedkv_lib.lesson.answer_keys`, and each
lesson's opening lens in :mod:`pagedkv_lib.lesson.items`): every choice of a keyed gate (any of them
may be the answer), the words of every reveal, every misconception a gate names, and every hint and
recognised mistake of every practice. Each is looked for in every cell of every lesson, code and
markdown, collapsed or not, and in the outputs saved in the file, case and line breaks aside. Answers
that are numbers come from live state, so the test also checks the one way they could be written in
the notebook: no lesson calls ``predict`` or ``practice`` with an answer, hints or mistakes of its own.
"""
from __future__ import annotations

import re
import string
from pathlib import Path

import nbformat
import pytest

from conftest import LESSONS
from pagedkv_lib.lesson.answer_keys import GATE_KEYS, PRACTICE_KEYS
from pagedkv_lib.lesson.answer_keys.giveaways import GIVEAWAYS
from pagedkv_lib.lesson.items import lesson as lesson_items
from pagedkv_lib.lesson.library_prose import rendered_prose

SHORTEST = 12
"""Kept-back text shorter than this (characters, after folding) is not looked for: "0", "4" and "yes" are
everywhere in a lesson without giving anything away."""


def fold(text: str) -> str:
    """Lower case, markdown emphasis and code marks dropped, every run of white space one space."""
    return " ".join(re.sub(r"[*`]", "", text).lower().split())


def literal_pieces(template: str) -> list[str]:
    """The text of a reveal template between its ``{fields}``: what it says whatever the live values."""
    return [fold(literal) for literal, *_ in string.Formatter().parse(template)]


def kept_back(name: str) -> list[tuple[str, str]]:
    """``(what, folded text)`` for everything lesson ``name`` holds back until a commit."""
    out = []
    lens = lesson_items(name).lens
    out += [(f"{lens.id} answer", fold(lens.answer))]
    out += [(f"{lens.id} reveal", fold(s)) for s in re.split(r"(?<=[.:])\s+", lens.reveal)]
    out += [(f"{lens.id} misconception", fold(m)) for m in lens.mistakes.values()]
    for key in GATE_KEYS.values():
        if key.lesson != name:
            continue
        out += [(f"{key.id} choice", fold(str(c))) for c in key.choices or ()]
        out += [(f"{key.id} reveal", piece) for t in key.texts for piece in literal_pieces(t)]
        out += [(f"{key.id} misconception", fold(m)) for m in key.mistakes.values()]
    for key in PRACTICE_KEYS.values():
        if key.lesson == name:
            out += [(f"{key.id} hint", fold(h)) for h in key.hints]
            out += [(f"{key.id} mistake", fold(m)) for m in key.mistake_texts]
    return [(what, text) for what, text in out if len(text) >= SHORTEST]


def output_text(output) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    return "\n".join("".join(v) if isinstance(v, list) else str(v) for k, v in data.items()
                     if k.startswith("text/"))


def everything_in(path: Path) -> list[tuple[str, str]]:
    """``(where, folded text)`` of each cell's source and each saved output of the notebook."""
    out = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        out.append((f"cell {i} ({cell.cell_type}, id {cell.get('id')})", fold(cell.source)))
        out += [(f"cell {i} output {k}", fold(output_text(o))) for k, o in enumerate(cell.get("outputs", []))]
    return out


def test_every_gate_and_practice_of_a_lesson_has_a_key_and_every_key_is_used():
    sources = {p.stem: "\n".join(c.source for c in nbformat.read(p, as_version=4).cells) for p in LESSONS}
    for key in [*GATE_KEYS.values(), *PRACTICE_KEYS.values()]:
        assert key.lesson in sources, f"{key.id}: no lesson {key.lesson!r}"
        call = "W.ask(" if key.id in GATE_KEYS else "W.exercise("
        assert re.search(re.escape(call) + r"\s*" + re.escape(f'"{key.id}"'), sources[key.lesson]), (
            f"{key.id}'s key is not used by {key.lesson}")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_lesson_writes_an_answer_hint_or_mistake_of_its_own(path):
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        calls = re.findall(r"\b(?:W\.|gates\.)?(predict|practice)\s*\(", cell.source)
        assert not calls, (f"{path.stem} cell {i} builds a gate or practice by hand ({calls}): name it by id "
                           "with W.ask or W.exercise, and put its answer in pagedkv_lib.lesson.answer_keys")
        for word in ("answer=", "hints=", "mistakes="):
            assert word not in cell.source.replace(" ", ""), f"{path.stem} cell {i} passes {word}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_lesson_file_holds_what_a_commit_reveals(path):
    secrets = kept_back(path.stem)
    assert secrets, f"nothing is kept back in {path.stem}?"
    found = [f"{what} {text!r} in {where}" for where, body in everything_in(path)
             for what, text in secrets if text in body]
    assert not found, "\n".join(found)


def test_the_scan_finds_a_hint_pasted_into_a_collapsed_cell(tmp_path):
    """The test above can fail: a hint in a collapsed markdown cell, or a reveal in an output, is found."""
    path = LESSONS[0]
    nb = nbformat.read(path, as_version=4)
    hint = next(k for k in PRACTICE_KEYS.values() if k.lesson == path.stem).hints[0]
    hidden = nbformat.v4.new_markdown_cell(f"Stuck?\n\n{hint.upper()}")
    hidden.metadata["jupyter"] = {"source_hidden": True}
    nb.cells.append(hidden)
    copy = tmp_path / path.name
    nbformat.write(nb, copy)
    found = [w for w, body in everything_in(copy) for _, text in kept_back(path.stem) if text in body]
    assert found and "source_hidden" not in found[0]
    key = next(k for k in GATE_KEYS.values() if k.lesson == path.stem)
    out = nbformat.v4.new_code_cell("x")
    out.outputs = [nbformat.v4.new_output("display_data", {"text/markdown": key.texts[0].format_map(
        {f: 7 for _, f, *_ in string.Formatter().parse(key.texts[0]) if f})})]
    nb.cells = nb.cells[:-1] + [out]
    nbformat.write(nb, copy)
    assert any("output" in w for w, body in everything_in(copy) for _, text in kept_back(path.stem)
               if text in body)


# --- rules written in words ----------------------------------------------------------------------------------------

def giveaways_in(name: str, cells: list[tuple[str, str]]) -> list[str]:
    """``"<id> rule <pattern> in <where>"`` for each registered way of stating an answer of lesson ``name`` that
    one of ``cells`` (``(where, folded text)``) holds."""
    ids = {k.id for k in [*GATE_KEYS.values(), *PRACTICE_KEYS.values()] if k.lesson == name}
    ids.add(lesson_items(name).lens.id)
    return [f"{key} rule {pattern!r} in {where}: ...{body[max(0, m.start() - 60):m.end() + 60]}..."
            for key, patterns in GIVEAWAYS.items() if key in ids for pattern in patterns
            for where, body in cells for m in [re.search(pattern, body)] if m]


def test_every_giveaway_names_a_gate_practice_or_lens_and_compiles():
    known = {*GATE_KEYS, *PRACTICE_KEYS} | {lesson_items(p.stem).lens.id for p in LESSONS}
    assert set(GIVEAWAYS) <= known, set(GIVEAWAYS) - known
    for patterns in GIVEAWAYS.values():
        assert patterns and all(re.compile(p) for p in patterns)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_lesson_states_a_gates_rule_in_words(path):
    """A "What to remember" bullet, a claim review or a source note that states the rule a gate asks about is on
    screen before the commit, as a pasted answer would be (issue 36: lesson 03 said "a prompt of k cached full
    blocks reuses k - 1" above the q-hit gate)."""
    found = giveaways_in(path.stem, everything_in(path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_research_room_item_states_a_gates_rule_in_words(path):
    """The research room (each lesson's last cell) shows its items' content, evidence and self-checks whatever the
    learner has committed (issue 36's audit: 03's claim item said "paged decode equal to dense to 1e-5", its
    demo-hit item "floor((T - 1) / S) blocks at most", its concept item when the first write copies)."""
    said = [(where, fold(text)) for where, text in rendered_prose(path.stem) if where.startswith("item ")]
    assert said
    found = giveaways_in(path.stem, said)
    assert not found, "\n".join(found)


def test_the_rule_scan_finds_the_sentence_lesson_03_used_to_print():
    said = fold("* The prefix cache files **full** blocks only, each under a node for its whole prefix, and never "
                "serves\n  the last prompt token: a prompt of $k$ cached full blocks reuses $k - 1$.")
    found = giveaways_in("03_code", [("What to remember", said)])
    assert {f.split()[0] for f in found} == {"q-hit", "p-hit"}
    assert not giveaways_in("01_intuition", [("What to remember", said)])   # another lesson's rule is not looked for


def test_the_rule_scan_finds_lesson_03s_old_q_attn_and_q_paging_sentences_but_not_the_online_loops_rounding():
    """Issue 36's audit: 03's "What to remember" and claim review gave ``q-attn``'s answer ("float rounding",
    "to 1e-5") above the gate, and "torch ... pays for copies" leant on ``q-paging``'s for torch's rows. The
    online loop's "up to float rounding" (cell 39) is about another claim and must not trip the scan."""
    said = {"remember": "* Paged decode equals dense attention on the gathered K/V to float rounding; the online "
                        "softmax\n  keeps $m$, $l$ and $acc$",
            "claim review": "Section 3: paged\ndecode (reference, gather, online softmax, Triton and the fused kernel "
                            "where installed) equals dense\nattention to `1e-5` on out-of-order blocks",
            "torch": "torch, which cannot follow a table inside a matmul, pays\n  for copies and many small calls."}
    found = giveaways_in("03_code", [(where, fold(text)) for where, text in said.items()])
    assert {(f.split()[0], f.split(" in ")[1].split(":")[0]) for f in found} >= {
        ("q-attn", "remember"), ("q-attn", "claim review"), ("q-paging", "torch")}, found
    online = fold("Here are $m$, $l$ and the first three numbers of $acc$ after each block of request x, the first "
                  "query\nhead (which reads the first KV head), computed from their definitions above. With "
                  "`step_blocks=1` the loop\nholds these values after each step, up to float rounding:")
    assert not giveaways_in("03_code", [("cell 39", online)])
