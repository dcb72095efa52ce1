"""No number in a lesson's prose that is neither live, nor a cited source's figure, nor a checked
fact of the lesson's example (the mechanism: `pagedkv_lib.lesson.claims`).

The scan reads each lesson's markdown and the prose the library renders in it (reveals, misconceptions,
hints, the opening lens, the learning map, research-room items: `library_prose.rendered_prose`; tables'
captions and headers, figure text and control labels written in the library's modules:
`library_prose.module_prose`), and never executes a notebook; each registered fact is checked by its plain library function."""
from pathlib import Path

import nbformat
import pytest

from pagedkv_lib.lesson import claims
from pagedkv_lib.lesson.claim_facts import FACTS
from pagedkv_lib.lesson.claims import Cited, Fact, numbers_in, unaccounted, disagreements
from pagedkv_lib.lesson.library_prose import DISPLAY_MODULES, module_prose, rendered_prose

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0*.ipynb"))

NOT_YET_SCANNED: set[tuple[str, str]] = set()
"""(lesson, where) of library prose the scan skips, each with the reason in a comment; none now."""


def _cells(path: Path):
    nb = nbformat.read(path, as_version=4)
    md = [(c.get("id"), c.source) for c in nb.cells if c.cell_type == "markdown"]
    code = {c.get("id"): c.source for c in nb.cells if c.cell_type == "code"}
    return md, code


def _texts(numbers):
    return [n.text for n in numbers]


# --- the rules of what counts as a number --------------------------------------------------------

def test_a_bare_quantity_is_found():
    assert _texts(numbers_in("the kernel took 0.51x the time; 32 x 4,096 tokens")) == \
        ["0.51", "32", "4,096"]


def test_names_references_years_dates_and_markers_are_exempt():
    text = ("## 2 · Title\n\n1. Llama-3-8B and OPT-13B, A1-A3, fp16, `03_code`, ps1,\n"
            "Eq. 1, Fig. 2, §6.3, sections 4.1-4.4, lesson 02, Step 3, Kwon et al. 2023, "
            "SOSP 2023, Llama-2-7B/13B, 2026-12-01, `lab.set(block_size=8)`.")
    assert numbers_in(text) == []


def test_formula_constants_are_exempt_but_values_and_numeric_formulas_are_not():
    assert numbers_in(r"$C = 2 L H_{kv} d b$, $W \in [0, S-1]$, $\frac{S-1}{2}$") == []
    assert _texts(numbers_in(r"here $S = 4$")) == ["4"]
    assert _texts(numbers_in(r"$\lceil 10/4 \rceil = 3$")) == ["10", "4", "3"]


def test_a_zero_after_exactly_above_or_below_is_a_bound_and_other_numbers_there_are_not():
    assert _texts(numbers_in("exactly 0: the same floats; above 0 but below 1e-5")) == ["1e-5"]
    assert _texts(numbers_in("above 0.5 and exactly 3 blocks, 0 copies")) == ["0.5", "3", "0"]


def test_scientific_and_thousands_are_one_number():
    found = numbers_in("to `1e-5`, and 8.03e9 parameters, 1,000 tokens")
    assert [n.value for n in found] == [1e-5, 8.03e9, 1000]


def test_a_cited_figure_counts_only_with_its_unit():
    assert _texts(unaccounted("04_demo", [("c", "The paper's trace has 96.3 requests.")],
                              facts=())) == ["96.3"]
    assert unaccounted("03_code", [("c", "the paper: 20-26% slower")], facts=()) == []


def test_a_cited_figure_counts_only_where_its_paragraph_names_the_source():
    fig2 = claims.cited("fig2-vllm")
    assert 96.3 in fig2.values and "04_demo" in fig2.lessons
    named = [("c", "The paper's Fig. 2 gives 96.3% for vLLM.")]
    unnamed = [("c", "vLLM keeps 96.3% of its memory busy.")]
    assert unaccounted("04_demo", named, facts=()) == []
    assert _texts(unaccounted("04_demo", unnamed, facts=())) == ["96.3"]
    # a figure registered for another lesson only does not count here
    assert _texts(unaccounted("02_math", named, facts=())) == ["96.3"]


