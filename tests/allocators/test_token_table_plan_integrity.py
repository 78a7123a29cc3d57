"""commit() accepts only the plan objects plan() returned, and no plan can make a kernel read out of bounds.

Regression tests for issue 12 ("a hand-made RepackPlan passed to TokenTable.commit segfaults"),
plus the equivalence of commit's two validation paths: a plan committed on an unchanged table
(ref counts re-checked only) and one committed after other changes (every move re-checked).
"""

import dataclasses

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, RepackPlan, TokenTable
from kvmm.errors import BadInputError
from tests.allocators.test_token_table_errors import assert_unchanged


def sparse_table(seed=0, seqs=3, per_seq=23, bs=4):
    rng = np.random.default_rng(seed)
    t = TokenTable(BlockAllocator(seqs * (per_seq // bs + 2) + 4, bs))
    for s in range(seqs):
        t.add_sequence(s)
    t.append(list(range(seqs)), [per_seq] * seqs)
    for s in range(seqs):
        t.evict(s, np.sort(rng.choice(per_seq, size=per_seq // 2, replace=False)))
    return t


def test_hand_made_plan_is_rejected_and_changes_nothing():
    table = sparse_table()
    real = table.plan()
    assert real.num_moves > 0
    # the fields of a real plan, with wild slots: before the fix the kernels read out of bounds
    fields = {f.name: getattr(real, f.name) for f in dataclasses.fields(RepackPlan)}
    fields["src"] = np.full(real.num_moves, 10**12, dtype=np.int64)
    fields["free_blocks"] = np.full(real.num_blocks, 2**30, dtype=np.int32)
    forged = RepackPlan(**fields)
    assert_unchanged(table, lambda: table.commit(forged), BadInputError, "not produced by this table's plan")


def test_altered_copy_of_a_real_plan_is_rejected():
    table = sparse_table()
    real = table.plan()
    altered = dataclasses.replace(real, dst=real.src)  # same plan id, different object
    assert_unchanged(table, lambda: table.commit(altered), BadInputError, "not produced by this table's plan")
    result = table.commit(real)  # the real plan still applies
    assert result.applied == real.num_moves
    table.check()


def test_plan_arrays_tampered_in_place_cannot_crash_commit():
    # Even the real plan object with its arrays made writable and overwritten (deliberate misuse)
    # only drops the bad moves or blocks: every index is bounds-checked in the kernels.
    table = sparse_table()
    plan = table.plan()
    assert plan.num_moves >= 2 and plan.num_blocks >= 1
    for name, value in (("src", 10**12), ("dst", -5), ("move_row", 10**6), ("move_logical", 10**9)):
        arr = getattr(plan, name)
        arr.setflags(write=True)
        arr[0] = value
    plan.free_blocks.setflags(write=True)
    plan.free_blocks[0] = 2**30
    result = table.commit(plan)
    assert 0 in result.dropped.tolist()
    table.check()


@pytest.mark.parametrize("seed", range(6))
def test_commit_on_unchanged_table_equals_fully_checked_commit(seed):
    # Table a commits right after planning (the unchanged-version path); table b makes the same
    # plan, then an unrelated change (a sequence added and freed) forces the per-move checks.
    a, b = sparse_table(seed), sparse_table(seed)
    plan_a, plan_b = a.plan(), b.plan()
    assert np.array_equal(plan_a.src, plan_b.src) and np.array_equal(plan_a.dst, plan_b.dst)
    b.add_sequence(99)
    b.free_sequence(99)
    assert plan_b.table_version != b.version
    ra, rb = a.commit(plan_a), b.commit(plan_b)
    assert ra.applied == rb.applied == plan_a.num_moves
    assert np.array_equal(ra.freed_blocks, rb.freed_blocks)
    for seq in range(3):
        assert np.array_equal(a.slot_mapping(seq), b.slot_mapping(seq))
        assert np.array_equal(a.block_table(seq), b.block_table(seq))
    a.check()
    b.check()


def test_shared_by_the_allocator_after_plan_is_dropped_on_the_unchanged_path():
    # Nothing in the table changed, but another user of the allocator took a reference to a block
    # the plan moves tokens into: those moves must be dropped even on the unchanged-table path.
    table = sparse_table(seed=3)
    plan = table.plan()
    assert plan.num_moves > 0
    dst_block = int(plan.dst[0]) // table.block_size
    table.allocator.touch([dst_block])
    result = table.commit(plan)
    into = np.flatnonzero(plan.dst // table.block_size == dst_block)
    assert set(into.tolist()) <= set(result.dropped.tolist())
    table.check()
    table.allocator.free([dst_block])
    table.check()
