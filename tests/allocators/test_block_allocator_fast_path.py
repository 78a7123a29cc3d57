"""The allocator's no-copy fast path: right-dtype arrays are used in place, checked by kernels.

CSR offsets given as int64 arrays are checked by ``_csr_offsets_ok`` (compared here with a
plain-Python reading of the rule); ids of any stride and offsets arrays give exactly what lists
give; bad offsets arrays raise with nothing changed.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator
from kvmm.allocators._block_kernels import csr_offsets_ok as _csr_offsets_ok
from kvmm.errors import BadInputError
from kvmm.testing.allocator_machine import assert_same_snapshot


def csr_offsets_ok_reference(offsets: list[int], length: int) -> bool:
    """Non-decreasing offsets from 0 to ``length`` (at least one entry)."""
    return (len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == length
            and all(a <= b for a, b in zip(offsets, offsets[1:])))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=8), st.integers(0, 12))
def test_csr_offsets_kernel_matches_reference(offsets, length):
    arr = np.array(offsets, dtype=np.int64)
    assert _csr_offsets_ok(arr, length) == csr_offsets_ok_reference(offsets, length)


def _pool():
    a = BlockAllocator(32, 4, secret=bytes(16))
    keys = np.zeros((6, 2), dtype=np.uint64)
    keys[:, 0] = np.arange(1, 7)
    ids, _ = a.admit(keys)
    a.free(ids[::-1])
    return a, keys


def test_arrays_and_lists_give_the_same_results():
    (a, keys), (b, _) = _pool(), _pool()
    offsets = np.array([0, 2, 2, 6], dtype=np.int64)
    n_a, off_a, ids_a, hits_a = a.admit_many(offsets, keys)
    n_b, off_b, ids_b, hits_b = b.admit_many(offsets.tolist(), keys.tolist())
    assert (n_a, off_a.tolist(), ids_a.tolist(), hits_a.tolist()) == (n_b, off_b.tolist(), ids_b.tolist(),
                                                                      hits_b.tolist())
    a.free_requests(off_a, ids_a)  # int64 offsets and int32 ids: the no-copy path
    b.free_requests(off_b.tolist(), ids_b.tolist())
    assert a.free_queue().tolist() == b.free_queue().tolist() and a.cached_map() == b.cached_map()
    new_a, new_b = a.allocate(5), b.allocate(5)
    a.free(new_a[::-2])  # a negative-stride int32 view, used in place
    b.free(new_b[::-2].tolist())
    assert a.ref_counts.tolist() == b.ref_counts.tolist() and a.free_queue().tolist() == b.free_queue().tolist()
    a.check()


def test_bad_offsets_array_raises_and_changes_nothing():
    a, keys = _pool()
    ids = a.allocate(4)
    before = a.snapshot()
    for offsets in (np.array([0, 3, 2, 4], dtype=np.int64), np.array([1, 4], dtype=np.int64),
                    np.array([0, 5], dtype=np.int64), np.zeros(0, dtype=np.int64)):
        for call in (lambda: a.free_requests(offsets, ids), lambda: a.lookup_many(offsets, keys[:4]),  # noqa: B023
                     lambda: a.admit_many(offsets, keys[:4])):  # noqa: B023 (each called at once, inside the loop)
            with pytest.raises(BadInputError, match="offsets"):
                call()
            after = a.snapshot()
            assert_same_snapshot(before, after)
    a.check()
