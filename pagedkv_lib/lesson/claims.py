"""Every number in a lesson's prose is live, cited, or a checked fact of the lesson's example.

A lesson's markdown may state a number only in one of three ways:

1. **Live.** The number comes from a value the notebook computes now, and the prose around it is
   rendered from that value by a code cell: ``say("On this machine, now: {ms:.1f} ms", ms=t)``
   (or ``say(...)`` with several values). Machine-dependent measurements (times, bandwidths,
   anything that changes from run to run) are always live, and their sentence begins with
   "on this machine, now:". Nothing live is registered: it is an output, not markdown.
2. **Cited.** A published figure, registered below in ``CITED`` as a `Cited`: its values, unit,
   source (authors, year, section or figure), the conditions it was measured under, the lessons that
   quote it, and the words by which a paragraph names the source. A number in markdown matches it
   only when its paragraph names the source (``"paper"``, ``"Kwon"``, ...).
3. **A fact of the lesson's example.** A value the lesson sets up or that follows from its setup
   without measuring anything (the A1-A3 prompt has 12 tokens; r3 gets 4 tokens from the prefix
   cache). Register it in `pagedkv_lib.lesson.claim_facts` as a `Fact`: the lesson, the exact
   phrase the prose uses (``"a 12-token prompt"``), the cell id of the code cell that shows it
   live, and either a ``check`` function that computes the same values from the library (a value
   that follows from the example) or ``code``, the piece of that cell's source that sets it (a value
   the lesson chooses, such as ``play_paged(PAGE_BATCH, 4``). The phrase ties the registration to
   one wording: reword the prose and the test asks you to register it again.

Everything else that looks like a number is exempt by one of the narrow rules of `numbers_in`
(section and equation numbers, list markers, names such as ``Llama-3-8B``, a citation's year, the
constants inside a formula with variables). ``tests/test_lesson_claims.py`` scans the markdown of
every ``notebooks/0*.ipynb`` and the prose the library renders in it (`library_prose.rendered_prose`:
reveals, hints, the lens, the learning map, research-room items, live fields left out; tables' captions
and headers, figure text and control labels written in the library's modules: `library_prose.module_prose`),
and fails on a
number that is none of these (`unaccounted`), on a registered fact whose ``check`` or ``code``
disagrees with its phrase, or whose phrase or cell is gone (`disagreements`). It never executes a
notebook: a fact's ``check`` is a plain function.

How to add a number to a lesson, in short: measured here → render it with `say` in a code cell;
from a paper or a model card → add a `Cited` to ``CITED`` and name the source in the paragraph;
a property of the worked example → add a `Fact` to ``claim_facts.FACTS``. Then run
``python -m pytest tests/test_lesson_claims.py``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from IPython.display import Markdown

from ..sim import PAPER_SHARING_SAVING, PAPER_TOKEN_STATE_SHARE
from ..sim.paper_comparison import PAPER_SHARING_SHAREGPT
from .prose_numbers import NUMBER, Number, numbers_in, plain_prose

__all__ = ["Cited", "Fact", "Number", "CITED", "cited", "say", "numbers_in",
           "unaccounted", "disagreements"]


@dataclass(frozen=True)
class Cited:
    """A published figure a lesson may quote, named as the source's.

    ``values`` are the numbers as the prose writes them (both ends of a range), each followed in
    the prose by ``suffix`` (after the range's other end, if any: ``20-26%``); ``names`` are the
    words by which a paragraph quoting it names the source (case-sensitive)."""
    key: str
    values: tuple[float, ...]
    unit: str
    source: str
    conditions: str
    lessons: tuple[str, ...]
    suffix: str = "%"
    names: tuple[str, ...] = ("paper", "Kwon")


@dataclass(frozen=True)
class Fact:
    """A value of a lesson's worked example, stated in prose as ``phrase``.

    ``cell`` is the id of the code cell that shows the numbers live in the notebook. A value that
    follows from the example has a ``check()`` that computes the numbers of ``phrase``, in order,
    from the library. A value the lesson chooses (a block size, a pool's size) has ``code``
    instead: a piece of the cell's source that sets it, holding the phrase's numbers in order."""
    lesson: str
    phrase: str
    cell: str
    check: Callable[[], tuple[float, ...]] | None = field(default=None, compare=False)
    code: str = ""


_PAPER = "Kwon et al., SOSP 2023"


def _pct(fraction: float) -> float:
    return round(100.0 * fraction, 1)


_FIG2_RUNS = ("averaged over the serving runs of the paper's §6.2 (OPT models, ShareGPT and "
              "Alpaca traces)")

CITED: tuple[Cited, ...] = (
    # The paper's figures the simulator is compared with live: the values are the simulator's own
    # constants (`pagedkv_lib.sim`), registered here with their source and conditions.
    Cited("fig2-orca-max", (_pct(PAPER_TOKEN_STATE_SHARE["max"]),),
          "% of KV memory holding token states", f"{_PAPER}, Fig. 2",
          f"Orca (Max) baseline, which reserves 2,048 slots per request; {_FIG2_RUNS}",
          ("01_intuition", "04_demo")),
    Cited("fig2-orca-pow2", (_pct(PAPER_TOKEN_STATE_SHARE["pow2"]),),
          "% of KV memory holding token states", f"{_PAPER}, Fig. 2",
          "Orca (Pow2) baseline: reserves up to 2x the final length (the next power of two); "
          "same runs", ("04_demo",)),
    Cited("fig2-orca-oracle", (_pct(PAPER_TOKEN_STATE_SHARE["oracle"]),),
          "% of KV memory holding token states", f"{_PAPER}, Fig. 2",
          "Orca (Oracle) baseline: reserves exactly the final length; same runs",
          ("01_intuition", "04_demo")),
    Cited("fig2-vllm", (_pct(PAPER_TOKEN_STATE_SHARE["paged"]),),
          "% of KV memory holding token states", f"{_PAPER}, Fig. 2",
          "vLLM, blocks of 16 tokens; same runs", ("04_demo",)),
    Cited("sharing-parallel-alpaca", tuple(map(_pct, PAPER_SHARING_SAVING["parallel sampling"])),
          "% fewer KV blocks", f"{_PAPER}, §6.3, Fig. 15",
          "parallel sampling (2, 4 and 6 samples), Alpaca trace, OPT-13B, block size 16",
          ("04_demo",)),
    Cited("sharing-beam-alpaca", tuple(map(_pct, PAPER_SHARING_SAVING["beam search"])),
          "% fewer KV blocks", f"{_PAPER}, §6.3, Fig. 15",
          "beam search (widths 2, 4 and 6), Alpaca trace, OPT-13B, block size 16", ("04_demo",)),
    Cited("sharing-parallel-sharegpt", tuple(map(_pct, PAPER_SHARING_SHAREGPT["parallel sampling"])),
          "% fewer KV blocks", f"{_PAPER}, §6.3",
          "parallel sampling (2, 4 and 6 samples), ShareGPT trace, OPT-13B, block size 16",
          ("04_demo",)),
    Cited("sharing-beam-sharegpt", tuple(map(_pct, PAPER_SHARING_SHAREGPT["beam search"])),
          "% fewer KV blocks", f"{_PAPER}, §6.3",
          "beam search (widths 2, 4 and 6), ShareGPT trace, OPT-13B, block size 16",
          ("04_demo",)),
    Cited("fig2-prior-range", (20, 38), "% of KV memory holding token states",
          f"{_PAPER}, Fig. 2", "the three Orca baselines (20.4%, 26.8%, 38.2%)",
          ("01_intuition",)),
    Cited("kernel-slowdown", (20, 26), "% slower", f"{_PAPER}, §7.1, Fig. 18a",
          "paged attention kernel vs FasterTransformer's contiguous kernel, attention "
          "operation alone, on a GPU (A100), across batch sizes and context lengths",
          ("01_intuition", "03_code")),
    Cited("opt13b-token-kb", (800,), "KB of KV cache per token", f"{_PAPER}, §3",
          "OPT-13B, fp16: 2 (K and V) x 5,120 hidden x 40 layers x 2 bytes = 819,200 B, "
          "which the paper rounds to 800 KB", ("02_math",), suffix=" KB"),
    Cited("opt13b-request-gb", (1.6,), "GB of KV cache for one request", f"{_PAPER}, §3",
          "OPT-13B, fp16, one request at the model's 2,048-token maximum: 2,048 x 800 KB",
          ("02_math",), suffix=" GB"),
    Cited("opt13b-max-tokens", (2048,), "tokens in one request", f"{_PAPER}, §3",
          "OPT-13B's maximum sequence length, the request the paper sizes at 1.6 GB", ("02_math",),
          suffix="-token"),
    Cited("vllm-gpu-utilization", (0.9,), "fraction of GPU memory vLLM may use",
          "vLLM documentation, engine arguments (`--gpu-memory-utilization`), 2025",
          "the default; the KV cache gets what is left after weights and activations",
          ("02_math",), suffix=" by default", names=("vLLM",)),
    Cited("block-size", (16,), "tokens per block", f"{_PAPER}, §7.2",
          "vLLM's default block size, chosen from a sweep of 1 to 256", ("02_math", "04_demo"),
          suffix=" tokens"),
    Cited("hicache-hit-rate", (40, 80), "% prefix-cache hit rate",
          "Z. Xie, *SGLang HiCache: Fast Hierarchical KV Caching with Your Favorite Storage Backends*, "
          "lmsys.org blog, 2025-09-10",
          "a deployment the blog quotes (Novita AI: a coding agent on Qwen3-Coder-480B, sessions past 25K "
          "tokens, HiCache with DeepSeek 3FS as distributed storage), before and after HiCache",
          ("04_demo",), names=("HiCache",)),
)


def cited(key: str) -> Cited:
    """The registered `Cited` figure named ``key``; a KeyError lists the keys there are."""
    for c in CITED:
        if c.key == key:
            return c
    raise KeyError(f"no cited figure {key!r}; registered: {', '.join(c.key for c in CITED)}")


def say(template: str, **values) -> Markdown:
    """Prose rendered from live values: ``say("{n} blocks", n=stats.used_blocks)``.

    The template is Markdown with ``str.format`` fields; every field must be given (a missing one
    raises KeyError naming it), so no number in the sentence is typed by hand."""
    return Markdown(template.format(**values))


# --- checking a notebook --------------------------------------------------------------------------

def _paragraphs(source: str) -> list[str]:
    return re.split(r"\n\s*\n", source)


def unaccounted(lesson: str, cells: list[tuple[str, str]], facts) -> list[Number]:
    """The numbers of a lesson's markdown cells that are neither cited nor registered facts.

    ``cells`` are ``(cell id, markdown source)`` pairs; ``facts`` the registered `Fact` list
    (``claim_facts.FACTS``)."""
    phrases = [f.phrase for f in facts if f.lesson == lesson]
    quotable = [c for c in CITED if lesson in c.lessons]
    bad = []
    for cell_id, source in cells:
        for para in _paragraphs(source):
            flat = plain_prose(para)
            covered = []
            for phrase in phrases:
                covered += [(m.start(), m.start() + len(phrase))
                            for m in re.finditer(re.escape(phrase), flat)]
            names = [c for c in quotable if any(n in flat for n in c.names)]
            for n in numbers_in(para, cell_id):
                if any(a <= n.start < b for a, b in covered):
                    continue
                after = flat[n.start + len(n.text):]
                if any(n.value in c.values and _followed_by(after, c.suffix) for c in names):
                    continue
                bad.append(n)
    return bad


def _followed_by(after: str, suffix: str) -> bool:
    """Whether the text after a number is ``suffix``, or a range's other end and then it."""
    return re.match(r"(?:\s*[-–]\s*\d+(?:\.\d+)?)?" + re.escape(suffix), after) is not None


def disagreements(lesson: str, cells: list[tuple[str, str]], code_cells: dict[str, str],
                  facts) -> list[str]:
    """What is wrong with a lesson's registered facts (``claim_facts.FACTS``): a ``check`` that
    computes other numbers than its phrase states, a ``code`` its cell no longer holds or whose
    numbers are not the phrase's, a phrase no markdown cell holds, or a named cell that is gone.

    ``cells`` are the markdown cells' ``(id, source)``; ``code_cells`` maps code cell ids to
    their sources."""
    text = " ".join(plain_prose(s) for _, s in cells)
    problems = []
    for f in (f for f in facts if f.lesson == lesson):
        stated = tuple(n.value for n in numbers_in(f.phrase))
        where = f"{lesson}: {f.phrase!r}"
        if f.phrase not in text:
            problems.append(f"{where}: no markdown cell says this any more")
        if f.cell not in code_cells:
            problems.append(f"{where} names cell {f.cell!r}, not a code cell of the lesson")
        if (f.check is None) == (not f.code):
            problems.append(f"{where}: give either check or code")
        if f.code:
            source = code_cells.get(f.cell, "")
            in_code = tuple(float(m.group().replace(",", "")) for m in NUMBER.finditer(f.code))
            if f.code not in source:
                problems.append(f"{where}: cell {f.cell} no longer holds {f.code!r}")
            if in_code != stated:
                problems.append(f"{where} states {stated}, the code {f.code!r} sets {in_code}")
        if f.check is not None:
            try:
                computed = tuple(float(v) for v in f.check())
            except Exception as e:  # noqa: BLE001 - a broken check is a disagreement to report
                problems.append(f"{where}: its check raised {type(e).__name__}: {e}")
                continue
            if stated != computed:
                problems.append(f"{where} states {stated}, its check computes {computed} "
                                f"(cell {f.cell})")
    return problems

