"""The real data path: a KV arena in a RAM tier, copied by commit; every live token keeps its bytes."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import OutOfBlocksError
from kvmm.tiers.arena import ArenaTier

ITEM = (2, 3)  # (K/V, head dim) per slot, enough to tell tokens apart


def token_bytes(seq, logical):
    base = np.float32(seq * 1000 + logical)
    return (base + np.arange(np.prod(ITEM), dtype=np.float32).reshape(ITEM) / 8).astype(np.float32)


ops = st.lists(st.tuples(st.sampled_from(["append", "evict", "plan", "commit", "free", "add"]),
                         st.integers(0, 2**16)), min_size=5, max_size=60)


@given(ops=ops, block_size=st.sampled_from([2, 4, 8]), budget=st.sampled_from([None, 0, 3, 10]))
def test_every_live_token_reads_its_own_bytes(ops, block_size, budget):
    alloc = BlockAllocator(48, block_size)
    tier = ArenaTier(capacity_bytes=1 << 20)
    arena = tier.kv_arena(48, block_size, ITEM, dtype=np.float32)
    table = TokenTable(alloc)
    rng = np.random.default_rng(len(ops))
    next_seq = 0
    plans = []
    for op, arg in ops:
        seqs = table.sequences
        if op == "add" or not seqs:
            table.add_sequence(next_seq)
            next_seq += 1
        elif op == "append":
            chosen = sorted(set(rng.choice(seqs, size=min(len(seqs), 1 + arg % 3), replace=False).tolist()))
            counts = rng.integers(0, 9, size=len(chosen))
            lengths = [table.num_tokens(s) for s in chosen]
            before = table.snapshot()
            try:
                slots = table.append(chosen, counts)
            except OutOfBlocksError:  # the pool is full: nothing may have changed
                after = table.snapshot()
                assert before.keys() == after.keys()
                assert all(np.array_equal(before[key], after[key]) for key in before)
                continue
            values = np.stack([token_bytes(s, n0 + i) for s, c, n0 in zip(chosen, counts, lengths) for i in range(c)]
                              or [np.zeros(ITEM, np.float32)])[:slots.size]
            arena.write(slots, values)
        elif op == "evict":
            s = seqs[arg % len(seqs)]
            live = np.flatnonzero(table.live_mask(s))
            if live.size:
                table.evict(s, rng.choice(live, size=1 + arg % live.size, replace=False))
        elif op == "plan":
            plans.append(table.plan(budget))
        elif op == "commit" and plans:
            plan = plans.pop(arg % len(plans))
            table.commit(plan, copy_slots=lambda src, dst: tier.copy_slots(arena, src, dst))
        elif op == "free":
            table.free_sequence(seqs[arg % len(seqs)])
        table.check()
        for s in table.sequences:
            logical = np.flatnonzero(table.live_mask(s))
            got = arena.read(table.slot_mapping(s))
            want = np.stack([token_bytes(s, i) for i in logical]) if logical.size else got
            np.testing.assert_array_equal(got, want)


def test_full_repack_then_paged_read_sees_exactly_the_live_tokens():
    """An unmodified paged read (block table + context length = live tokens) after a full repack."""
    bs = 4
    alloc = BlockAllocator(64, bs)
    arena = ArenaTier(capacity_bytes=1 << 20).kv_arena(64, bs, ITEM, dtype=np.float32)
    table = TokenTable(alloc)
    rng = np.random.default_rng(0)
    for s in range(5):
        table.add_sequence(s)
    for _ in range(6):
        counts = rng.integers(1, 8, size=5)
        lengths = [table.num_tokens(s) for s in range(5)]
        slots = table.append(range(5), counts)
        arena.write(slots, np.stack([token_bytes(s, n0 + i) for s, c, n0 in zip(range(5), counts, lengths)
                                     for i in range(c)]))
        for s in range(5):
            live = np.flatnonzero(table.live_mask(s))
            table.evict(s, rng.choice(live, size=live.size // 2, replace=False))
    used_before = alloc.num_blocks - alloc.num_free
    plan = table.plan()
    result = table.commit(plan, copy_slots=arena.copy_slots)
    assert result.applied == plan.num_moves and result.num_freed == plan.num_blocks > 0
    assert alloc.num_blocks - alloc.num_free == used_before - plan.num_blocks
    for s in range(5):
        assert table.is_dense(s)
        live = table.num_live(s)
        blocks = table.block_table(s)
        assert blocks.size == -(-live // bs)
        paged = arena.data[blocks].reshape(-1, *ITEM)[:live]  # what an unmodified kernel reads
        want = np.stack([token_bytes(s, i) for i in np.flatnonzero(table.live_mask(s))])
        # attention is order-free over keys: compare as sets of rows
        def rows(a):
            return sorted(map(tuple, a.reshape(a.shape[0], -1).tolist()))

        assert rows(paged) == rows(want)
