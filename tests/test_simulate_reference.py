"""The simulator skips quiet steps; a plain token-by-token simulator must give the same series.

The reference below visits every step, appends one token per running sequence per step
(so the block manager always holds exactly the true tokens, and caches a block the step it
fills) and reads the memory categories straight from the block manager's and the arena's
own ledgers. It shares only the scheduling rules with the simulator: first come first
served; a head that did not fit is retried only after memory was released or preempted
(a failed attempt can leave the prefix cache reordered, so the schedule of attempts is part
of the rules); without sharing, a request is tried only if its exact block need is free.
The fast simulator must agree with it at every step, for every series.
"""
from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_lib.allocator import BlockManager
from pagedkv_lib.accounting import ModelSpec
from pagedkv_lib.contiguous import ContiguousArena, reservation_slots
from pagedkv_lib.errors import OutOfBlocksError
from pagedkv_lib.sim_token_ids import TokenIds
from pagedkv_lib.simulate import CATEGORIES, simulate
from pagedkv_lib.workloads import make_trace, parallel_sampling, shared_prefix


def reference_paged(trace, N, S, sharing, watermark, max_batch, arrival_step):
    bm = BlockManager(N, S, enable_prefix_caching=sharing)
    ids = TokenIds(trace)
    R, n = trace.output_len.shape
    p = trace.prompt_len.tolist()
    final = trace.final_len.tolist()
    progress = [[0] * n for _ in range(R)]
    waiting, running = deque(), []  # running: [r, {j: name}] in admission order
    rows, t, arrived, done, names = [], 0, 0, 0, 0
    blocked = False
    completed, preempted, admitted = [], [], []

    def token(r, j, pos):
        return ids.ids(r, j, pos, pos + 1)[0]

    def drop(group, t_now, appended):
        r, seqs = group
        for j, name in seqs.items():
            T = bm.num_tokens(name) - (name in appended)
            progress[r][j] = T - p[r]
            bm.free(name)
        running.remove(group)
        preempted.append(t_now)
        waiting.appendleft(r)
        return True

    while done < R:
        appended = set()  # sequences that wrote this step's token
        for group in list(running):  # 1. release sequences that finished at t - 1
            r, seqs = group
            for j, name in list(seqs.items()):
                if bm.num_tokens(name) == final[r][j]:
                    bm.free(name)
                    del seqs[j]
                    blocked = False
            if not seqs:
                running.remove(group)
                completed.append(t - 1)
                done += 1
        while arrived < R and arrival_step[arrived] <= t:  # 2. arrivals
            blocked = blocked and bool(waiting)
            waiting.append(arrived)
            arrived += 1
        while waiting and not blocked:  # 3. admission, first come first served
            r = waiting[0]
            if sum(len(g[1]) for g in running) + n > max_batch:
                blocked = True
                break
            todo = [j for j in range(n) if progress[r][j] < trace.output_len[r, j]]
            exact = sum((p[r] + progress[r][j]) // S + 1 for j in todo)
            if bm.num_free_blocks - watermark < (1 if sharing else exact):
                blocked = True
                break
            seqs, fork_from = {}, None
            try:
                for j in range(n):
                    if progress[r][j] == trace.output_len[r, j]:
                        continue
                    names += 1
                    name = f"ref{names}"
                    start = p[r] + progress[r][j]
                    if fork_from is not None:
                        bm.fork(fork_from, name)
                    else:
                        bm.add_request(name, list(ids.ids(r, j, 0, start)))
                        if sharing and not any(progress[r]):
                            fork_from = name
                    seqs[j] = name
                for j, name in seqs.items():
                    bm.append_tokens(name, [token(r, j, bm.num_tokens(name))])
                if bm.num_free_blocks < watermark:
                    raise OutOfBlocksError("watermark")
            except OutOfBlocksError:
                for name in seqs.values():
                    bm.free(name)
                blocked = True
                break
            waiting.popleft()
            running.append([r, seqs])
            admitted.append(t)
            appended.update(seqs.values())
        for group in list(running):  # 4. every running sequence writes one token
            if group not in running:
                continue
            r, seqs = group
            for j, name in list(seqs.items()):
                if name in appended:
                    continue
                while True:
                    try:
                        bm.append_tokens(name, [token(r, j, bm.num_tokens(name))])
                        appended.add(name)
                        break
                    except OutOfBlocksError:
                        victim = running[-1]
                        blocked = not drop(victim, t, appended)
                        if victim is group:
                            break
                if group not in running:
                    break
        st_ = bm.stats()
        rows.append(dict(step=t, running=len(running), running_seqs=sum(len(g[1]) for g in running),
                         used_blocks=st_.used_blocks, table_blocks=sum(len(bm.block_table(nm)) for g in running
                                                                        for nm in g[1].values()),
                         logical_tokens=st_.logical_tokens, token_states=st_.unique_tokens, slack=st_.slack,
                         free=st_.free_blocks * S))
        bm.check_invariants()
        t += 1
    return rows, completed, preempted, admitted


@st.composite
def small_traces(draw):
    R = draw(st.integers(1, 12))
    prompt = draw(st.lists(st.integers(1, 40), min_size=R, max_size=R))
    output = draw(st.lists(st.integers(1, 40), min_size=R, max_size=R))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.05, 0.2, 1.0]), min_size=R, max_size=R))
    trace = make_trace(prompt, output, arrival_s=np.cumsum(gaps), max_context=2048)
    if draw(st.booleans()):
        trace = shared_prefix(trace, draw(st.integers(1, 20)), num_prefixes=draw(st.integers(1, 2)),
                              seed=draw(st.integers(0, 9)))
    n = draw(st.sampled_from([1, 1, 2, 3]))
    if n == 1:
        return trace
    return parallel_sampling(trace, n, independent_lengths=draw(st.booleans()), seed=draw(st.integers(0, 9)))


