"""TokenTable and token-scorer microbenchmarks, each against the plain-Python reference in the same run.

Groups: evict + plan + commit over 10^6 live tokens (the reference runs 10^5: rates are per
token); an append step of 256 sequences (one decode token each); sequence churn (16 frees + 16 adds +
a batched append per step, 10^4 resident sequences); scorer throughput (observe + scores + top-k for
one sequence of 4096 live tokens, 8 heads); plan() with a small budget on a 4 M-slot table
with 1 % sparse sequences.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import info, size, warm
from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress import H2OScorer, ScissorhandsScorer, SnapKVScorer, select_victims
from kvmm.testing.models import scorers as naive_scorers
from kvmm.testing.models.block_allocator import NaiveBlockAllocator
from kvmm.testing.models.token_table import NaiveTokenTable

BS = 16


# ------------------------------------------------------------------ evict + plan + commit
def filled(impl, seqs, tokens_per_seq, spare_blocks=0):
    blocks = seqs * (tokens_per_seq // BS + 2) + spare_blocks
    if impl == "kvmm":
        table = TokenTable(BlockAllocator(blocks, BS), initial_sequences=seqs, initial_tokens=seqs * tokens_per_seq)
    else:
        table = NaiveTokenTable(NaiveBlockAllocator(blocks, BS))
    for s in range(seqs):
        table.add_sequence(s)
    table.append(list(range(seqs)), [tokens_per_seq] * seqs)
    return table


def victims(seqs, tokens_per_seq, seed=0):
    """A quarter of every sequence's tokens, chosen at random."""
    rng = np.random.default_rng(seed)
    k = tokens_per_seq // 4
    return np.concatenate([np.sort(rng.choice(tokens_per_seq, size=k, replace=False)) for _ in range(seqs)]), k


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_evict_plan_commit(benchmark, impl):
    benchmark.group = "token table: evict 25% + plan + commit"
    per_seq = 1000
    seqs = size(1000, 2) if impl == "kvmm" else size(100, 2)
    pos, k = victims(seqs, per_seq)
    if impl == "kvmm":
        warm(lambda: (lambda t: (t.evict_many([0], [1], [0]), t.commit(t.plan())))(filled("kvmm", 1, 32)))

        def run(table):
            table.evict_many(np.arange(seqs), np.full(seqs, k), pos)
            return table.commit(table.plan())
    else:
        def run(table):
            for s in range(seqs):
                table.evict(s, pos[s * k:(s + 1) * k])
            return table.commit(table.plan())
    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         "TokenTable (numba)" if impl == "kvmm" else "plain-Python reference", seqs * per_seq, "tokens")
    result = benchmark.pedantic(run, setup=lambda: ((filled(impl, seqs, per_seq),), {}), rounds=3, iterations=1)
    freed = result.num_freed if impl == "kvmm" else len(result[1])
    assert freed == seqs * (-(-per_seq // BS) - -(-(per_seq - k) // BS))


# ------------------------------------------------------------------ full repack, issue-14 size
def repack_ready(impl, seqs, live_per_seq, keep=0.3, seed=0, spare_blocks=0):
    """A table whose sequences keep ``keep`` of their tokens, ``live_per_seq`` live each."""
    per_seq = int(round(live_per_seq / keep))
    table = filled(impl, seqs, per_seq, spare_blocks)
    rng = np.random.default_rng(seed)
    k = per_seq - live_per_seq
    for s in range(seqs):
        pos = np.sort(rng.choice(per_seq, size=k, replace=False))
        if impl == "kvmm":
            table.evict_many([s], [k], pos)
        else:
            table.evict(s, pos.tolist())
    return table


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_full_repack_30pct_kept(benchmark, impl):
    """plan() + commit() of a full repack: 1,024 sequences holding 10^6 live tokens in all, each
    keeping 30 % of what it appended (the reference: 32 sequences, rates are per live token)."""
    benchmark.group = "token table: full repack plan + commit (30% kept, rate per live token)"
    seqs = size(1024, 4) if impl == "kvmm" else size(32, 2)
    live = 977  # 1,024 x 977 ~ 10^6 live tokens
    if impl == "kvmm":
        warm(lambda t: t.commit(t.plan()), repack_ready("kvmm", 2, 64))

    def run(table):
        return table.commit(table.plan())

    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         "TokenTable plan+commit (numba)" if impl == "kvmm" else "plain-Python reference", seqs * live, "live tokens")
    result = benchmark.pedantic(run, setup=lambda: ((repack_ready(impl, seqs, live),), {}),
                                rounds=size(7, 1), iterations=1)
    freed = result.num_freed if impl == "kvmm" else len(result[1])
    per_seq = int(round(live / 0.3))
    assert freed == seqs * (-(-per_seq // BS) - -(-live // BS))


# ------------------------------------------------------------------ a plan on a background thread
@pytest.mark.parametrize("impl", ["with-plan", "alone"])
def test_append_rate_while_planning(benchmark, impl):
    """Main-thread appends (256 sequences, one token each) while another thread runs plan() in a
    loop on a large sparse table, against the same appends with no planner: the plan kernels
    release the GIL, so the ratio stays near 1 when a second core is free."""
    import threading

    benchmark.group = "token table: appends on the main thread while plan() runs on another"
    big = size(256, 4)  # ~2.5 * 10^5 live tokens: a plan takes a few ms, so many overlap the appends
    rounds = size(4000, 5)
    # the sparse table the planner works on (never committed), plus room for every append
    table = repack_ready("kvmm", big, 977 if big > 4 else 64, spare_blocks=256 * (rounds // BS + 4))
    decode = list(range(big, big + 256))
    for s in decode:
        table.add_sequence(s)
    ids = np.array(decode, dtype=np.int64)
    ones = np.ones(256, dtype=np.int64)
    warm(table.append, ids, np.zeros(256, dtype=np.int64))
    warm(table.plan)
    stop = threading.Event()
    plans = [0]

    def planner():
        while not stop.is_set():
            table.plan()
            plans[0] += 1

    thread = threading.Thread(target=planner, daemon=True) if impl == "with-plan" else None
    info(benchmark, "kvmm" if impl == "with-plan" else "baseline",
         "appends during plan()" if impl == "with-plan" else "appends alone", 256, "tokens")
    if thread is not None:
        thread.start()
    try:
        benchmark.pedantic(table.append, args=(ids, ones), rounds=rounds, iterations=1)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    benchmark.extra_info["plans_during_run"] = plans[0]
    if thread is not None:
        print(f"\n{plans[0]} plans ran on the background thread during the timed appends")
        assert plans[0] >= 1
    table.check()


# ------------------------------------------------------------------ plan with a small budget
@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_plan_small_budget_mostly_dense(benchmark, impl):
    """plan(budget=64) on a large table where 1 % of sequences (so ~1 % of blocks) are sparse:
    the cost should follow the sparse part, not the pool (kvmm: 4 M slots; reference: 10x fewer)."""
    benchmark.group = "token table: plan(budget=64), 1% sparse, mostly dense pool"
    per_seq = 1024
    seqs = size(4096, 4) if impl == "kvmm" else size(410, 4)
    table = filled(impl, seqs, per_seq)
    sparse = list(range(0, seqs, 100))
    pos, k = victims(len(sparse), per_seq, seed=1)
    if impl == "kvmm":
        table.evict_many(sparse, [k] * len(sparse), pos)
        warm(table.plan, 64)
    else:
        for i, s in enumerate(sparse):
            table.evict(s, pos[i * k:(i + 1) * k])
    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         "TokenTable.plan" if impl == "kvmm" else "plain-Python reference", seqs * per_seq, "slots")
    plan = benchmark.pedantic(table.plan, args=(64,), rounds=size(20, 1), iterations=1)
    moves = plan.num_moves if impl == "kvmm" else len(plan["src"])
    assert 0 < moves <= 64


# ------------------------------------------------------------------ append step
@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_append_256(benchmark, impl):
    benchmark.group = "token table: append 1 token to 256 sequences"
    seqs = 256
    rounds = size(400, 3)
    ids = list(range(seqs))
    ones = np.ones(seqs, dtype=np.int64) if impl == "kvmm" else [1] * seqs
    blocks = seqs * (rounds // BS + 4)  # room for every round
    if impl == "kvmm":
        table = TokenTable(BlockAllocator(blocks, BS), initial_sequences=seqs)
    else:
        table = NaiveTokenTable(NaiveBlockAllocator(blocks, BS))
    for s in ids:
        table.add_sequence(s)
    if impl == "kvmm":
        ids = np.array(ids, dtype=np.int64)
        warm(table.append, ids, np.zeros(seqs, dtype=np.int64))
    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         "TokenTable.append" if impl == "kvmm" else "plain-Python reference", seqs, "tokens")
    benchmark.pedantic(table.append, args=(ids, ones), rounds=rounds, iterations=1)
    if impl == "kvmm":
        table.check()


# ------------------------------------------------------------------ sequence churn
@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_add_free_churn(benchmark, impl):
    benchmark.group = "token table: add + free sequences (10^4 resident, batched append between)"
    resident = size(10_000, 50)
    steps = size(50, 2)
    per_step = 16

    def setup():
        if impl == "kvmm":
            table = TokenTable(BlockAllocator(resident + 2 * per_step, BS), initial_sequences=resident)
        else:
            table = NaiveTokenTable(NaiveBlockAllocator(resident + 2 * per_step, BS))
        for s in range(resident):
            table.add_sequence(s)
        return (table,), {}

    def run(table):
        # each step: 16 requests finish, 16 arrive, one decode token for the 16 newcomers (a batched call)
        for step in range(steps):
            for s in range(step * per_step, (step + 1) * per_step):
                table.free_sequence(s)
            new = list(range(resident + step * per_step, resident + (step + 1) * per_step))
            for s in new:
                table.add_sequence(s)
            table.append(new, [1] * per_step)
        return table

    if impl == "kvmm":
        warm(run, setup()[0][0])
    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         "TokenTable (lazy index)" if impl == "kvmm" else "plain-Python reference", 2 * steps * per_step,
         "adds+frees")
    table = benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    assert len(table.seqs if impl == "naive" else table) == resident


# ------------------------------------------------------------------ scorer throughput
SCORERS = {
    "H2O": (lambda: H2OScorer(recent_window=64), lambda: naive_scorers.NaiveH2O(64)),
    "Scissorhands": (lambda: ScissorhandsScorer(history_window=8, recent_window=64),
                     lambda: naive_scorers.NaiveScissorhands(8, 64)),
    "SnapKV": (lambda: SnapKVScorer(window_size=4, kernel_size=7), lambda: naive_scorers.NaiveSnapKV(4, 7)),
}


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_scorer_step(benchmark, name, impl):
    benchmark.group = f"scorer: {name} observe + scores + top-k (one sequence)"
    live = size(4096, 64)
    heads, queries = 8, 4
    rng = np.random.default_rng(0)
    attn = rng.dirichlet(np.ones(live), size=(heads, queries))
    make = SCORERS[name][0 if impl == "kvmm" else 1]
    scorer = make()
    scorer.observe(0, attention=attn)
    budget = live  # score and select without shrinking, so every round sees the same sizes
    if impl == "kvmm":
        def step():
            scorer.observe(0, attention=attn)
            return select_victims(scorer.scores(0), budget - 1)
    else:
        def step():
            scorer.observe(0, attention=attn)
            return naive_scorers.naive_victims(scorer.scores(0), budget - 1)
    info(benchmark, "kvmm" if impl == "kvmm" else "baseline",
         f"{name}Scorer (numpy)" if impl == "kvmm" else "plain-Python reference", live, "tokens")
    out = benchmark.pedantic(step, rounds=size(20, 2) if impl == "kvmm" else size(3, 1), iterations=1)
    assert len(out) == 1
