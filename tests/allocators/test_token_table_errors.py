"""Bad input raises a clear KvmmError and leaves the table (and its allocator) exactly as before."""

import gc

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import (
    BadInputError,
    DoubleFreeError,
    DTypeError,
    InvalidIdError,
    KvmmError,
    OutOfBlocksError,
    ShapeError,
    StalePlanError,
    UnknownSequenceError,
)


@pytest.fixture
def table():
    t = TokenTable(BlockAllocator(8, 4))
    t.add_sequence(1)
    t.add_sequence(2)
    t.append([1, 2], [6, 3])
    t.evict(1, [0, 5])
    return t


def assert_unchanged(table, call, error, match=None):
    before = table.snapshot()
    with pytest.raises(error, match=match) as info:
        call()
    assert isinstance(info.value, KvmmError)
    after = table.snapshot()
    assert before.keys() == after.keys()
    for key in before:
        assert np.array_equal(before[key], after[key]), f"{key} changed by a failing call"
    table.check()
    return info.value


@pytest.mark.parametrize("call", [
    lambda t: t.append([9], [1]),
    lambda t: t.append([1, 9], [1, 1]),
    lambda t: t.evict(9, [0]),
    lambda t: t.free_sequence(9),
    lambda t: t.block_table(9),
    lambda t: t.slot_mapping(9),
    lambda t: t.positions(9),
    lambda t: t.live_mask(9),
    lambda t: t.num_live(9),
])
def test_unknown_sequence(table, call):
    err = assert_unchanged(table, lambda: call(table), UnknownSequenceError)
    assert "sequence 9 is not registered" in str(err)


@pytest.mark.parametrize("call,error,match", [
    (lambda t: t.evict(1, [6]), InvalidIdError, r"out of range; expected positions in \[0, 6\)"),
    (lambda t: t.evict(1, [-1]), InvalidIdError, "out of range"),
    (lambda t: t.evict(1, [0]), InvalidIdError, "already dead"),
    (lambda t: t.evict(1, [1, 2, 5]), InvalidIdError, "already dead"),
    (lambda t: t.evict(1, [2, 2]), InvalidIdError, "is repeated"),
    (lambda t: t.evict(1, [1.0]), DTypeError, "integers"),
    (lambda t: t.evict(1, [[1]]), ShapeError, "1-dimensional"),
    (lambda t: t.evict_many([1, 2], [1], [1]), ShapeError, "one entry per sequence"),
    (lambda t: t.evict_many([1, 2], [1, 1], [1]), ShapeError, "sum"),
    (lambda t: t.append([1], [-1]), BadInputError, ">= 0"),
    (lambda t: t.append([1], [1, 2]), ShapeError, "one entry per sequence"),
    (lambda t: t.append([1, 1], [1, 1]), BadInputError, "repeats a sequence"),
    (lambda t: t.append([1], [1.5]), DTypeError, "integers"),
    (lambda t: t.append([1.0], [1]), DTypeError, "integers"),
    (lambda t: t.append([1, 2], [10, 30]), OutOfBlocksError, "appending 40 tokens needs 10 new blocks; the allocator has 5 free"),
    (lambda t: t.add_sequence(1), BadInputError, "already registered"),
    (lambda t: t.add_sequence("x"), DTypeError, "seq_id must be an integer"),
    (lambda t: t.add_sequence(3, first_position=1.5), DTypeError, "first_position"),
    (lambda t: t.add_sequence(3, first_position=-1), BadInputError, "first_position must be >= 0"),
    (lambda t: t.add_sequence(3, shared_blocks=[8]), InvalidIdError, r"expected ids in \[0, 8\)"),
    (lambda t: t.add_sequence(3, shared_blocks=[5, 5]), BadInputError, "twice"),
    (lambda t: t.add_sequence(3, shared_blocks=[0]), InvalidIdError, "not full of live tokens"),
    (lambda t: t.plan(-1), BadInputError, "budget"),
    (lambda t: t.plan(1.5), BadInputError, "budget"),
    (lambda t: t.commit("plan"), BadInputError, "RepackPlan"),
])
def test_bad_input(table, call, error, match):
    assert_unchanged(table, lambda: call(table), error, match)


def test_plan_of_another_table_is_stale(table):
    other = TokenTable(BlockAllocator(8, 4))
    other.add_sequence(1)
    other.append([1], [3])
    plan = other.plan()
    assert_unchanged(table, lambda: table.commit(plan), StalePlanError, "belongs to token table")


def test_commit_twice_is_stale(table):
    plan = table.plan()
    assert plan.num_moves > 0
    table.commit(plan)
    err = assert_unchanged(table, lambda: table.commit(plan), StalePlanError, "already committed")
    assert f"plan {plan.plan_id}" in str(err)


def test_plan_bookkeeping_does_not_grow_with_plans_made_and_dropped(table):
    held = table.plan()
    for _ in range(50):
        table.plan()  # made and dropped, never committed
    for _ in range(50):
        table.commit(table.plan())  # committed and dropped
    gc.collect()
    assert list(table.issued_plans.keys()) == [held.plan_id] and len(table.committed_plans) == 0
    table.commit(held)
    err = assert_unchanged(table, lambda: table.commit(held), StalePlanError, "already committed")
    assert f"plan {held.plan_id}" in str(err)


def test_failing_copy_changes_nothing_and_plan_stays_usable(table):
    plan = table.plan()

    def broken_copy(src, dst):
        raise BadInputError("device copy failed")

    assert_unchanged(table, lambda: table.commit(plan, copy_slots=broken_copy), BadInputError, "device copy failed")
    result = table.commit(plan)
    assert result.applied == plan.num_moves and result.num_freed == plan.num_blocks
    table.check()


def test_allocator_double_free_in_free_sequence_changes_nothing():
    alloc = BlockAllocator(4, 2)
    t = TokenTable(alloc)
    t.add_sequence(1)
    t.append([1], [3])
    alloc.free(t.block_table(1)[:1])  # someone else wrongly drops our reference
    before = t.snapshot()
    with pytest.raises(DoubleFreeError, match="nothing was freed"):
        t.free_sequence(1)
    after = t.snapshot()  # not assert_unchanged: the outside free leaves check() failing on purpose
    assert before.keys() == after.keys()
    for key in before:
        assert np.array_equal(before[key], after[key]), key


def test_not_an_allocator():
    with pytest.raises(BadInputError, match="BlockAllocator"):
        TokenTable(object())