def test_a_fact_counts_only_inside_its_own_phrase():
    fact = Fact("01_intuition", "a 12-token prompt", "cell-02", lambda: (12,))
    cells = [("c", "A1 has a 12-token prompt. Then 12 more.")]
    bad = unaccounted("01_intuition", cells, facts=(fact,))
    assert _texts(bad) == ["12"] and "more" in bad[0].context


def test_a_fact_whose_check_disagrees_is_reported():
    wrong = Fact("01_intuition", "a 12-token prompt", "cell-02", lambda: (13,))
    problems = disagreements("01_intuition", [("c", "a 12-token prompt")], {"cell-02": "x"},
                             facts=(wrong,))
    assert len(problems) == 1 and "(13.0,)" in problems[0]


def test_a_fact_without_its_phrase_or_cell_is_reported():
    fact = Fact("01_intuition", "a 12-token prompt", "cell-99", lambda: (12,))
    problems = disagreements("01_intuition", [("c", "no such words")], {"cell-02": "x"},
                             facts=(fact,))
    assert len(problems) == 2


def test_a_chosen_value_is_checked_against_the_code_that_sets_it():
    fact = Fact("01_intuition", "here $S = 4$", "cell-04", code="play_paged(PAGE_BATCH, 4")
    md = [("c", "here $S = 4$")]
    assert disagreements("01_intuition", md, {"cell-04": "play_paged(PAGE_BATCH, 4)"},
                         facts=(fact,)) == []
    changed = disagreements("01_intuition", md, {"cell-04": "play_paged(PAGE_BATCH, 8)"},
                            facts=(fact,))
    assert len(changed) == 1 and "no longer holds" in changed[0]
    wrong = Fact("01_intuition", "here $S = 4$", "cell-04", code="play_paged(PAGE_BATCH, 8")
    assert "sets (8.0,)" in disagreements("01_intuition", md,
                                          {"cell-04": "play_paged(PAGE_BATCH, 8)"},
                                          facts=(wrong,))[0]


def test_a_broken_check_is_reported_not_raised():
    fact = Fact("01_intuition", "a 12-token prompt", "cell-02", lambda: 1 / 0)
    problems = disagreements("01_intuition", [("c", "a 12-token prompt")], {"cell-02": "x"},
                             facts=(fact,))
    assert "ZeroDivisionError" in problems[0]


def test_formula_constants_outside_dollars_counts_and_percentiles_are_exempt():
    text = ("between 0 and S - 1 slots, n / 2^b, 2P FLOPs, positions 0, 1, 2, ..., the 99th percentile, "
            "(S - 1) / 2 on average, slack in [0, S - 1], section 1, steps 1-4")
    assert numbers_in(text) == []
    assert _texts(numbers_in("S = 8, 0 and 7 slots, 2^64, a 2 x 3 grid")) == ["8", "0", "7", "2", "64", "2", "3"]
    assert numbers_in("shared (ref count > 1), no slack at S = 1, PCIe 4.0 x16") == []
    assert _texts(numbers_in("ref count > 2, at S = 1.5, PCIe 4.0 x16 (31.5 GB/s)")) == ["2", "1.5", "31.5"]


def test_rendered_prose_holds_reveals_hints_lens_map_and_items_with_live_fields_blanked():
    prose = dict(rendered_prose("02_math"))
    assert "…" in prose["q-shared reveal"] and "{" not in prose["q-shared reveal"].replace("{tok}", "")
    assert {"learning map", "lens-02 reveal", "p-blocks hint", "item eq-ctok", "item eq-ctok title"} <= set(prose)
    assert not any(w.endswith("resolve") and t.startswith("I can predict") for w, t in rendered_prose("03_code"))
    assert prose["item eq-ctok"].startswith("$")


def test_say_renders_live_values_and_refuses_a_missing_one():
    assert claims.say("on this machine, now: {ms:.1f} ms", ms=3.14159).data == \
        "on this machine, now: 3.1 ms"
    with pytest.raises(KeyError):
        claims.say("{ms} ms")


