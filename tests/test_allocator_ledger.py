"""The block manager's ledger figures against the page's teaching ledger (`pagedkv_lib.ledger`).

A batch of the page (requests with a prefix shared by group, then an own tail) can be played on
the block manager two ways: as prompts that hit the prefix cache, or as one prompt per group
that is forked and then extended by each member's tail. Where the shared prefix fills whole
blocks, both agree with the ledger on every figure. Where it does not, they differ, and the
difference is exact: vLLM-style managers share only *full* blocks (the prefix cache never
serves a partial block; a fork's partial block is copied on the first write), so every member
after the first stores the ``prefix % S`` tokens of the partial prefix block again, while the
ledger stores each prefix once and starts every tail in a new block.
"""
from collections import defaultdict

from hypothesis import given, strategies as st

from pagedkv_lib.blocks.manager import BlockManager
from pagedkv_lib.ledger import PAGE_BATCH, Request, allocate


def _prefix_tokens(r, n, groups):
    """A group's prefix tokens are the same for all its members and differ from everything else."""
    owner = groups.setdefault(r.group, len(groups)) if r.group is not None else 1000 + n
    return [100_000 * (owner + 1) + i for i in range(r.prefix)]


def _tail_tokens(n, r):
    return [(n + 1) * 1_000_000_000 + i for i in range(r.tail)]


def play_as_prompts(batch, S):
    """Each request is one prompt: its group's prefix tokens, then tail tokens no one else has."""
    bm, groups = BlockManager(1024, S), {}
    for n, r in enumerate(batch):
        bm.add_request(r.id, _prefix_tokens(r, n, groups) + _tail_tokens(n, r))
    return bm


def play_as_forks(batch, S):
    """Each group's first member prefills the prefix and the others fork it; then every member
    appends its tail. A request without a group is one prompt, as above."""
    bm, groups, first = BlockManager(1024, S), {}, {}
    for n, r in enumerate(batch):
        if r.group is None:
            bm.add_request(r.id, _prefix_tokens(r, n, groups) + _tail_tokens(n, r))
        elif r.group in first:
            bm.fork(first[r.group], r.id)
        else:
            bm.add_request(r.id, _prefix_tokens(r, n, groups))
            first[r.group] = r.id
    for n, r in enumerate(batch):
        if r.group is not None:
            bm.append_tokens(r.id, _tail_tokens(n, r))
    return bm


def partial_prefix_copies(batch, S):
    """Tokens a full-block manager stores beyond the ledger: (members - 1) * (prefix % S) per group."""
    members = defaultdict(int)
    for r in batch:
        if r.group is not None:
            members[(r.group, r.prefix)] += 1
    return sum((m - 1) * (prefix % S) for (_, prefix), m in members.items())


def test_page_witness_agrees_at_block_size_4_both_ways():
    ledger = allocate(PAGE_BATCH, 4)
    for play in (play_as_prompts, play_as_forks):
        bm = play(PAGE_BATCH, 4)
        assert bm.stats().summary() == ledger.summary() == {"logical": 46, "unique": 22, "reserved": 28, "slack": 6}
        assert {r.id: bm.block_table(r.id) for r in PAGE_BATCH} == ledger.tables


def test_page_witness_differs_at_block_size_8_by_the_copied_partial_block():
    # prefix 12 at S=8: one full block (shared) and a partial block holding 4 prefix tokens.
    ledger = allocate(PAGE_BATCH, 8)
    assert ledger.summary() == {"logical": 46, "unique": 22, "reserved": 40, "slack": 18}
    for play in (play_as_prompts, play_as_forks):
        s = play(PAGE_BATCH, 8).stats()
        # same blocks, but A2 and A3 each hold their own copy of the 4 partial-prefix tokens
        assert s.summary() == {"logical": 46, "unique": 30, "reserved": 40, "slack": 10}
    assert play_as_forks(PAGE_BATCH, 8).stats().cow_copies == 2


batches = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 20), st.sampled_from([None, "g1", "g2"])),
                   min_size=1, max_size=8)


def _requests(rows, S, whole_blocks):
    """Ledger requests from drawn rows; all members of a group share one prefix length (>= 1 token):
    whole blocks, or whole blocks plus 1..S-1 tokens that leave the last prefix block partial."""
    lengths, out = {}, []
    for n, (k, tail, group) in enumerate(rows):
        if group is None:
            prefix = k * S
        else:
            prefix = lengths.setdefault(group, (k + 1) * S if whole_blocks else k * S + 1 + k % (S - 1))
        out.append(Request(f"r{n}", prefix, tail, group))
    return out


@given(batches, st.integers(1, 8))
def test_with_whole_block_prefixes_every_figure_agrees_with_the_ledger(rows, S):
    batch = _requests(rows, S, whole_blocks=True)
    ledger = allocate(batch, S)
    for play in (play_as_prompts, play_as_forks):
        assert play(batch, S).stats().summary() == ledger.summary()


@given(batches, st.integers(2, 8))
def test_with_partial_prefix_blocks_unique_tokens_differ_by_the_copies(rows, S):
    batch = _requests(rows, S, whole_blocks=False)
    ledger = allocate(batch, S)
    for play in (play_as_prompts, play_as_forks):
        s = play(batch, S).stats()
        assert s.logical_tokens == ledger.logical_tokens
        assert s.unique_tokens == ledger.unique_tokens + partial_prefix_copies(batch, S)
        assert s.slack == s.reserved_slots - s.unique_tokens
