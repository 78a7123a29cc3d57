"""BlockAllocator with the inputs real callers pass: every integer dtype, views, scalars, huge counts."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator
from kvmm.errors import KvmmError, OutOfBlocksError
from kvmm.testing.allocator_machine import assert_same_snapshot


def prepared() -> tuple[BlockAllocator, np.ndarray]:
    a = BlockAllocator(16, 4, secret=bytes(16))
    ids = a.allocate(4)
    a.cache_blocks(ids[:2], [(1, 0), (2**64 - 1, 2**63)])
    return a, ids


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64, ">i4"])
def test_ids_of_every_integer_dtype_and_layout_give_the_same_result(dtype):
    ref, ids = prepared()
    ref.free(ids[::-1].copy())
    for make in (lambda x: x.astype(dtype),                       # plain
                 lambda x: np.repeat(x, 2).astype(dtype)[::2],     # strided view
                 lambda x: np.asfortranarray(x[None, :].astype(dtype)).T[:, 0],  # transposed view
                 lambda x: _read_only(x.astype(dtype)),
                 lambda x: x.tolist()):
        a, ids = prepared()
        a.free(make(ids[::-1].copy()))
        # (the hash table's slot mixer is seeded per allocator: compare the observable state)
        assert a.free_queue().tolist() == ref.free_queue().tolist()
        assert a.ref_counts.tolist() == ref.ref_counts.tolist() and a.cached_map() == ref.cached_map()
        a.check()


def _read_only(x):
    x.flags.writeable = False
    return x


def test_scalars_and_empty_inputs():
    a, ids = prepared()
    a.touch(np.int64(ids[0]))              # numpy scalar
    a.touch(np.array(ids[0], np.uint32))   # 0-d array
    a.free(np.array([ids[0], ids[0]], dtype=np.uint64))
    a.free([])
    a.touch(np.zeros(0, np.uint64))
    assert a.allocate(np.int64(2)).tolist() == [4, 5]
    assert a.allocate(np.array(1)).tolist() == [6]  # 0-d integer array, e.g. counts.sum()
    assert a.admit([(1, 0)], num_extra=np.array(1, np.uint8))[1] == 1
    assert a.lookup(np.zeros((0, 2), np.uint64)).tolist() == a.lookup([]).tolist() == []
    a.check()


def test_keys_at_and_above_2_63_from_lists_and_arrays_agree():
    a, ids = prepared()
    big = [(2**64 - 1, 2**63)]
    assert a.lookup(big).tolist() == a.lookup(np.array(big, dtype=np.uint64)).tolist() == [ids[1]]
    a.cache_blocks(ids[2:3], [2**63 + 1])  # a 1-D list of trace ids >= 2**63
    assert a.lookup(np.array([2**63 + 1], dtype=np.uint64)).tolist() == [ids[2]]


@pytest.mark.parametrize("call", [
    lambda a: a.allocate_many(np.array([2**62, 2**62, 2**62], dtype=np.int64)),  # the int64 sum wraps
    lambda a: a.allocate_many([2**40]),
    lambda a: a.admit([(9, 0)], num_extra=2**40),                                 # no 4 TiB buffer
    lambda a: a.admit([(9, 0)], num_extra=2**62),
], ids=["allocate_many-wrapping-sum", "allocate_many-huge", "admit-huge-extra", "admit-extra-2**62"])
def test_huge_counts_raise_out_of_blocks_and_change_nothing(call):
    a, _ = prepared()
    before = a.snapshot()
    with pytest.raises(OutOfBlocksError, match="free"):
        call(a)
    assert_same_snapshot(before, a.snapshot())


@pytest.mark.parametrize("extra", [[2**40], [2**62, 2**62], [2**63 - 1, 0]])
def test_admit_many_with_huge_extra_admits_nothing_and_changes_nothing(extra):
    a, _ = prepared()
    before = a.snapshot()
    offsets = [0] + [1] * len(extra)
    n, block_offsets, block_ids, hits = a.admit_many(offsets, [(9, 0)], num_extra=extra)
    assert (n, block_offsets.tolist(), block_ids.tolist(), hits.tolist()) == (0, [0], [], [])
    assert_same_snapshot(before, a.snapshot())


def test_admit_many_stops_at_a_huge_request_after_admitting_the_ones_before():
    a, _ = prepared()
    n, block_offsets, block_ids, _ = a.admit_many([0, 1, 2, 2], [(1, 0), (9, 0)], num_extra=[1, 2**62, 0])
    assert n == 1 and block_offsets.tolist() == [0, 2] and block_ids.tolist() == [0, 4]
    a.check()


@pytest.mark.parametrize("bad", [np.array([1.0]), np.array([True]), "ab", [None], np.zeros((2, 2), np.int32)])
def test_non_integer_ids_raise_kvmm_errors(bad):
    a, _ = prepared()
    before = a.snapshot()
    for method in (a.free, a.touch, a.evict):
        with pytest.raises(KvmmError):
            method(bad)
    assert_same_snapshot(before, a.snapshot())