def test_every_cited_figure_names_source_and_conditions():
    assert len({c.key for c in claims.CITED}) == len(claims.CITED)
    for c in claims.CITED:
        assert isinstance(c, Cited) and c.values and c.unit and c.conditions and c.lessons
        assert any(ch.isdigit() for ch in c.source), f"{c.key}: source needs its year/section"


# --- the lessons ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_number_in_a_lessons_prose_is_live_cited_or_a_registered_fact(path):
    md, _ = _cells(path)
    bad = unaccounted(path.stem, md, FACTS)
    assert not bad, (f"{len(bad)} numbers in {path.name}'s markdown are neither cited nor "
                     "registered facts (see pagedkv_lib/lesson/claims.py for how to add one):\n"
                     + "\n".join(f"  cell {n.cell}: {n.text!r} in ...{n.context}..." for n in bad))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_number_in_the_prose_the_library_renders_is_live_cited_or_a_registered_fact(path):
    said = [(where, text) for where, text in rendered_prose(path.stem) if (path.stem, where) not in NOT_YET_SCANNED]
    bad = unaccounted(path.stem, said, FACTS)
    assert not bad, (f"{len(bad)} numbers in the library's prose for {path.name} are neither live fields, cited "
                     "nor registered facts:\n" + "\n".join(f"  {n.cell}: {n.text!r} in ...{n.context}..." for n in bad))


def test_every_exemption_from_the_rendered_prose_scan_is_still_there():
    for lesson, where in NOT_YET_SCANNED:
        assert where in dict(rendered_prose(lesson)), f"{lesson} {where} is gone: drop it from NOT_YET_SCANNED"


def test_a_typed_number_in_a_reveal_is_caught():
    """The scan can fail: the q-shared reveal with its S = 8 count typed in instead of live."""
    typed = [(w, t.replace("from … (", "from 56 (")) for w, t in rendered_prose("02_math") if w == "q-shared reveal"]
    assert [n.text for n in unaccounted("02_math", typed, FACTS)] == ["56"]


def test_a_gates_choices_are_scanned_and_a_typed_number_in_them_is_caught(monkeypatch):
    """Issue 36's audit: a gate's choices are prose the learner reads before the commit. A q-slack choice naming
    a block size cell-23 does not test (256) is caught; q-paging's are read as speed_table's f-strings, their
    thresholds blanked as live fields (rendered from the constants, not registered)."""
    from dataclasses import replace
    from pagedkv_lib.lesson.answer_keys import GATE_KEYS
    key = GATE_KEYS["q-slack"]
    monkeypatch.setitem(GATE_KEYS, "q-slack", replace(key, choices=(*key.choices, "yes for 256 only")))
    said = [(w, t) for w, t in rendered_prose("02_math") if w == "q-slack choices"]
    assert [n.text for n in unaccounted("02_math", said, FACTS)] == ["256"]
    paging = dict(rendered_prose("03_code"))["q-paging choices"]
    assert "about the same (…x to …x)" in paging and "0.95" not in paging


NOT_YET_SCANNED_MODULES: dict[str, str] = {
    # issue 36: modules that render fixed text into a lesson and are not in DISPLAY_MODULES yet, with the reason
    "pagedkv_lib.lesson.access": "styles and scripts for screen readers (CSS lengths such as 1px), no prose",
    "pagedkv_lib.lesson.colab": "the Colab setup's messages name a wheel's file (pagedkv_lib-0.1.0-...): a "
                                "version in a file name, which numbers_in does not exempt yet",
    "pagedkv_lib.accounting": "its strings are HYBRID_SOURCES, the source record (model cards' config.json "
                              "fields, date read) lesson 02 names for its numbers; a record, not rendered prose",
    "pagedkv_lib.lesson.idealisation": "shown by the problem sets, not a lesson; the sets' prose is not scanned",
}


NOT_LESSON_TEXT: dict[str, str] = {
    # modules under pagedkv_lib/lesson whose strings reach a lesson another way, or never: with the reason
    "pagedkv_lib.lesson.items": "the lenses and research-room items: read by library_prose.rendered_prose",
    "pagedkv_lib.lesson.answer_keys": "what each lesson holds back: rendered_prose reads every gate's choices, "
                                      "reveals and misconceptions and every practice's hints and mistakes",
    "pagedkv_lib.lesson.claims": "the registry of cited figures (source, conditions) and say(), whose templates "
                                 "are a cell's own and show live values; none of its strings is shown as is",
    "pagedkv_lib.lesson.claim_facts": "the registry of facts: phrases the lessons' prose states, never shown",
    "pagedkv_lib.lesson.library_prose": "this scan's own code",
    "pagedkv_lib.lesson.prose_numbers": "this scan's own code",
}


