"""Lesson 04's facts: the lab's traces and the simulator's defaults.

Part of :mod:`pagedkv_lib.lesson.claim_facts`, which joins the four lessons' facts."""
from __future__ import annotations

from pagedkv_lib.lesson.claims import Fact
from .worked_example import batch, prompt, tails


def _lab_tries(trace, *sizes):
    """The block sizes a "things to try" line names, once each has played in the lab."""
    from pagedkv_lib.lesson.lab import run_lab
    for S in sizes:
        run_lab(trace, S)
    return sizes


def _sharegpt_20():
    from pagedkv_lib.lesson.lab import run_lab
    return (len(run_lab("ShareGPT-like 20").request_ids),)


def _sim_default(parameter):
    import inspect
    from pagedkv_lib.sim import simulate
    return inspect.signature(simulate).parameters[parameter].default


def _sim_gpu_gib():
    return (_sim_default("gpu_memory_gib"),)


_04 = "04_demo"
FACTS_04 = (
    Fact(_04, "(a 12-token prompt, tails of 3, 5 and 2 tokens)", "cell-05",
         check=lambda: prompt() + tails()),
    # the trace's name: in the markdown ("**ShareGPT-like 20**") and the lab's labels (lab.TRACES, module_prose)
    Fact(_04, "ShareGPT-like 20", "cell-05", check=_sharegpt_20),
    Fact(_04, "A1-A3 at $S = 4$, then $S = 8$, then $S = 32$", "cell-05",
         check=lambda: _lab_tries("A1-A3 batch", 4, 8, 32)),
    Fact(_04, "Beam search at $S = 8$, then at $S = 64$", "cell-05",
         check=lambda: _lab_tries("beam search", 8, 64)),
    Fact(_04, "ShareGPT-like 20 at $S = 1$ and at $S = 64$", "cell-05",
         check=lambda: _sharegpt_20() + _lab_tries("ShareGPT-like 20", 1, 64)[1:]),
    Fact(_04, "(OPT-13B on a 40 GiB GPU)", "cell-08", check=_sim_gpu_gib),
    # the library's prose in this lesson (library_prose.rendered_prose): the lens, items
    Fact(_04, "blocks of 16 instead", "cell-08", check=lambda: (_sim_default("block_size"),)),
    Fact(_04, "trace of 300 requests", "cell-08", code='"ShareGPT-like, 300 requests"'),
    Fact(_04, "OPT-13B on 40 GiB", "cell-08", check=_sim_gpu_gib),
    Fact(_04, "The lab at S = 4, 8 and 32", "cell-05", check=lambda: _lab_tries("A1-A3 batch", 4, 8, 32)),
    Fact(_04, "fork of a 20-token prompt at S = 8", "cell-11", code="one 20-token prompt at S = 8"),
)