def _dense(rows, completed, preempted, admitted, num_steps):
    out = {}
    for key in rows[0]:
        if key != "step":
            out[key] = np.zeros(num_steps, dtype=np.int64)
            for row in rows:
                if row["step"] < num_steps:
                    out[key][row["step"]] = row[key]
    for name, steps in (("completed", completed), ("preempted", preempted), ("admitted", admitted)):
        out[name] = np.bincount(np.asarray(steps, dtype=np.int64), minlength=num_steps)[:num_steps]
    return out


@settings(max_examples=60, deadline=None)
@given(trace=small_traces(), S=st.sampled_from([1, 2, 4, 16]), sharing=st.booleans(),
       spare=st.integers(0, 30), watermark=st.sampled_from([0.0, 0.1]), max_batch=st.sampled_from([4, 256]))
def test_paged_series_equal_a_token_by_token_run(trace, S, sharing, spare, watermark, max_batch):
    need = int(((trace.final_len + S - 1) // S).sum(axis=1).max())
    N = need + spare + (-(-(need + spare) // 9) + 1 if watermark else 0)  # 90% of N still fits the largest
    max_batch = max(max_batch, trace.num_samples)
    policy = "paged+sharing" if sharing else "paged"
    result = simulate(trace, policy, num_blocks=N, block_size=S, watermark=watermark, max_batch=max_batch,
                      progress=False)
    arrival_step = np.ceil((trace.arrival_s - trace.arrival_s[0]) / 0.05 - 1e-9).astype(np.int64)  # 0: first arrival
    rows, completed, preempted, admitted = reference_paged(trace, N, S, sharing, int(watermark * N), max_batch,
                                                           arrival_step)
    ref = _dense(rows, completed, preempted, admitted, result.num_steps)
    for key, values in ref.items():
        assert np.array_equal(result.series[key], values), key
    total = sum(result.series[c] for c in CATEGORIES)
    assert np.all(total == N * S)


def reference_contiguous(trace, capacity, policy, context, max_batch, arrival_step):
    arena = ContiguousArena(capacity, policy, context)
    R, n = trace.output_len.shape
    p, final = trace.prompt_len.tolist(), trace.final_len.tolist()
    waiting, running, rows = deque(), {}, []
    t, arrived, done = 0, 0, 0
    while done < R:
        for r in list(running):
            for j in list(running[r]):
                if arena.placement(f"{r}.{j}")[2] == final[r][j]:
                    arena.release(f"{r}.{j}")
                    running[r].remove(j)
            if not running[r]:
                del running[r]
                done += 1
        while arrived < R and arrival_step[arrived] <= t:
            waiting.append(arrived)
            arrived += 1
        while waiting and sum(map(len, running.values())) + n <= max_batch:
            r = waiting[0]
            placed = []
            try:
                for j in range(n):
                    arena.admit(f"{r}.{j}", p[r], final[r][j])
                    placed.append(j)
            except OutOfBlocksError:
                for j in placed:
                    arena.release(f"{r}.{j}")
                break
            waiting.popleft()
            running[r] = placed  # their step-t token is written with everyone else's below
        for r, js in running.items():
            for j in js:
                start, size, live, fin = arena.placement(f"{r}.{j}")
                if live < fin:
                    arena.grow(f"{r}.{j}")
        head = max(final[waiting[0]]) if waiting else None
        cats = arena.categories(head)
        arena.check_invariants()
        rows.append(dict(step=t, running=len(running), **cats))
        t += 1
    return rows


@settings(max_examples=40, deadline=None)
@given(trace=small_traces(), policy=st.sampled_from(["max", "pow2", "oracle"]), extra=st.integers(0, 200),
       max_batch=st.sampled_from([4, 256]))
def test_contiguous_series_equal_a_token_by_token_run(trace, policy, extra, max_batch):
    context = 128
    max_batch = max(max_batch, trace.num_samples)
    need = max(sum(reservation_slots(policy, int(f), context) for f in row) for row in trace.final_len)
    capacity = need + extra
    result = simulate(trace, policy, model=_tiny_model(context), num_blocks=capacity, block_size=1,
                      max_batch=max_batch, progress=False)
    arrival_step = np.ceil((trace.arrival_s - trace.arrival_s[0]) / 0.05 - 1e-9).astype(np.int64)  # 0: first arrival
    rows = reference_contiguous(trace, capacity, policy, context, max_batch, arrival_step)
    for key in ("running", "token_states", "reservation", "internal_fragmentation", "external_fragmentation",
                "free"):
        ref = np.zeros(result.num_steps, dtype=np.int64)
        for row in rows:
            if row["step"] < result.num_steps:
                ref[row["step"]] = row[key]
        assert np.array_equal(result.series[key], ref), key


def _tiny_model(context):
    return ModelSpec("tiny", 1, 1, 8, max_context=context)