def unlisted_lesson_modules(listed) -> list[str]:
    """The modules under pagedkv_lib/lesson that hold displayable text (``module_prose``) and that ``listed``
    (module names, a package standing for its modules) does not name."""
    import pkgutil
    import pagedkv_lib.lesson as lesson
    names = [m.name for m in pkgutil.walk_packages(lesson.__path__, "pagedkv_lib.lesson.")]
    return [n for n in names if module_prose(n) and not any(n == k or n.startswith(k + ".") for k in listed)]


def test_every_lesson_module_that_writes_text_is_scanned_or_has_a_reason():
    """Issue 36's audit: a new module that renders text into a lesson cannot bypass the module scan unnoticed."""
    listed = [DISPLAY_MODULES, NOT_YET_SCANNED_MODULES, NOT_LESSON_TEXT]
    assert all(set(a).isdisjoint(b) for i, a in enumerate(listed) for b in listed[i + 1:])
    assert unlisted_lesson_modules([k for d in listed for k in d]) == []
    dropped = [k for d in listed for k in d if k != "pagedkv_lib.lesson.viz"]
    assert unlisted_lesson_modules(dropped) == ["pagedkv_lib.lesson.viz"]   # the check can fail


@pytest.mark.parametrize("module", sorted(DISPLAY_MODULES))
def test_every_number_in_a_modules_captions_headers_and_figure_text_is_live_cited_or_a_registered_fact(module):
    said = module_prose(module)
    assert said, f"{module}: no displayed text found"
    for lesson in DISPLAY_MODULES[module]:
        bad = unaccounted(lesson, said, FACTS)
        assert not bad, (f"{len(bad)} numbers in {module}'s displayed text ({lesson}) are neither live fields, "
                         "cited nor registered facts:\n"
                         + "\n".join(f"  {n.cell}: {n.text!r} in ...{n.context}..." for n in bad))


def test_module_prose_blanks_fields_and_leaves_out_docstrings_errors_and_markup():
    said = dict(module_prose("pagedkv_lib.lesson.paper_view"))
    assert any("OPT-13B on a … GiB GPU" in t for t in said.values())
    assert not any(t.startswith("One sentence: which figures") for t in said.values())   # a docstring
    assert not any("<" in t or "style=" in t for _, t in module_prose("pagedkv_lib.figure_text"))
    assert set(NOT_YET_SCANNED_MODULES).isdisjoint(DISPLAY_MODULES)


def test_a_typed_number_in_a_caption_template_is_caught():
    """The module scan can fail: the served trace's table caption with its block size typed in, not live."""
    typed = [(w, t.replace("blocks of … tokens; a swap", "blocks of 16 tokens; a swap"))
             for w, t in module_prose("pagedkv_lib.lesson.served_preemption")]
    assert [n.text for n in unaccounted("04_demo", typed, FACTS)] == ["16"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_registered_fact_agrees_with_its_check_and_its_cell(path):
    md, code = _cells(path)
    assert not disagreements(path.stem, md + rendered_prose(path.stem), code, FACTS)


def test_every_fact_names_a_lesson_that_exists():
    assert {f.lesson for f in FACTS} <= {p.stem for p in NOTEBOOKS}
    for c in claims.CITED:
        assert set(c.lessons) <= {p.stem for p in NOTEBOOKS}, c.key


def test_a_number_injected_into_a_lesson_is_caught():
    md, _ = _cells(NOTEBOOKS[0])
    cell_id, source = md[-1]
    injected = md[:-1] + [(cell_id, source + "\n\nThe paged kernel took 0.42x the time.")]
    bad = unaccounted(NOTEBOOKS[0].stem, injected, FACTS)
    assert [n.text for n in bad][-1:] == ["0.42"]
