"""TokenTable semantics with pinned, hand-computed expectations (the docstring's worked example, ...)."""

import numpy as np
import pytest

from kvmm import errors as kvmm_errors
from kvmm.allocators import BlockAllocator, TokenTable


def example_table():
    alloc = BlockAllocator(16, 4)
    alloc.allocate(16)
    alloc.free(np.setdiff1d(np.arange(16, dtype=np.int32), [9, 2, 5]))
    alloc.free(np.array([9, 2, 5], dtype=np.int32))  # uncached blocks go to the head: 9, 2, 5 next
    table = TokenTable(alloc)
    table.add_sequence(7)
    return alloc, table


def test_worked_example_from_the_docstring():
    alloc, table = example_table()
    slots = table.append([7], [10])
    assert slots.tolist() == [36, 37, 38, 39, 8, 9, 10, 11, 20, 21]
    assert table.block_table(7).tolist() == [9, 2, 5]
    table.evict(7, [4, 5, 6])
    assert table.live_mask(7).tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 1, 1]
    assert table.num_blocks(7) == 3  # evicting frees nothing by itself
    plan = table.plan()
    assert plan.src.tolist() == [11] and plan.dst.tolist() == [22]
    assert plan.free_blocks.tolist() == [2] and plan.tail_blocks.tolist() == [5] and plan.min_moves == 1
    assert table.slot_mapping(7).tolist() == [36, 37, 38, 39, 11, 20, 21]  # plan changes no mapping
    free_before = alloc.num_free
    result = table.commit(plan)
    assert result.applied == 1 and result.dropped.size == 0 and result.freed_blocks.tolist() == [2]
    assert alloc.num_free == free_before + 1
    assert table.slot_mapping(7, live_only=False).tolist() == [36, 37, 38, 39, -1, -1, -1, 22, 20, 21]
    assert table.block_table(7).tolist() == [9, 5]
    assert table.positions(7).tolist() == [0, 1, 2, 3, 7, 8, 9]
    assert table.is_dense(7)
    table.check()


def test_append_continues_densely_after_repack():
    alloc, table = example_table()
    table.append([7], [10])
    table.evict(7, [4, 5, 6])
    table.commit(table.plan())
    head = int(alloc.free_queue()[0])
    assert table.append([7], [2]).tolist() == [23, head * 4]  # fills block 5, then a new block
    assert table.is_dense(7) and table.num_tokens(7) == 12 and table.num_live(7) == 9
    table.check()


def test_budget_takes_cheapest_blocks_across_sequences_first():
    alloc = BlockAllocator(32, 4)
    table = TokenTable(alloc)
    for s in (1, 2):
        table.add_sequence(s)
    table.append([1, 2], [16, 16])  # 4 full blocks each
    table.evict(1, [0, 1, 2, 4, 5])  # seq 1: blocks hold 1, 2, 4, 4 live -> 11 live, keep 3: free block 0 (cost 1)
    table.evict(2, [0, 1, 4, 5, 8, 9, 12])  # seq 2: 2, 2, 2, 3 live -> 9 live, keep 3: free a 2-live block (cost 2)
    b1, b2 = table.block_table(1), table.block_table(2)
    plan = table.plan(budget=1)
    assert plan.free_blocks.tolist() == [b1[0]] and plan.num_moves == 1 and plan.min_moves == 1
    assert plan.tail_blocks.size == 0  # no budget left to densify seq 1's partial block (it needs 2 moves)
    plan = table.plan(budget=3)
    assert sorted(plan.free_blocks.tolist()) == sorted([b1[0], b2[2]])  # later block first on equal cost
    assert plan.min_moves == 3 and plan.num_moves == 3
    full = table.plan()
    assert full.num_blocks == 2 and full.min_moves == 3
    table.commit(full)
    assert table.is_dense(1) and table.is_dense(2)
    assert table.block_counts([1, 2]).tolist() == [3, 3] and table.live_counts([1, 2]).tolist() == [11, 9]
    table.check()


def test_budget_zero_still_returns_blocks_that_are_all_dead():
    alloc = BlockAllocator(8, 2)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [6])
    table.evict(0, [0, 1, 3])
    plan = table.plan(budget=0)
    assert plan.num_moves == 0 and plan.free_blocks.tolist() == [table.block_table(0)[0]]
    table.commit(plan)
    assert table.num_blocks(0) == 2 and alloc.num_free == 6
    table.check()


def test_evict_many_matches_single_evicts():
    tables = []
    for _ in range(2):
        t = TokenTable(BlockAllocator(16, 4))
        for s in (3, 4):
            t.add_sequence(s)
        t.append([3, 4], [7, 5])
        tables.append(t)
    tables[0].evict_many([3, 4], [2, 1], [0, 6, 2])
    tables[1].evict(3, [6, 0])
    tables[1].evict(4, [2])
    for s in (3, 4):
        assert tables[0].slot_mapping(s).tolist() == tables[1].slot_mapping(s).tolist()
    assert tables[0].total_live == 9


