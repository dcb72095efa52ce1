"""Random add / append / fork / free sequences against two models: of the physical cache, and of the rules.

**The cache model** plays the attention layer: a cache slot's K/V states depend on the token at
that position *and every token before it*, so the model stores in each slot the whole token
history up to its position. It writes new tokens where ``slot_mapping`` says, performs the
copy-on-write pairs ``append_tokens`` returns, and never writes into prefix-cache hits. After
every step each live request must read its own histories back through its block table. That
fails if a shared block is ever written without a copy, if a hit serves states computed after
other tokens, or if a block is handed out twice.

**The rules model** (:class:`ExactPrefixCacheModel`) is vLLM's rules written out with plain
lists and one dict that names each cached block by its whole content, ``(salt, tokens up to its
end)``, rather than by a chain of blocks. It predicts every hit, block id, copy and the whole free
queue, and the manager must agree after every step. A cache that forgot a block it still held
(one cached below a parent that was evicted and computed again) would disagree with it.

Token ids come from a tiny vocabulary in which ``t`` and ``t + 2**61 - 1`` have the same Python
hash, so that many different blocks and prefixes have equal hashes: a prefix cache that named a
block's parent by hash would serve wrong hits here.
"""
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.errors import OutOfBlocksError

from test_allocator import state

# Python hashes an int modulo 2**61 - 1, so t and t + M hash alike: blocks that differ only by
# such swaps collide, and so do chains built on them.
M = 2**61 - 1
# A few shared "system prompts" so that prefixes repeat (two pairs differ only by colliding ids);
# token ids from a tiny vocabulary so that generated blocks collide with cached ones too.
PREFIXES = [(), (1, 2, 3, 4, 5, 6, 7, 8), (1 + M, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9),
            (5, 5, 5, 5, 5), (5, 5 + M, 5, 5, 5), (1, 2), (1,)]
token_lists = st.lists(st.sampled_from([0, 1, 2, M, 1 + M]), max_size=6)


def _histories(tokens):
    """What the K/V states at each position depend on: the tokens up to and including it."""
    return [tuple(tokens[:p + 1]) for p in range(len(tokens))]


