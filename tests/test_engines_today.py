"""The "what today's engines do" parts: their live figures, their gates' answers, and their controls."""
from __future__ import annotations

import pytest

from pagedkv_lib import accounting as acc
from pagedkv_lib.accounting import GiB
from pagedkv_lib.blocks.block_hash import wrong_hit_probability
from pagedkv_lib.lesson import engines_today as E
from pagedkv_lib.lesson.answer_keys import GATE_KEYS
from pagedkv_lib.lesson.answer_keys import engines_keys as K
from pagedkv_lib.sim import preemption_cost as pc
from pagedkv_lib.sim import workloads
from pagedkv_lib.sim.cpu_tier import replay_with_cpu_tier
from pagedkv_lib.sim.makespan_gap import makespan_gap


def test_chained_keys_have_one_size_while_the_tree_path_grows():
    sizes = E.key_sizes(list(range(80)), 16)
    assert [s["tree_ids"] for s in sizes] == [16, 32, 48, 64, 80]
    assert {s["key_bytes"] for s in sizes} == {32}
    assert E.key_sizes(list(range(15)), 16) == []          # a partly filled block has no key


def test_a_crafted_collision_is_served_as_a_hit_of_other_tokens():
    wrong = E.crafted_wrong_hit(block_size=4, bits=16)
    assert wrong["a"] != wrong["b"] and wrong["shared"]
    assert wrong["hit_tokens"] == 8                        # the colliding block and the one chained to it


@pytest.mark.parametrize("n, m, choice", [(10**6, 10**12, 2), (10**4, 10**3, 0), (10**8, 10**12, 3),
                                         (10**3, 10**8, 1)])
def test_the_wrong_hit_gate_buckets_the_birthday_bound(n, m, choice):
    key = GATE_KEYS["q-wrong-hit"]
    assert key.answer({"cached_blocks": n, "lookups": m}) == K.WRONG_HIT_CHOICES[choice], wrong_hit_probability(n, 64, m)


def test_the_hybrid_gate_is_full_bytes_over_mean_bytes_and_its_reveal_has_both_twins():
    rows = E.hybrid_rows(["Gemma-3-27B"], 32768, 80 * GiB)
    live = {"model": "Gemma-3-27B", "T": 32768, "rows": rows}
    ratio = GATE_KEYS["q-hybrid-bytes"].answer(live)
    spec = acc.get_model("Gemma-3-27B")
    expected = 32768 * spec.num_layers / (spec.num_full_layers * 32768 + spec.num_sliding_layers * spec.sliding_window)
    assert ratio == pytest.approx(expected)
    assert rows[0]["requests"] > rows[1]["requests"] and rows[1]["mean_bytes"] == acc.bytes_per_token(spec)
    assert "all full attention" in GATE_KEYS["q-hybrid-bytes"].reveal(live)[1]


def test_the_preemption_gate_follows_the_crossover():
    key = GATE_KEYS["q-preempt"]
    assert pc.crossover_tokens("Llama-3-8B") == 0
    assert key.answer({"model": "Llama-3-8B", "link": pc.PCIE4_X16_BYTES_PER_S}) == K.PREEMPT_CHOICES[0]
    slow = 2e9                                              # a slow link: recompute wins short requests
    cross = pc.crossover_tokens("OPT-13B", link_bytes_per_s=slow)
    assert 0 < cross < 1 << 24
    assert key.answer({"model": "OPT-13B", "link": slow}) == K.PREEMPT_CHOICES[2]
    assert pc.cheaper_preemption(cross - 1, "OPT-13B", link_bytes_per_s=slow) == "recompute"
    assert pc.cheaper_preemption(cross, "OPT-13B", link_bytes_per_s=slow) == "swap"


@pytest.mark.parametrize("bits, cached, lookups", [(16, 200, 200), (12, 20, 30), (16, 1000, 5)])
def test_the_measured_wrong_hit_rate_of_a_short_key_agrees_with_the_formula(bits, cached, lookups):
    run = E.measured_wrong_hits(bits, cached, lookups, trials=400, seed=bits + cached)
    p = wrong_hit_probability(cached, bits, lookups)
    assert run["formula"] == p and 0.05 < p < 0.95
    assert abs(run["measured"] - p) < 4 * (p * (1 - p) / 400) ** 0.5


def test_the_wrong_hit_reveal_shows_the_experiment_beside_the_formula():
    reveal = GATE_KEYS["q-wrong-hit"].reveal({"cached_blocks": 10**6, "lookups": 10**12})
    run = E.measured_wrong_hits()
    assert f"**{run['measured']:.1%}** of the trials, where the formula says **{run['formula']:.1%}**" in reveal[-1]


