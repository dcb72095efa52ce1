"""Contiguous reservation baselines: policies, first-fit placement, and the memory categories."""
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_lib.blocks.manager import DuplicateRequestError, UnknownRequestError
from pagedkv_lib.blocks.contiguous import ARENA_CATEGORIES, RESERVATION_POLICIES, ContiguousArena, reservation_slots
from pagedkv_lib.errors import OutOfBlocksError


@pytest.mark.parametrize("policy, final, expected", [
    ("max", 5, 64), ("max", 64, 64),
    ("pow2", 1, 1), ("pow2", 5, 8), ("pow2", 8, 8), ("pow2", 33, 64),
    ("oracle", 5, 5), ("oracle", 64, 64),
])
def test_reservation_per_policy(policy, final, expected):
    assert reservation_slots(policy, final, max_len=64) == expected


@given(st.integers(1, 4096))
def test_pow2_over_reserves_by_less_than_2x_and_oracle_not_at_all(final):
    pow2 = reservation_slots("pow2", final, 4096)
    assert final <= pow2 < 2 * final and pow2 & (pow2 - 1) == 0
    assert reservation_slots("oracle", final, 4096) == final


def test_pow2_is_capped_at_the_maximum_length():
    assert reservation_slots("pow2", 33, max_len=48) == 48


def test_first_fit_reuses_the_lowest_hole_and_never_moves_runs():
    arena = ContiguousArena(32, "oracle", max_len=32)
    assert [arena.admit(r, 1, n) for r, n in [("a", 8), ("b", 4), ("c", 8)]] == [0, 8, 12]
    arena.release("b")
    assert arena.admit("d", 1, 3) == 8       # the 4-slot hole at 8 is the first that fits
    assert arena.admit("e", 1, 6) == 20      # the 1-slot hole at 11 is too short: next gap
    assert arena.request_ids() == ["a", "d", "c", "e"]
    arena.check_invariants()


def test_categories_by_hand():
    # arena of 20; "max" reserves 8 per request. a: prompt 2, final 5 -> 2 live, 3 to come, 3 never used
    arena = ContiguousArena(20, "max", max_len=8)
    arena.admit("a", 2, 5)
    arena.admit("b", 4, 4)
    arena.release("a")
    arena.admit("c", 1, 2)
    arena.grow("c")
    # c at [0, 8): 2 live, 0 to come, 6 never used; b at [8, 16): 4 live, 4 never used; gap [16, 20)
    assert arena.categories() == {"token_states": 6, "reservation": 0, "internal_fragmentation": 10,
                                  "external_fragmentation": 0, "free": 4}
    # a waiting request needs 8 slots: the 4-slot gap is now external fragmentation
    assert arena.categories(next_request_len=3)["external_fragmentation"] == 4
    assert not arena.fits(3)


def test_external_fragmentation_depends_on_the_next_request():
    arena = ContiguousArena(16, "oracle", max_len=16)
    for rid in "abcd":
        arena.admit(rid, 1, 4)
    arena.release("a")
    arena.release("c")  # two 4-slot gaps
    assert arena.categories(next_request_len=4)["external_fragmentation"] == 0
    assert arena.categories(next_request_len=5)["external_fragmentation"] == 8  # 8 free, none usable
    assert arena.categories()["free"] == 8


@pytest.mark.parametrize("call, error, words", [
    (lambda a: a.admit("a", 1, 4), DuplicateRequestError, "'a' is already admitted"),
    (lambda a: a.admit("z", 5, 4), ValueError, r"prompt_len must be an integer in \[1, 4\], got 5"),
    (lambda a: a.admit("z", 1, 99), ValueError, r"final_len must be an integer in \[1, 64\], got 99"),
    (lambda a: a.admit("z", 0, 4), ValueError, "prompt_len"),
    (lambda a: a.admit("", 1, 4), TypeError, "request_id"),
    (lambda a: a.admit("z", 1, 40), ValueError, "more than the arena's 32: it can never fit"),
    (lambda a: a.admit("z", 1, 30), OutOfBlocksError, "no free gap of 30 slots"),
    (lambda a: a.grow("a", 3), ValueError, r"n must be an integer in \[0, 2\], got 3"),
    (lambda a: a.grow("zz"), UnknownRequestError, "'zz' is not admitted"),
    (lambda a: a.release("zz"), UnknownRequestError, "'zz'"),
    (lambda a: a.categories(next_request_len=0), ValueError,
     r"^next_request_len must be an integer in \[1, 64\], got 0$"),
    (lambda a: a.categories(next_request_len=99), ValueError,
     r"^next_request_len must be an integer in \[1, 64\], got 99$"),
    (lambda a: a.categories(next_request_len=2.0), TypeError, r"^next_request_len must be an integer"),
    (lambda a: a.grow(["a"]), TypeError, r"request_id must be a request id.*\['a'\]"),
    (lambda a: a.release(["a"]), TypeError, r"request_id must be a request id.*\['a'\]"),
])
def test_bad_input_raises_and_changes_nothing(call, error, words):
    arena = ContiguousArena(32, "oracle", max_len=64)
    arena.admit("a", 2, 4)
    before = (arena.categories(), [arena.placement(r) for r in arena.request_ids()])
    with pytest.raises(error, match=words):
        call(arena)
    assert (arena.categories(), [arena.placement(r) for r in arena.request_ids()]) == before


