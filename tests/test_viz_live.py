"""Figures of live allocator state draw exactly what the allocator holds: one outline per physical
block in the state the manager reports, and one strip segment per slot category of the arena."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from pagedkv_lib.lesson import replay, viz  # noqa: E402
from pagedkv_lib.errors import UnknownRequestError  # noqa: E402
from pagedkv_lib.ledger import PAGE_BATCH, Request  # noqa: E402

IDS = [r.id for r in PAGE_BATCH]


def drawn(ax, prefix="block:"):
    """``{state: [block ids]}`` of the block outlines the figure drew."""
    out = {}
    for p in ax.patches:
        gid = p.get_gid() or ""
        if gid.startswith(prefix):
            _, b, state = gid.split(":")
            out.setdefault(state, []).append(int(b))
    return out


def expected(manager):
    refs = [manager.ref_count(b) for b in range(manager.num_blocks)]
    return {"used": [b for b, r in enumerate(refs) if r == 1],
            "shared": [b for b, r in enumerate(refs) if r > 1],
            "cached": sorted(manager.free_queue()[1])}


def check_map(manager, ids, **kw):
    ax = viz.plot_block_map(manager, ids, **kw)
    got, want = drawn(ax), expected(manager)
    st_ = manager.stats()
    assert sorted(got.get("used", []) + got.get("shared", [])) == sorted(want["used"] + want["shared"])
    assert len(got.get("used", [])) + len(got.get("shared", [])) == st_.used_blocks
    assert sorted(got.get("shared", [])) == want["shared"]
    assert sorted(got.get("cached", [])) == want["cached"]
    assert sum(map(len, got.values())) == manager.num_blocks
    plt.close(ax.figure)
    return got


def test_page_batch_block_map_at_S4_shares_the_three_prefix_blocks():
    manager = replay.play_paged(PAGE_BATCH, 4, num_blocks=16)
    got = check_map(manager, IDS, follow="A2")
    assert sorted(got["shared"]) == [0, 1, 2] and len(got["used"]) == 4


def test_block_map_after_every_step_of_a_walk_through():
    manager = replay.play_paged(PAGE_BATCH, 8, num_blocks=10)
    check_map(manager, IDS)
    manager.free("A2")
    got = check_map(manager, ["A1", "A3"])
    assert got["cached"], "A2's own full block stays cached after free"
    assert check_map(manager, None) == got  # by default, the manager's own live requests
    manager.add_request("B", [7] * 9)
    check_map(manager, ["A1", "A3", "B"], follow="B")


requests = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 9), st.sampled_from([None, "g", "h"])),
                    min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(requests, st.integers(1, 8), st.booleans(), st.data())
def test_blocks_drawn_equal_blocks_in_use_and_shared_equal_ref_count_above_one(reqs, S, share, data):
    batch = [Request(f"r{i}", p, t, g) for i, (p, t, g) in enumerate(reqs) if p + t > 0]
    if not batch:
        return
    manager = replay.play_paged(batch, S, share=share)
    ids = [r.id for r in batch]
    freed = data.draw(st.sets(st.sampled_from(ids), max_size=len(ids) - 1))
    for rid in freed:
        manager.free(rid)
    check_map(manager, [i for i in ids if i not in freed])


def test_block_map_refuses_an_incomplete_or_unknown_request_list():
    manager = replay.play_paged(PAGE_BATCH, 4)
    with pytest.raises(ValueError, match="each of the manager's 3 live requests"):
        viz.plot_block_map(manager, ["A1", "A2"])
    with pytest.raises(UnknownRequestError):
        viz.plot_block_map(manager, ["A1", "A2", "B9"])
    with pytest.raises(TypeError, match="request_ids must be a list"):
        viz.plot_block_map(manager, "A1")


def segments(ax):
    out = {}
    for p in ax.patches:
        if p.get_gid():
            out[p.get_gid()] = out.get(p.get_gid(), 0) + round(p.get_width())
    return out


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
@pytest.mark.parametrize("waiting", [None, 20, 30])
def test_contiguous_strip_draws_each_category_as_many_slots_as_the_arena_counts(policy, waiting):
    arena = replay.play_contiguous(PAGE_BATCH, policy, 32, steps=1, num_slots=112)
    ax = viz.plot_contiguous(arena, waiting)
    want = {c: v for c, v in arena.categories(waiting).items() if v}
    assert segments(ax) == want
    plt.close(ax.figure)


def test_contiguous_strip_shows_external_fragmentation_between_runs():
    arena = replay.play_contiguous(PAGE_BATCH, "oracle", 32, num_slots=60)
    arena.release("A2")                      # a 17-slot hole between A1 and A3
    ax = viz.plot_contiguous(arena, 20)      # a 20-token request fits neither hole
    assert segments(ax)["external_fragmentation"] == arena.categories(20)["external_fragmentation"] == 17 + 14


def test_three_ways_share_one_slot_scale_and_draw_live_state():
    arena = replay.play_contiguous(PAGE_BATCH, "max", 32, num_slots=112)
    paged = replay.play_paged(PAGE_BATCH, 4, share=False, num_blocks=28)
    shared = replay.play_paged(PAGE_BATCH, 4, num_blocks=28)
    fig = viz.plot_three_ways(arena, paged, shared, IDS)
    top, mid, bottom = fig.axes[:3]
    assert segments(top)["token_states"] == 46
    assert len(drawn(mid)["used"]) == paged.stats().used_blocks == 13 and "shared" not in drawn(mid)
    assert sorted(drawn(bottom)["shared"]) == [0, 1, 2] and len(drawn(bottom)["used"]) == 4
    assert top.get_xlim() == mid.get_xlim() == bottom.get_xlim()
    plt.close(fig)