def test_the_preemption_reveal_says_which_is_cheaper_in_words_and_what_vllm_chose():
    assert E.which_is_cheaper(0) == "swap is cheaper at every length"
    assert E.which_is_cheaper(1 << 24) == "recompute is cheaper at every length up to 16,777,216 tokens"
    assert E.which_is_cheaper(1234) == "recompute is cheaper below **1,234 tokens**, swap from there on"
    reveal = GATE_KEYS["q-preempt"].reveal({"model": "Llama-3-8B", "link": pc.PCIE4_X16_BYTES_PER_S})
    assert "0 tokens" not in "".join(reveal[:2]) and "swap is cheaper at every length." in reveal[1]
    assert reveal[2] == K.PREEMPT_VLLM and "recomputation by default" in reveal[2]


def test_the_cpu_tier_gate_is_the_replays_hit_rate():
    chats = workloads.multi_turn_conversations(30, seed=1)
    live = {"trace": chats, "gpu_blocks": 600, "cpu_blocks": 2000}
    rate = GATE_KEYS["q-cpu-tier"].answer(live)
    alone = replay_with_cpu_tier(chats, gpu_blocks=600, cpu_blocks=0).hit_rate
    assert rate == pytest.approx(100 * replay_with_cpu_tier(chats, gpu_blocks=600, cpu_blocks=2000).hit_rate)
    assert rate >= 100 * alone


def test_each_control_is_labelled_and_renders_again_on_change():
    import ipywidgets as w
    chats = workloads.multi_turn_conversations(30, seed=1)
    for control, box_type in [(E.preemption_control(), w.Dropdown),
                              (E.chunking_control(workloads.sharegpt_like(40, seed=0)), w.BoundedIntText),
                              (E.cpu_tier_control(chats, gpu_blocks=600), w.BoundedIntText)]:
        boxes = [c for c in control.box.children if not isinstance(c, (w.Output, w.HTML))]   # w.HTML: access's hook
        assert boxes and all(isinstance(b, (w.Dropdown, w.BoundedIntText)) and b.description for b in boxes)
        assert isinstance(boxes[0], box_type)
        before = control.text()
        if isinstance(boxes[0], w.Dropdown):
            boxes[0].value = "Llama-3-8B"
        else:
            boxes[0].value = boxes[0].value + 1000
        assert control.text() != before
        bundle = control._repr_mimebundle_()
        assert bundle["text/markdown"] == bundle["text/plain"] == control.text()


def test_the_chunked_schedule_never_stalls_a_decode_and_the_whole_one_does():
    text = E.chunking_text(workloads.sharegpt_like(60, seed=0), 4096, 20000)
    whole, chunked = [line for line in text.splitlines() if line.startswith("| whole") or line.startswith("| chunked")]
    assert chunked.split("|")[2].strip() == "0" and whole.split("|")[2].strip() != "0"


def test_a_control_that_would_show_a_gates_answer_stays_shut_until_that_gate_is_committed():
    from pagedkv_lib.lesson import gates as W
    W.reset()
    chats = workloads.multi_turn_conversations(30, seed=1)
    gate = W.ask("q-cpu-tier", "hit rate with a CPU tier?", trace=chats, gpu_blocks=600, cpu_blocks=2000)
    control = E.cpu_tier_control(chats, gpu_blocks=600, after=gate)
    assert control.shut and all(b.disabled for b in control.boxes)
    assert "Commit your prediction above first" in control.text() and "%" not in control.text()
    control.boxes[0].value = 2000          # a forced change shows nothing either
    assert "Commit your prediction above first" in control.text()
    W.commit("q-cpu-tier", 50)
    assert not control.shut and not any(b.disabled for b in control.boxes)
    assert control.text() == E.cpu_tier_text(chats, 600, 2000)
    W.reset()


@pytest.mark.parametrize("requests, budget", [(150, 4096), (60, 4096)])   # the second: the p99 gaps tie
def test_the_chunking_gate_follows_both_gaps_of_the_two_runs(requests, budget):
    trace = workloads.sharegpt_like(requests, seed=0)
    live = {"trace": trace, "num_blocks": 20000, "token_budget": budget}
    runs = E.chunking_runs(trace, budget, 20000)
    w, c = runs["whole prompts"], runs["chunked"]

    def ways(key):   # the directions a gap may be said to move: both, where it did not move
        return {"shorter"} if c[key] < w[key] else {"longer"} if c[key] > w[key] else {"shorter", "longer"}
    expected = tuple(choice for k, choice in enumerate(K.CHUNKING_CHOICES)
                     if ("shorter", "longer")[k >= 2] in ways("max_itl_s") and ("shorter", "longer")[k % 2] in ways("p99_itl_s"))
    answer, reveal = GATE_KEYS["q-chunking"].answer_and_reveal(live)
    assert answer == (expected[0] if len(expected) == 1 else expected) == GATE_KEYS["q-chunking"].answer(live)
    assert c["stalled_decodes"] == 0 < w["stalled_decodes"]
    assert f"{1e3 * c['max_itl_s']:,.0f} ms" in reveal[0] and reveal[1] == E.chunking_text(trace, budget, 20000)