@pytest.mark.parametrize("kwargs, words", [
    ({"num_slots": 0, "policy": "max", "max_len": 4}, "num_slots"),
    ({"num_slots": 8, "policy": "buddy", "max_len": 4}, "policy must be one of 'max', 'pow2', 'oracle'"),
    ({"num_slots": 8, "policy": "max", "max_len": 0}, "max_len"),
])
def test_bad_arena_is_rejected(kwargs, words):
    with pytest.raises((TypeError, ValueError), match=words):
        ContiguousArena(**kwargs)


class ArenaMachine(RuleBasedStateMachine):
    """Random admit / grow / release against an occupancy list of the arena (the reference)."""

    @initialize(num_slots=st.integers(1, 64), policy=st.sampled_from(RESERVATION_POLICIES), max_len=st.integers(1, 24))
    def setup(self, num_slots, policy, max_len):
        self.arena = ContiguousArena(num_slots, policy, max_len)
        self.owner = [None] * num_slots  # slot -> request id holding it
        self.next_id = 0

    @rule(data=st.data())
    def admit(self, data):
        final = data.draw(st.integers(1, self.arena.max_len))
        prompt = data.draw(st.integers(1, final))
        size = self.arena.reservation_for(final)
        rid = f"r{self.next_id}"
        self.next_id += 1
        starts = [s for s in range(len(self.owner) - size + 1) if all(o is None for o in self.owner[s:s + size])]
        if size > len(self.owner):
            with pytest.raises(ValueError):
                self.arena.admit(rid, prompt, final)
        elif not starts:
            assert not self.arena.fits(final)
            with pytest.raises(OutOfBlocksError):
                self.arena.admit(rid, prompt, final)
        else:
            assert self.arena.fits(final)
            assert self.arena.admit(rid, prompt, final) == starts[0], "first fit = lowest free start"
            self.owner[starts[0]:starts[0] + size] = [rid] * size

    @precondition(lambda self: self.arena.request_ids())
    @rule(data=st.data())
    def grow(self, data):
        rid = data.draw(st.sampled_from(self.arena.request_ids()))
        _, _, live, final = self.arena.placement(rid)
        self.arena.grow(rid, data.draw(st.integers(0, final - live)))

    @precondition(lambda self: self.arena.request_ids())
    @rule(data=st.data())
    def release(self, data):
        rid = data.draw(st.sampled_from(self.arena.request_ids()))
        self.arena.release(rid)
        self.owner = [None if o == rid else o for o in self.owner]

    @invariant()
    def categories_sum_to_the_arena_for_any_next_request(self):
        self.arena.check_invariants()
        for nxt in (None, 1, self.arena.max_len // 2 + 1, self.arena.max_len):
            cats = self.arena.categories(nxt)
            assert list(cats) == list(ARENA_CATEGORIES) and min(cats.values()) >= 0
            assert sum(cats.values()) == self.arena.num_slots
            assert cats["token_states"] + cats["reservation"] + cats["internal_fragmentation"] == \
                sum(1 for o in self.owner if o is not None)
            if nxt is None:
                assert cats["external_fragmentation"] == 0
            elif not self.arena.fits(nxt):  # the next request is blocked: the paper's four make the arena
                assert cats["free"] == 0

    @invariant()
    def oracle_never_fragments_internally(self):
        if self.arena.policy == "oracle":
            assert self.arena.categories()["internal_fragmentation"] == 0


TestArenaMachine = ArenaMachine.TestCase
TestArenaMachine.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