class ExactPrefixCacheModel:
    """vLLM's block-manager rules with plain structures: what the manager must do, step by step.

    Free uncached blocks are a stack (a fresh pool hands out 0, 1, 2, ...); free cached blocks a
    list, least recently freed first, evicted from the front; a block freed tail first goes on
    the stack unless it is cached. A full block is cached under ``(salt, its whole token prefix)``
    when it fills, unless another block is cached under that name already; it loses the name
    when it is evicted. A prompt hits the cached names of its full blocks, from the first, up to
    the first miss and never the block of its last token.
    """

    def __init__(self, num_blocks, S, caching):
        self.S, self.caching = S, caching
        self.ref = [0] * num_blocks
        self.stack = list(range(num_blocks - 1, -1, -1))
        self.lru = []
        self.cached = {}     # (salt, token prefix) -> the block cached under it
        self.name_of = {}    # cached block -> its name
        self.cached_at = {}  # name -> the step it was last cached at
        self.tables, self.tokens, self.salts = {}, {}, {}
        self.steps = 0

    def _name(self, rid, i):
        return self.salts[rid], tuple(self.tokens[rid][:(i + 1) * self.S])

    def _free(self):
        return len(self.stack) + len(self.lru)

    def _take(self, n):
        taken = []
        for _ in range(n):
            b = self.stack.pop() if self.stack else self.lru.pop(0)
            if b in self.name_of:
                del self.cached[self.name_of.pop(b)]
            self.ref[b] = 1
            taken.append(b)
        return taken

    def _cache_full_blocks(self, rid, start):
        self.steps += 1
        for i in range(start, len(self.tokens[rid]) // self.S if self.caching else 0):
            name, b = self._name(rid, i), self.tables[rid][i]
            if name not in self.cached:
                self.cached[name], self.name_of[b], self.cached_at[name] = b, name, self.steps

    def add(self, rid, prompt, salt):
        """The hit in tokens, or None for out of blocks; also whether a hit's parent was cached again after it."""
        S, T = self.S, len(prompt)
        self.tokens[rid], self.salts[rid] = list(prompt), salt
        names = [self._name(rid, i) for i in range((T - 1) // S)] if self.caching else []
        k = 0
        while k < len(names) and names[k] in self.cached:
            k += 1
        hits = [self.cached[n] for n in names[:k]]
        need = -(-T // S) - k
        if need > self._free() - sum(self.ref[b] == 0 for b in hits):
            del self.tokens[rid], self.salts[rid]
            return None, False
        for b in hits:
            if self.ref[b] == 0:
                self.lru.remove(b)
            self.ref[b] += 1
        self.tables[rid] = hits + self._take(need)
        recomputed_parent = any(self.cached_at[names[i - 1]] > self.cached_at[names[i]] for i in range(1, k))
        self._cache_full_blocks(rid, k)
        return k * S, recomputed_parent

    def append(self, rid, new):
        """The copy-on-write pairs, or None for out of blocks."""
        S, table, T = self.S, self.tables[rid], len(self.tokens[rid])
        copy = bool(new) and T % S > 0 and self.ref[table[-1]] > 1
        grow = -(-(T + len(new)) // S) - len(table)
        if copy + grow > self._free():
            return None
        fresh, pairs = self._take(copy + grow), []
        if copy:
            pairs.append((table[-1], fresh[0]))
            self.ref[table[-1]] -= 1
            table[-1] = fresh.pop(0)
        table += fresh
        self.tokens[rid] = self.tokens[rid] + list(new)
        self._cache_full_blocks(rid, T // S)
        return pairs

    def fork(self, parent, child):
        self.tables[child], self.tokens[child] = list(self.tables[parent]), list(self.tokens[parent])
        self.salts[child] = self.salts[parent]
        for b in self.tables[child]:
            self.ref[b] += 1

    def free(self, rid):
        for b in reversed(self.tables.pop(rid)):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (self.lru if b in self.name_of else self.stack).append(b)
        del self.tokens[rid], self.salts[rid]

    def free_queue(self):
        return self.stack[::-1], list(self.lru)


class AllocatorMachine(RuleBasedStateMachine):
    # How often a prompt hit a cached block whose parent had been evicted and computed again
    # since that block was cached (test_the_machine_reaches... checks that it happens).
    recomputed_parent_hits = 0

    @initialize(num_blocks=st.integers(1, 24), block_size=st.integers(1, 4), caching=st.booleans())
    def setup(self, num_blocks, block_size, caching):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
        self.model = ExactPrefixCacheModel(num_blocks, block_size, caching)
        self.S, self.caching = block_size, caching
        self.slots = {}        # flat slot -> the token history its K/V states were computed from
        self.tokens = {}       # live request -> its token ids
        self.hit_tokens = 0
        self.next_id = 0

    def _new_id(self):
        self.next_id += 1
        return f"r{self.next_id}"

    @rule(prefix=st.sampled_from(PREFIXES), tail=token_lists, salt=st.sampled_from([None, "t"]))
    def add(self, prefix, tail, salt):
        prompt = list(prefix) + tail
        if prompt:
            self._add(self._new_id(), prompt, salt)

    def _add(self, rid, prompt, salt):
        """Add a prompt to the manager and the rules; check that they agree; return the hit (None: out of blocks)."""
        before = state(self.bm)
        expected, recomputed_parent = self.model.add(rid, prompt, salt)
        try:
            hit = self.bm.add_request(rid, prompt, salt=salt)
        except OutOfBlocksError:
            assert expected is None, "the manager ran out of blocks where the rules find room"
            assert state(self.bm) == before
            return None
        assert hit == expected, f"hit {hit} tokens, the rules say {expected}"
        AllocatorMachine.recomputed_parent_hits += recomputed_parent
        self.hit_tokens += hit
        slots = self.bm.slot_mapping(rid, range(len(prompt))).tolist()
        assert [self.slots[s] for s in slots[:hit]] == _histories(prompt)[:hit], "a hit served other states"
        for s, history in zip(slots[hit:], _histories(prompt)[hit:]):  # prefill computes the rest
            self.slots[s] = history
        self.tokens[rid] = list(prompt)
        return hit

    def _append(self, rid, new):
        """Append to the manager and the rules; check that they agree; return the copies (None: out of blocks)."""
        T = len(self.tokens[rid])
        could, before = self.bm.can_append(rid, len(new)), state(self.bm)
        expected = self.model.append(rid, new)
        try:
            pairs = self.bm.append_tokens(rid, new)
        except OutOfBlocksError:
            assert expected is None and not could and state(self.bm) == before
            return None
        assert could and pairs == expected, f"copies {pairs}, the rules say {expected}"
        for src, dst in pairs:  # the attention layer copies K/V before writing
            for j in range(self.S):
                if src * self.S + j in self.slots:
                    self.slots[dst * self.S + j] = self.slots[src * self.S + j]
        self.tokens[rid] = self.tokens[rid] + list(new)
        for s, history in zip(self.bm.slot_mapping(rid, range(T, T + len(new))).tolist(),
                              _histories(self.tokens[rid])[T:]):
            self.slots[s] = history
        return pairs

    def _free(self, rid):
        self.bm.free(rid)
        self.model.free(rid)
        del self.tokens[rid]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), new=token_lists)
    def append(self, data, new):
        self._append(data.draw(st.sampled_from(sorted(self.tokens))), new)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        free_before = self.bm.num_free_blocks
        child = self._new_id()
        self.bm.fork(parent, child)
        self.model.fork(parent, child)
        assert self.bm.num_free_blocks == free_before, "fork must not allocate"
        self.tokens[child] = list(self.tokens[parent])

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        self._free(data.draw(st.sampled_from(sorted(self.tokens))))

    @rule(n=st.integers(1, 4))
    def flood(self, n):
        """A request of ``n`` blocks of tokens nobody else has, freed at once: the LRU queue's front is evicted."""
        rid = self._new_id()
        if self._add(rid, [10**6 + 100 * self.next_id + i for i in range(n * self.S)], None) is not None:
            self._free(rid)

    @precondition(lambda self: self.model.cached)
    @rule(data=st.data(), last=st.sampled_from([0, 1]))
    def add_a_cached_prefix(self, data, last):
        """A prompt that continues the whole prefix of a block the rules say is cached."""
        salt, prefix = data.draw(st.sampled_from(sorted(self.model.cached, key=repr)))
        self._add(self._new_id(), list(prefix) + [last], salt)

    @precondition(lambda self: self.caching)
    @rule(salt=st.sampled_from([None, "t"]))
    def evict_a_parent_then_compute_it_again(self, salt):
        """In whatever state the random steps left: cache a block C below a block P, evict P's cached
        block while C stays cached, compute P again, then prompt P + C. Every step is checked like the
        random ones; the episode stops where the pool runs out."""
        S, base = self.S, 10**7 + 1000 * self.next_id
        P, C = list(range(base, base + S)), list(range(base + S, base + 2 * S))
        first, second, flood, again, hit = (self._new_id() for _ in range(5))
        if self._add(first, P + [0], salt) is None:          # P's cached block
            return
        if self._add(second, P, salt) is None:               # P again (its last token is computed): a duplicate
            return
        if self._append(second, C + [0]) is None:            # C fills below the duplicate: cached
            return
        self._free(first)
        uncached, cached = self.bm.free_queue()
        ahead = len(uncached) + cached.index(self.model.cached[salt, tuple(P)]) + 1
        if self._add(flood, [base + 2 * S + i for i in range(ahead * S)], salt) is None:
            return                                           # took every block up to P's: P is evicted
        self._free(flood)
        self._free(second)                                   # C is cached free; no block holds P's states
        if self._add(again, P + [1], salt) is not None and self._add(hit, P + C + [2], salt) is not None:
            self._free(hit)
        if again in self.tokens:
            self._free(again)

    @invariant()
    def structures_are_consistent(self):
        self.bm.check_invariants()

    @invariant()
    def tables_and_free_queue_follow_the_rules(self):
        assert {rid: self.bm.block_table(rid) for rid in self.tokens} == self.model.tables
        assert self.bm.free_queue() == self.model.free_queue()

    @invariant()
    def the_tree_holds_only_the_prefixes_of_states_that_blocks_hold(self):
        # The prefix cache's memory bound: its nodes are exactly the nodes on the paths from the root
        # to the nodes of blocks that hold a full block's states, so at most the sum of their depths.
        cache, paths, depths = self.bm.prefix_cache, set(), 0
        for b in range(self.bm.num_blocks):
            node = cache.node_of(b)
            while node is not None:
                paths.add(id(node))
                node, depths = node.parent, depths + 1
        assert len(cache) == len(paths) <= depths

    @invariant()
    def every_request_reads_back_its_own_tokens(self):
        for rid, toks in self.tokens.items():
            slots = self.bm.slot_mapping(rid, range(len(toks))).tolist()
            assert [self.slots[s] for s in slots] == _histories(toks), f"request {rid} reads other states"

    @invariant()
    def ledger_figures_match_the_model(self):
        # Recomputed from the model, never from the manager's own figures.
        s, m, S = self.bm.stats(), self.model, self.S
        fill = {}
        for rid, table in m.tables.items():
            for i, b in enumerate(table):
                fill[b] = min(S, len(m.tokens[rid]) - i * S)
        assert s.logical_tokens == sum(map(len, self.tokens.values()))
        assert (s.used_blocks, s.unique_tokens) == (len(fill), sum(fill.values()))
        assert (s.reserved_slots, s.slack) == (S * len(fill), S * len(fill) - sum(fill.values()))
        assert (s.free_blocks, s.cached_free_blocks) == (m._free(), len(m.lru))
        assert s.prefix_hit_tokens == self.hit_tokens

    def teardown(self):
        for rid in list(self.tokens):
            self.bm.free(rid)
            self.model.free(rid)
        s = self.bm.stats()
        assert (s.free_blocks, s.used_blocks, s.logical_tokens, s.unique_tokens) == (s.num_blocks, 0, 0, 0)
        assert self.bm.free_queue() == self.model.free_queue()
        self.bm.check_invariants()


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_the_machine_reaches_a_recomputed_parent_hitting_its_child():
    """The random runs above include the case the prefix cache's nodes exist for: a prompt hits a
    block whose parent block was evicted and computed again after the block was cached."""
    AllocatorMachine.recomputed_parent_hits = 0
    run_state_machine_as_test(AllocatorMachine, settings=settings(
        max_examples=150, stateful_step_count=40, deadline=None, derandomize=True, database=None))
    assert AllocatorMachine.recomputed_parent_hits > 0
