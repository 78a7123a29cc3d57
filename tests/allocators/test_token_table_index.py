"""The lazily merged sequence index (batched lookups) and ``context_lengths``, with pinned values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import BadInputError, UnknownSequenceError
from kvmm.testing.allocator_machine import assert_same_snapshot


def rows_by_dict(table, seqs):
    return [table.row_of[q] for q in seqs]


def test_adds_and_frees_are_merged_by_the_next_batched_lookup():
    table = TokenTable(BlockAllocator(64, 4), initial_sequences=2)
    for q in range(10):
        table.add_sequence(q)
    assert table.index_touched == list(range(10)) and table.seq_sorted.size == 0  # nothing merged yet
    table.append(list(range(10)), [1] * 10)  # a short list of ints: dict lookups, no merge
    assert table.index_touched == list(range(10))
    table.append(np.arange(10), np.ones(10, dtype=np.int64))  # first array lookup merges all ten
    assert table.index_touched == []
    assert table.seq_sorted.tolist() == list(range(10))
    assert table.seq_sorted_rows.tolist() == rows_by_dict(table, range(10))
    for q in (0, 4, 8):
        table.free_sequence(q)
    table.add_sequence(4)  # re-added id, takes a freed row (possibly its old one)
    table.add_sequence(-3)
    table.add_sequence(100)
    table.free_sequence(100)  # added and freed before any merge
    table.check()  # check() merges a view of the pending changes without storing it
    assert table.seq_sorted.size == 10  # still the old, stale arrays
    seqs = [9, -3, 4, 1, 7]
    assert table.live_counts(seqs).tolist() == [2, 0, 0, 2, 2]  # short list: dict lookups
    assert table.seq_sorted.size == 10
    assert table.live_counts(np.array(seqs)).tolist() == [2, 0, 0, 2, 2]  # array: through the index
    assert table.seq_sorted.tolist() == [-3, 1, 2, 3, 4, 5, 6, 7, 9]
    assert table.seq_sorted_rows.tolist() == rows_by_dict(table, table.seq_sorted.tolist())
    with pytest.raises(UnknownSequenceError, match="sequence 8 is not registered"):
        table.live_counts(np.array([1, 8]))
    with pytest.raises(UnknownSequenceError, match="sequence 8 is not registered"):
        table.live_counts([1, 8])  # the short-list path defers to the general one for the error
    with pytest.raises(BadInputError, match="repeats a sequence"):
        table.live_counts([1, 1])
    with pytest.raises(UnknownSequenceError, match="sequence 100 is not registered"):
        table.append([100], [1])
    table.check()


def test_a_failing_batched_lookup_leaves_the_snapshot_unchanged_although_it_merges():
    table = TokenTable(BlockAllocator(16, 4))
    table.add_sequence(1)
    table.append(np.array([1]), np.array([3]))  # an array batch: merges the index
    table.add_sequence(2)
    table.free_sequence(1)
    before = table.snapshot()
    assert table.index_touched == [2, 1]
    with pytest.raises(UnknownSequenceError):
        table.append([2, 1], [1, 1])
    assert table.index_touched == []  # merged ...
    after = table.snapshot()
    for key in before:  # ... but the map it holds is the same, and nothing else changed
        assert np.array_equal(before[key], after[key]), key


@given(st.lists(st.tuples(st.sampled_from(["add", "free", "lookup"]), st.integers(-4, 12)), max_size=60))
def test_batched_lookups_agree_with_the_dict_after_any_add_free_sequence(ops):
    table = TokenTable(BlockAllocator(8, 2), initial_sequences=1)
    for op, q in ops:
        if op == "add" and q not in table:
            table.add_sequence(q)
        elif op == "free" and q in table:
            table.free_sequence(q)
        elif op == "lookup" and len(table):
            seqs = sorted(table.sequences, key=lambda s: (s * 7919) % 13)
            assert table.context_lengths(seqs).tolist() == [0] * len(seqs)  # short list: dict lookups
            assert table.live_counts(seqs).tolist() == [0] * len(seqs)
            assert table.context_lengths(np.array(seqs, dtype=np.int64)).tolist() == [0] * len(seqs)
            assert table.seq_sorted.tolist() == sorted(table.sequences)
            assert table.seq_sorted_rows.tolist() == rows_by_dict(table, sorted(table.sequences))
    table.check()


def test_context_lengths_naive_evict_vs_repack():
    # block size 4; sequence 1 appends 10 tokens (blocks of 4, 4, 2), sequence 2 appends 4, sequence 3 none
    table = TokenTable(BlockAllocator(16, 4))
    for q in (1, 2, 3):
        table.add_sequence(q)
    table.append([1, 2], [10, 4])
    assert table.context_lengths([1, 2, 3]).tolist() == [10, 4, 0]
    table.evict(1, [0, 1, 2, 4, 5, 6, 8])  # 3 live tokens (logical 3, 7, 9), one per block
    assert table.context_lengths([1]).tolist() == [10]  # naive: the kernel still reads all 10 slots
    table.evict(2, [0, 1, 2, 3])
    table.commit(table.plan(budget=0))  # frees only the empty block of sequence 2
    assert table.context_lengths([1, 2]).tolist() == [10, 0]
    table.commit(table.plan())  # full repack: 3 live tokens in one block, dense
    assert table.is_dense(1) and table.num_blocks(1) == 1
    assert table.context_lengths([1]).tolist() == [3]
    table.append([1], [2])  # appends continue after the live tokens
    assert table.context_lengths([1]).tolist() == [5]


def test_context_lengths_count_a_shared_prefix_block_in_full():
    alloc = BlockAllocator(8, 4)
    table = TokenTable(alloc)
    table.add_sequence(1)
    table.append([1], [4])
    table.add_sequence(2, shared_blocks=table.block_table(1))
    assert table.context_lengths([2, 1]).tolist() == [4, 4]
    table.append([2], [1])
    assert table.context_lengths([2]).tolist() == [5]


@pytest.mark.parametrize("batch", [2, 40])  # a sort for small batches, a count per row for large ones
def test_a_repeated_sequence_in_a_batch_is_rejected_by_both_duplicate_checks(batch):
    table = TokenTable(BlockAllocator(64, 4))
    for q in range(40):
        table.add_sequence(q)
    seqs = list(range(batch - 1)) + [0]
    before = table.snapshot()
    with pytest.raises(BadInputError, match="repeats a sequence"):
        table.append(seqs, [1] * batch)
    after = table.snapshot()
    assert_same_snapshot(before, after)
    assert table.live_counts(list(range(batch))).tolist() == [0] * batch  # distinct ids pass


def test_context_lengths_stop_at_the_last_live_token():
    # block size 2: 4 tokens in two blocks; the last token dies: a kernel needs only 3 slots
    table = TokenTable(BlockAllocator(4, 2))
    table.add_sequence(1)
    table.append([1], [4])
    table.evict(1, [3])
    assert table.context_lengths([1]).tolist() == [3] and table.is_dense(1)
    table.evict(1, [2])  # the last block holds nothing live: it no longer counts
    assert table.context_lengths([1]).tolist() == [2]
    table.evict(1, [0, 1])
    assert table.context_lengths([1]).tolist() == [0]


def test_context_lengths_inside_a_shared_block_follow_the_sequence_view():
    table = TokenTable(BlockAllocator(4, 2))
    table.add_sequence(1)
    table.append([1], [2])
    table.add_sequence(2, shared_blocks=table.block_table(1))  # block of 1 becomes read-only for both
    table.evict(1, [1])  # dead for sequence 1 only; the slot still holds sequence 2's data
    assert table.context_lengths([1, 2]).tolist() == [1, 2]
    table.evict(2, [0])
    assert table.context_lengths([2]).tolist() == [2]  # its live token sits at offset 1


def test_short_list_lookups_bypass_the_index_and_the_pending_queue_stays_bounded():
    table = TokenTable(BlockAllocator(8, 2), initial_sequences=1)
    limit = 64 * 64  # _SMALL_BATCH * 64: merges come from the queue itself past this
    for q in range(limit):
        table.add_sequence(q)
        if q % 512 == 0:
            assert table.live_counts([q]).tolist() == [0]  # never merges
    assert len(table.index_touched) == limit and table.seq_sorted.size == 0
    table.free_sequence(0)  # the queue outgrows max(limit, sequences): merged here
    assert table.index_touched == [] and table.seq_sorted.tolist() == list(range(1, limit))
    for q in range(2, limit, 2):
        table.free_sequence(q)
    assert len(table.index_touched) == limit // 2 - 1  # below the limit: pending
    table.check()
    assert table.live_counts([1, 3, limit - 1]).tolist() == [0, 0, 0]
    with pytest.raises(UnknownSequenceError, match="sequence 2 is not registered"):
        table.live_counts([1, 2])


def test_few_changes_are_merged_into_the_index_and_many_rebuild_it():
    table = TokenTable(BlockAllocator(8, 2), initial_sequences=4)
    for q in range(100):
        table.add_sequence(q)
    table.live_counts(np.arange(100))  # 100 pending of 100: rebuilt from the map
    assert table.seq_sorted.tolist() == list(range(100))
    for q in (3, 50, 99, 7, 20):
        table.free_sequence(q)
    for q in (50, 1000, -5):
        table.add_sequence(q)  # 50 takes a freed row back
    assert len(table.index_touched) == 8 and 4 * 7 < len(table)  # few changes: merged in place
    table.live_counts(np.array([0, 50]))
    assert table.index_touched == []
    expect = sorted(table.row_of)
    assert table.seq_sorted.tolist() == expect and -5 in expect and 3 not in expect
    assert table.seq_sorted_rows.tolist() == rows_by_dict(table, expect)
    table.check()