def test_shared_prefix_is_never_repacked_and_stays_allocated():
    alloc = BlockAllocator(16, 4)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [10])  # blocks p0, p1 full, third partial
    prefix = table.block_table(0)[:2]
    table.add_sequence(1, shared_blocks=prefix, first_position=0)
    assert alloc.ref_counts[prefix].tolist() == [2, 2]
    assert table.num_tokens(1) == 8 and table.slot_mapping(1).tolist() == table.slot_mapping(0)[:8].tolist()
    assert table.shared_mask(1).tolist() == [True] * 8
    table.append([1], [6])
    table.evict(1, [1, 2, 3, 9, 10])  # dead tokens inside the shared block stay where they are
    table.evict(0, [5, 6])
    plan = table.plan()
    moved_blocks = set((plan.src // 4).tolist()) | set((plan.dst // 4).tolist())
    assert not moved_blocks & set(prefix.tolist())
    table.commit(plan)
    assert table.block_table(1)[:2].tolist() == prefix.tolist()
    table.free_sequence(0)
    assert alloc.ref_counts[prefix].tolist() == [1, 1]  # sequence 1 still holds the prefix
    table.check()
    table.free_sequence(1)
    assert alloc.num_free == 16
    table.check()


def test_blocks_with_outside_references_are_pinned():
    alloc = BlockAllocator(8, 2)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [6])
    table.evict(0, [0, 2, 4])  # every block half dead: a full repack would free one
    b = table.block_table(0)
    alloc.touch(b)  # e.g. a prefix-cache hit elsewhere holds all three
    assert table.plan().num_blocks == 0
    alloc.free(b)
    assert table.plan().num_blocks == 1


def test_stale_plan_moves_are_dropped_and_reported():
    alloc = BlockAllocator(16, 4)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [12])
    table.evict(0, [0, 1, 2, 5, 6])
    plan = table.plan()  # empties block 0 (1 live: logical 3), densifies
    assert plan.move_logical.tolist()[0] == 3
    table.evict(0, [3])  # the token the plan meant to move died meanwhile
    result = table.commit(plan)
    assert 0 in result.dropped.tolist() and result.applied == plan.num_moves - result.dropped.size
    assert result.freed_blocks.tolist() == plan.free_blocks.tolist()  # block 0 is empty anyway
    table.check()


def test_free_sequence_returns_blocks_last_first():
    alloc = BlockAllocator(8, 2)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [5])
    blocks = table.block_table(0).tolist()
    table.free_sequence(0)
    assert alloc.free_queue()[:3].tolist() == blocks[::-1]  # freed last-first: the tail block is reused first
    assert 0 not in table and len(table) == 0 and table.total_blocks == 0
    table.check()


def test_rows_and_pools_grow_and_compact():
    alloc = BlockAllocator(4096, 4)
    table = TokenTable(alloc, initial_sequences=1, initial_tokens=4)
    rng = np.random.default_rng(3)
    alive = []
    for step in range(40):
        table.add_sequence(step)
        alive.append(step)
        table.append(alive, rng.integers(0, 30, size=len(alive)))
        if step % 3 == 2:
            table.free_sequence(alive.pop(0))
    table.check()
    assert table.row_seq.shape[0] >= len(alive)


@pytest.mark.parametrize("num_blocks", [16, 64])  # sparse rows hold >= half the pool (copied whole) / < half (gathered)
def test_plan_of_mixed_dense_and_sparse_rows_matches_the_reference(num_blocks):
    """plan() copies only rows with sparse blocks; dense rows (full, partial tail, shared prefix,
    a block another holder references) must still get exactly the reference plan, tails included."""
    from kvmm.testing.models.token_table import NaiveTokenTable

    def build(table):
        for s in range(6):
            table.add_sequence(s)
        table.append(list(range(6)), [8, 6, 16, 9, 12, 4])  # block_size 4
        table.add_sequence(6, shared_blocks=[int(b) for b in table.block_table(2)][:2])
        table.append([6], [3])
        table.evict(1, [0, 1, 2, 3, 4])  # seq 1: one live token in its 2nd block: sparse
        table.evict(3, [8])  # seq 3: its 3rd block is empty: freed at no cost
        table.evict(4, [4, 5])  # seq 4: a hole inside a block, no block to free: densified
        table.evict(5, [3])  # seq 5: a dead last slot (fill 4, 3 live): planned, no move
        return table

    real = build(TokenTable(BlockAllocator(num_blocks, 4)))
    model = build(NaiveTokenTable(BlockAllocator(num_blocks, 4)))
    real.allocator.touch(np.array(real.block_table(0)[:1], dtype=np.int32))  # another holder: seq 0's first block stays put
    model.alloc.touch(np.array(model.block_table(0)[:1], dtype=np.int32))
    for budget in (None, 0, 1, 2, 3):
        plan = real.plan(budget)
        assert plan.num_moves > 0 or budget == 0
        expect = model.plan(budget)
        assert plan.src.tolist() == expect["src"] and plan.dst.tolist() == expect["dst"]
        assert plan.free_blocks.tolist() == [b for b, _ in expect["free"]]
        assert plan.tail_blocks.tolist() == [b for b, _ in expect["tails"]]
        assert plan.tail_rows.tolist() == [model.seqs[q]["row"] for _, q in expect["tails"]]
        assert plan.min_moves == expect["min_moves"]
    # dense rows 0, 2, 6 (planned from counters alone) and 5 appear as tails of a full plan
    full = real.plan()
    assert {0, 2, 5, 6} <= {int(r) for r in full.tail_rows}
    real.check()


def test_block_tables_batched_equal_one_call_per_sequence():
    t = TokenTable(BlockAllocator(64, 4))
    for s in (5, 9, 2, 7):
        t.add_sequence(s)
    t.append([5, 9, 2, 7], [9, 0, 13, 4])
    t.evict(2, [0, 1, 2, 3, 4, 5])
    t.commit(t.plan())
    offsets, ids = t.block_tables([7, 2, 9, 5])
    assert offsets.tolist() == [0, 1, 3, 3, 6]
    for i, s in enumerate([7, 2, 9, 5]):
        assert ids[offsets[i]:offsets[i + 1]].tolist() == t.block_table(s).tolist()
    with pytest.raises(kvmm_errors.UnknownSequenceError):
        t.block_tables([5, 11])
