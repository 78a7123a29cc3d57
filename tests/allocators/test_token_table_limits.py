"""Ids and counts beyond int64 or beyond the pool: clear errors, table unchanged."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import BadInputError, OutOfBlocksError
from kvmm.testing.allocator_machine import assert_same_snapshot


@pytest.mark.parametrize("seq_id", [2**70, np.uint64(2**63 + 3), -(2**63) - 1])
def test_sequence_ids_beyond_int64_are_rejected(seq_id):
    table = TokenTable(BlockAllocator(8, 4))
    table.add_sequence(1)
    before = table.snapshot()
    with pytest.raises(BadInputError, match="does not fit int64"):
        table.add_sequence(seq_id)
    assert_same_snapshot(before, table.snapshot())
    table.check()


def test_huge_append_counts_do_not_wrap():
    alloc = BlockAllocator(8, 4)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.add_sequence(1)
    table.append([0], [3])
    before = table.snapshot()
    with pytest.raises(OutOfBlocksError, match=r"appending 4611686018427387904 tokens .* 32 token slots"):
        table.append([0, 1], [2**62, 2**62])
    assert_same_snapshot(before, table.snapshot())
    assert alloc.num_free == 7
    table.check()
