"""Random add / append / fork / free sequences against a model of the physical cache.

The model plays the attention layer: a cache slot's K/V states depend on the token at that
position *and every token before it*, so the model stores in each slot the whole token history
up to its position. It writes new tokens where ``slot_mapping`` says, performs the
copy-on-write pairs ``append_tokens`` returns, and never writes into prefix-cache hits. After
every step each live request must read its own histories back through its block table. That
fails if a shared block is ever written without a copy, if a hit serves states computed after
other tokens, or if a block is handed out twice.

Token ids come from a tiny vocabulary in which ``t`` and ``t + 2**61 - 1`` have the same Python
hash, so that many different blocks and prefixes have equal hashes: a prefix cache that named a
block's parent by hash would serve wrong hits here.

Prefix hits are checked against a plain-dict reference: the set of ``(salt, token prefix)`` of
every full block ever written. Before any eviction the hit must equal the longest run of cached
full blocks (minus the last prompt token's block); after evictions it may only be shorter.
"""
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_lib.accounting import blocks_needed
from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.errors import OutOfBlocksError

from test_allocator import state

# Python hashes an int modulo 2**61 - 1, so t and t + M hash alike: blocks that differ only by
# such swaps collide, and so do chains built on them.
M = 2**61 - 1
# A few shared "system prompts" so that prefixes repeat (two pairs differ only by colliding ids);
# token ids from a tiny vocabulary so that generated blocks collide with cached ones too.
PREFIXES = [(), (1, 2, 3, 4, 5, 6, 7, 8), (1 + M, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9),
            (5, 5, 5, 5, 5), (5, 5 + M, 5, 5, 5)]
token_lists = st.lists(st.sampled_from([0, 1, 2, M, 1 + M]), max_size=6)


def _histories(tokens):
    """What the K/V states at each position depend on: the tokens up to and including it."""
    return [tuple(tokens[:p + 1]) for p in range(len(tokens))]


class AllocatorMachine(RuleBasedStateMachine):

    @initialize(num_blocks=st.integers(1, 24), block_size=st.integers(1, 4), caching=st.booleans())
    def setup(self, num_blocks, block_size, caching):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
        self.S, self.caching = block_size, caching
        self.slots = {}        # flat slot -> the token history its K/V states were computed from
        self.tokens = {}       # live request -> its token ids
        self.salts = {}
        self.ever_cached = set()  # (salt, prefix) of every full block ever written
        self.hit_tokens = 0
        self.next_id = 0

    def _new_id(self):
        self.next_id += 1
        return f"r{self.next_id}"

    def _remember_full_blocks(self, rid):
        toks, S = self.tokens[rid], self.S
        for i in range(len(toks) // S):
            self.ever_cached.add((self.salts[rid], tuple(toks[:(i + 1) * S])))

    def _expected_hit(self, prompt, salt):
        if not self.caching:
            return 0
        blocks = 0
        while blocks < (len(prompt) - 1) // self.S and \
                (salt, tuple(prompt[:(blocks + 1) * self.S])) in self.ever_cached:
            blocks += 1
        return blocks * self.S

    @rule(prefix=st.sampled_from(PREFIXES), tail=token_lists, salt=st.sampled_from([None, "t"]))
    def add(self, prefix, tail, salt):
        prompt = list(prefix) + tail
        if not prompt:
            return
        rid, before = self._new_id(), state(self.bm)
        expected = self._expected_hit(prompt, salt)
        evicted_before = self.bm.stats().evictions
        try:
            hit = self.bm.add_request(rid, prompt, salt=salt)
        except OutOfBlocksError:
            assert state(self.bm) == before
            return
        assert hit % self.S == 0 and 0 <= hit < len(prompt)
        assert hit == expected if evicted_before == 0 else hit <= expected
        self.hit_tokens += hit
        slots = self.bm.slot_mapping(rid, range(len(prompt))).tolist()
        assert [self.slots[s] for s in slots[:hit]] == _histories(prompt)[:hit], "a hit served other states"
        for s, history in zip(slots[hit:], _histories(prompt)[hit:]):  # prefill computes the rest
            self.slots[s] = history
        self.tokens[rid], self.salts[rid] = prompt, salt
        self._remember_full_blocks(rid)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), new=token_lists)
    def append(self, data, new):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        T, S = len(self.tokens[rid]), self.S
        last = self.bm.block_table(rid)[-1]
        must_copy = T % S != 0 and self.bm.ref_count(last) > 1 and len(new) > 0
        could = self.bm.can_append(rid, len(new))
        before = state(self.bm)
        try:
            pairs = self.bm.append_tokens(rid, new)
        except OutOfBlocksError:
            assert not could and state(self.bm) == before
            return
        assert could
        assert pairs == ([(last, self.bm.block_table(rid)[blocks_needed(T, S) - 1])] if must_copy else [])
        for src, dst in pairs:  # the attention layer copies K/V before writing
            for j in range(S):
                if src * S + j in self.slots:
                    self.slots[dst * S + j] = self.slots[src * S + j]
        self.tokens[rid] = self.tokens[rid] + new
        for s, history in zip(self.bm.slot_mapping(rid, range(T, T + len(new))).tolist(),
                              _histories(self.tokens[rid])[T:]):
            self.slots[s] = history
        self._remember_full_blocks(rid)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        free_before = self.bm.num_free_blocks
        child = self._new_id()
        self.bm.fork(parent, child)
        assert self.bm.num_free_blocks == free_before, "fork must not allocate"
        self.tokens[child], self.salts[child] = list(self.tokens[parent]), self.salts[parent]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        self.bm.free(rid)
        del self.tokens[rid], self.salts[rid]

    @invariant()
    def structures_are_consistent(self):
        self.bm.check_invariants()

    @invariant()
    def every_request_reads_back_its_own_tokens(self):
        for rid, toks in self.tokens.items():
            slots = self.bm.slot_mapping(rid, range(len(toks))).tolist()
            assert [self.slots[s] for s in slots] == _histories(toks), f"request {rid} reads other states"

    @invariant()
    def ledger_figures_match_the_live_state(self):
        s = self.bm.stats()
        assert s.logical_tokens == sum(map(len, self.tokens.values()))
        assert s.reserved_slots == self.S * s.used_blocks
        assert s.slack == s.reserved_slots - s.unique_tokens >= 0
        assert s.unique_tokens <= s.logical_tokens  # every stored state belongs to some request
        assert s.prefix_hit_tokens == self.hit_tokens
        assert s.used_blocks + s.free_blocks == s.num_blocks
        assert s.blocks_allocated - s.blocks_freed == s.used_blocks

    def teardown(self):
        for rid in list(self.tokens):
            self.bm.free(rid)
        s = self.bm.stats()
        assert (s.free_blocks, s.used_blocks, s.logical_tokens, s.unique_tokens) == (s.num_blocks, 0, 0, 0)
        uncached, cached = self.bm.free_queue()
        assert sorted(uncached + cached) == list(range(s.num_blocks))
        self.bm.check_invariants()


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