def test_the_lessons_chunking_gate_is_not_the_obvious_choice():
    # lesson 04's setting: chunking ends the stalls and the longest gap, and yet the 99th percentile grows
    live = {"trace": workloads.sharegpt_like(300, seed=0), "num_blocks": 20000, "token_budget": 2048}
    assert GATE_KEYS["q-chunking"].answer(live) == K.CHUNKING_CHOICES[1]


def test_a_tie_in_one_gap_admits_both_choices_it_does_not_decide(monkeypatch):
    same = {"stalled_decodes": 0, "steps": 9, "p99_itl_s": 0.02, "max_itl_s": 0.05, "mean_ttft_s": 1.0}
    runs = {"whole prompts": {**same, "stalled_decodes": 4, "max_itl_s": 0.5}, "chunked": same}
    monkeypatch.setattr(E, "chunking_runs", lambda *a: runs)
    answer = GATE_KEYS["q-chunking"].answer({"trace": workloads.sharegpt_like(10, seed=0), "num_blocks": 99,
                                             "token_budget": 64})
    assert answer == K.CHUNKING_CHOICES[:2]


@pytest.mark.parametrize("qid, target, live", [
    ("q-chunking", (E, "chunking_runs"), {"trace": workloads.sharegpt_like(40, seed=0), "num_blocks": 20000,
                                          "token_budget": 2048}),
    ("q-cpu-tier", (K, "replay_with_cpu_tier"), {"trace": workloads.multi_turn_conversations(10, seed=1),
                                                 "gpu_blocks": 300, "cpu_blocks": 500}),
    ("q-preempt", (pc, "crossover_tokens"), {"model": "OPT-13B", "link": 2e9}),
    ("q-served-preempt", (E, "served_preemption_results"), {"trace": E.busy_trace(requests=150), "link": 2e10,
                                                             "num_blocks": 988}),
])
def test_a_gate_runs_its_simulation_or_bisection_once_for_answer_and_reveal(qid, target, live, monkeypatch):
    from pagedkv_lib.lesson import gates as W
    module, name = target
    real, calls = getattr(module, name), []
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    W.reset()
    gate = W.ask(qid, "?", **live)
    assert len(calls) == 1 and gate.answer == GATE_KEYS[qid].answer(live)
    W.reset()


def test_the_chunking_control_stays_shut_until_its_gate_is_committed():
    from pagedkv_lib.lesson import gates as W
    W.reset()
    trace = workloads.sharegpt_like(40, seed=0)
    gate = W.ask("q-chunking", "what do the gaps do?", trace=trace, num_blocks=20000, token_budget=2048)
    control = E.chunking_control(trace, after=gate)
    assert control.shut and all(b.disabled for b in control.boxes) and "ms" not in control.text()
    W.commit("q-chunking", K.CHUNKING_CHOICES[3])
    assert not control.shut and control.text() == E.chunking_text(trace, control.boxes[0].value, 20000)
    W.reset()


def test_the_hybrid_reveal_names_the_gpu_its_rows_were_counted_for():
    rows = E.hybrid_rows(["Gemma-3-27B"], 32768, 96 * GiB, utilization=0.85, block_size=32)
    text = GATE_KEYS["q-hybrid-bytes"].reveal({"model": "Gemma-3-27B", "T": 32768, "rows": rows})[0]
    assert "a 96 GiB GPU (utilization 0.85, blocks of 32)" in " ".join(text.split()) and "80 GiB" not in text
    assert rows[0]["requests"] == acc.hybrid_kv_capacity("Gemma-3-27B", 96 * GiB, 32768, utilization=0.85,
                                                         block_size=32).requests


def test_the_served_preemption_control_opens_with_the_served_gate_and_follows_its_link():
    from pagedkv_lib.lesson import gates as W
    W.reset()
    trace = E.busy_trace(requests=200)
    gate = W.ask("q-served-preempt", "which finishes sooner?", trace=trace, link=pc.PCIE4_X16_BYTES_PER_S,
                 num_blocks=988)
    control = E.served_preemption_control(trace, after=gate)
    assert control.shut and control.boxes[0].disabled and "recompute" not in control.text()
    W.commit("q-served-preempt", gate.choices[0])
    assert not control.shut and control.boxes[0].description == "host link"
    labels = list(E.LINKS)
    assert control.text() == E.served_preemption_text(trace, E.LINKS[labels[0]])
    control.boxes[0].value = labels[1]
    assert control.text() == E.served_preemption_text(trace, E.LINKS[labels[1]]) != E.served_preemption_text(
        trace, E.LINKS[labels[0]])
    W.reset()


