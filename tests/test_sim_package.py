"""The simulator package's seams: the memory interface, the event calendar, and what imports what."""
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.sim import trace_from_lengths
from pagedkv_lib.sim.contiguous_memory import ContiguousMemory
from pagedkv_lib.sim.events import EventCalendar
from pagedkv_lib.sim.loop import KVMemory
from pagedkv_lib.sim.paged_memory import PagedMemory

TRACE = trace_from_lengths([30, 40], [20, 10], name="tiny")


def test_both_memories_offer_the_interface_the_loop_drives():
    paged = PagedMemory(TRACE, 10, 16, sharing=True, watermark_blocks=0, seed=0)
    contiguous = ContiguousMemory(TRACE, 200, policy="oracle", context=2048)
    assert isinstance(paged, KVMemory) and isinstance(contiguous, KVMemory)
    assert not isinstance(object(), KVMemory)


def test_each_memory_refuses_a_request_that_could_never_fit_it():
    with pytest.raises(ValueError, match="a request of trace 'tiny' needs 4 blocks under policy 'paged', but only 3"):
        PagedMemory(TRACE, 4, 16, sharing=False, watermark_blocks=1, seed=0)
    with pytest.raises(ValueError, match="needs 64 token slots under policy 'pow2', but only 63 are available"):
        ContiguousMemory(TRACE, 63, policy="pow2", context=2048)
    PagedMemory(TRACE, 4, 16, sharing=False, watermark_blocks=0, seed=0)  # exactly enough is enough
    ContiguousMemory(TRACE, 64, policy="pow2", context=2048)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=30))
def test_the_calendar_hands_back_each_steps_items_in_key_order_earliest_step_first(filed):
    calendar = EventCalendar(key=lambda item: item[1])
    for step, key in filed:
        calendar.schedule(step, (step, key))
    seen = []
    while (step := calendar.next_step()) is not None:
        items = calendar.pop_due(step)
        assert items and all(s == step for s, _ in items)
        assert [k for _, k in items] == sorted(k for _, k in items)
        seen += items
    assert sorted(seen) == sorted(filed) and [s for s, _ in seen] == sorted(s for s, _ in filed)
    assert calendar.pop_due(3) == []


def test_lesson_figures_do_not_load_the_simulator_and_the_simulator_does_not_load_matplotlib():
    code = ("import sys, pagedkv_lib.lesson.viz; assert not any(m.startswith('pagedkv_lib.sim') for m in sys.modules); "
            "import pagedkv_lib.sim; assert 'pagedkv_lib.sim.plots' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = "import sys, pagedkv_lib.sim; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