def test_the_served_runs_differ_only_in_what_happens_when_blocks_run_out():
    """The lesson's busy trace preempts; recompute that reuses cached blocks prefills fewer tokens again than
    plain recompute (each preemption leaves its surviving prefix), and swap prefills none while the host area
    has room."""
    runs = E.served_preemption_runs(E.busy_trace(), pc.PCIE4_X16_BYTES_PER_S, num_blocks=988)
    plain, cached, swap = (runs[name] for name in E.SERVED_PREEMPTIONS)
    assert plain["preempted_recompute"] > 0 and plain["reused_tokens"] == 0
    assert cached["reused_tokens"] > 0 and cached["recomputed_tokens"] < plain["recomputed_tokens"]
    assert swap["preempted_swap"] > 0 and swap["recomputed_tokens"] == swap["reused_tokens"] == 0
    table = E.served_preemption_table(runs, 1000, 988)
    assert table.count("\n| ") == 1 + len(runs) and "| recompute, reusing the blocks still cached |" in table


def _served_live(link=pc.PCIE4_X16_BYTES_PER_S, requests=1000):
    return {"trace": E.busy_trace(requests=requests), "link": link, "num_blocks": 988}


@pytest.mark.parametrize("link", [pc.PCIE4_X16_BYTES_PER_S, pc.PCIE5_X16_BYTES_PER_S])
def test_the_served_gate_is_the_run_that_finishes_first_and_its_reveal_adds_up(link):
    """The answer is whichever run serves the trace sooner; the reveal's table has each run's parts adding up to
    its time, and its prose gives the live preemption counts and the swap-ins undone in their own step."""
    live = _served_live(link, requests=300)
    runs = E.served_preemption_results(live["trace"], link, 988, ways=("recompute", "swap"))
    re, sw = (runs[k].summary()["makespan_s"] for k in ("recompute", "swap"))
    answer, reveal = GATE_KEYS["q-served-preempt"].answer_and_reveal(live)
    assert answer == K.SERVED_CHOICES[re > sw] and re != sw
    table = reveal[1]
    for row in table.splitlines()[2:]:
        cells = [float(c.replace(",", "")) for c in row.strip("|").split("|")[2:]]
        assert sum(cells[:-1]) == pytest.approx(cells[-1], abs=0.03)
    why = " ".join(reveal[2].split())
    assert f"recompute preempted **{runs['recompute'].preempted_recompute:,}** times" in why
    assert f"**{runs['swap'].undone_swaps:,}** of the swaps out" in why


def test_the_lessons_served_gate_contradicts_the_per_request_table_and_the_reveal_says_why():
    """The lesson's question: per preemption, swap is the cheaper for requests of the size it moved, yet plain
    recompute serves the busy trace sooner over PCIe 4.0, because swap preempts more often (and undoes some of its
    own swap-ins); over PCIe 5.0 swap wins."""
    live = _served_live()
    answer, reveal = GATE_KEYS["q-served-preempt"].answer_and_reveal(live)
    runs = E.served_preemption_results(live["trace"], live["link"], 988, ways=("recompute", "swap"))
    sw = runs["swap"]
    mean_moved = round(sw.swapped_tokens / sw.preempted_swap)
    assert pc.cheaper_preemption(mean_moved, "OPT-13B") == "swap" and answer == "recompute"
    gap = makespan_gap(runs["recompute"], sw)
    assert gap["preemption_count_s"] > abs(gap["steps_s"]) + abs(gap["preemption_price_s"])
    assert sw.undone_swaps > 0
    assert GATE_KEYS["q-served-preempt"].answer(_served_live(pc.PCIE5_X16_BYTES_PER_S)) == "swap"


def served_control_gate(path) -> str | None:
    """The gate that lesson ``path``'s served control waits for, if the cell asking that gate comes first."""
    import re

    import nbformat
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    control = next(i for i, s in enumerate(cells) if "served_preemption_control(" in s)
    gate = re.search(r'served_preemption_control\([^)]*after=W\.gate\("([\w-]+)"\)', cells[control])
    asked = gate and next((i for i, s in enumerate(cells) if f'W.ask("{gate[1]}"' in s), None)
    return gate[1] if asked is not None and asked < control else None


def test_lesson_04s_served_control_opens_only_with_the_gate_that_asks_which_way_finishes_sooner():
    """The control's tables show the served gate's answer: it must wait for that gate, asked above it (waiting for
    the per-request gate, as it once did, would show the answer to a learner who committed only that one)."""
    from conftest import LESSONS
    assert served_control_gate(next(p for p in LESSONS if p.stem == "04_demo")) == "q-served-preempt"
