"""Bad input raises its KvmmError subclass with a helpful message and changes nothing."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator
from kvmm.errors import (
    BadInputError,
    DoubleFreeError,
    DTypeError,
    InvalidIdError,
    KvmmError,
    OutOfBlocksError,
    ShapeError,
)

K = np.array([[1, 0], [2, 0], [3, 0]], dtype=np.uint64)


def prepared() -> BlockAllocator:
    """8 blocks: 0, 1 held and cached (keys 1, 2); 2 held uncached; 3 free and cached (key 3)."""
    a = BlockAllocator(8, 4, secret=bytes(16))
    ids = a.allocate(4)
    a.cache_blocks(ids[[0, 1, 3]], K)
    a.free([3])
    a.lookup(K)
    a.check()
    return a


i32 = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731

CASES = [
    # (description, call, error class, message fragment)
    ("allocate too many", lambda a: a.allocate(6), OutOfBlocksError, "only 5 of 8"),
    ("allocate negative", lambda a: a.allocate(-1), BadInputError, ">= 0"),
    ("allocate float", lambda a: a.allocate(2.0), DTypeError, "integer"),
    ("allocate bool", lambda a: a.allocate(True), DTypeError, "integer"),
    ("allocate_many too many", lambda a: a.allocate_many([3, 3]), OutOfBlocksError, "6 blocks"),
    ("allocate_many negative", lambda a: a.allocate_many([3, -1]), BadInputError, ">= 0"),
    ("allocate_many floats", lambda a: a.allocate_many([1.5]), DTypeError, "integer"),
    ("allocate_many 2-D", lambda a: a.allocate_many([[1, 2]]), ShapeError, "1-dimensional"),
    ("free a free block", lambda a: a.free([5]), DoubleFreeError, "ref count 0"),
    ("free twice in one batch", lambda a: a.free(i32(2, 0, 2)), DoubleFreeError, "ids[2]"),
    ("free out of range (int32 fast path)", lambda a: a.free(i32(0, 8)), InvalidIdError, "[0, 8)"),
    ("free negative id", lambda a: a.free([0, -1]), InvalidIdError, "-1"),
    ("free huge id", lambda a: a.free(np.array([2**40], dtype=np.int64)), InvalidIdError, "[0, 8)"),
    ("free floats", lambda a: a.free(np.array([0.0])), DTypeError, "integer"),
    ("free 2-D", lambda a: a.free(np.zeros((1, 1), dtype=np.int32)), ShapeError, "1-dimensional"),
    ("free_requests bad offsets", lambda a: a.free_requests([0, 3], i32(0, 1)), BadInputError, "offsets"),
    ("free_requests double free", lambda a: a.free_requests([0, 2, 3], i32(0, 2, 2)), DoubleFreeError,
     "ids (last-first per request)[2] frees block 2"),  # freeing order 2, 0, 2: the second 2 fails
    ("free_requests out of range", lambda a: a.free_requests([0, 2, 3], i32(0, 9, 2)), InvalidIdError,
     "ids (last-first per request)[0] is block id 9"),
    ("touch out of range", lambda a: a.touch(i32(1, 9)), InvalidIdError, "[0, 8)"),
    ("touch floats", lambda a: a.touch([1.0]), DTypeError, "integer"),
    ("cache a block under another key", lambda a: a.cache_blocks([0], K[1:2]), BadInputError, "another cached key"),
    ("cache a free block", lambda a: a.cache_blocks([6], K[:1]), BadInputError, "ref count 0"),
    ("cache the same block twice", lambda a: a.cache_blocks(i32(2, 2), K[:2]), BadInputError, "twice"),
    ("cache length mismatch", lambda a: a.cache_blocks([2], K[:2]), ShapeError, "same length"),
    ("cache keys of shape (n, 3)", lambda a: a.cache_blocks([2], np.zeros((1, 3), np.uint64)), ShapeError, "(n, 2)"),
    ("cache float keys", lambda a: a.cache_blocks([2], np.zeros((1, 2))), DTypeError, "uint64"),
    ("cache out of range", lambda a: a.cache_blocks(i32(2, 8), K[:2]), InvalidIdError, "[0, 8)"),
    ("lookup float keys", lambda a: a.lookup(np.ones((2, 2))), DTypeError, "uint64"),
    ("lookup negative key words", lambda a: a.lookup(np.array([[-1, 0]])), BadInputError, "negative"),
    ("lookup Python ints out of range", lambda a: a.lookup([(2**64, 0)]), BadInputError, "2**64"),
    ("lookup 3-D keys", lambda a: a.lookup(np.ones((1, 2, 2), np.uint64)), ShapeError, "(n, 2)"),
    ("lookup_many bad offsets", lambda a: a.lookup_many([0, 5], K), BadInputError, "offsets"),
    ("evict out of range", lambda a: a.evict([0, 99]), InvalidIdError, "99"),
    ("admit too many", lambda a: a.admit(np.arange(10, 17, dtype=np.uint64)), OutOfBlocksError, "7 new blocks"),
    ("admit with hits too many", lambda a: a.admit(K, num_extra=5), OutOfBlocksError, "free"),
    ("admit negative extra", lambda a: a.admit(K, num_extra=-1), BadInputError, ">= 0"),
    ("admit_many extra length", lambda a: a.admit_many([0, 3], K, num_extra=[1, 2]), ShapeError, "one count"),
    ("admit_many negative extra", lambda a: a.admit_many([0, 3], K, num_extra=[-1]), BadInputError, ">= 0"),
    ("hash float tokens", lambda a: a.hash_blocks(np.ones(8)), DTypeError, "integer"),
    ("hash_many float tokens", lambda a: a.hash_blocks_many([0, 8], np.ones(8)), DTypeError, "integer"),
    ("hash parent of three words", lambda a: a.hash_blocks(np.arange(8), parent=[1, 2, 3]), ShapeError, "one key"),
    ("hash parent with a negative word", lambda a: a.hash_blocks(np.arange(8), parent=[-1, 0]), BadInputError,
     "negative"),  # as lookup's keys: not read as 2**64 - 1
    ("hash negative salt", lambda a: a.hash_blocks(np.arange(8), salt=-1), BadInputError, "salt"),
    ("block_key out of range", lambda a: a.block_key(8), InvalidIdError, "[0, 8)"),
]


@pytest.mark.parametrize("desc,call,error,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_and_changes_nothing(desc, call, error, fragment):
    a = prepared()
    before = a.snapshot()
    with pytest.raises(error) as info:
        call(a)
    assert isinstance(info.value, KvmmError)
    assert fragment in str(info.value), str(info.value)
    after = a.snapshot()
    for name in before:
        assert np.array_equal(before[name], after[name]), f"{desc}: {name} changed"
    a.check()


@pytest.mark.parametrize("kwargs,error", [
    (dict(num_blocks=0, block_size=4), BadInputError),
    (dict(num_blocks=4.0, block_size=4), DTypeError),
    (dict(num_blocks=4, block_size=0), BadInputError),
    (dict(num_blocks=4, block_size=4, secret=b"short"), BadInputError),
    (dict(num_blocks=4, block_size=4, secret="0123456789abcdef"), BadInputError),
    (dict(num_blocks=4, block_size=4, salt=2**64), BadInputError),
    (dict(num_blocks=4, block_size=4, salt=1.5), DTypeError),
])
def test_bad_constructor_arguments(kwargs, error):
    with pytest.raises(error):
        BlockAllocator(**kwargs)


def test_ref_counts_view_is_read_only():
    a = prepared()
    with pytest.raises(ValueError):
        a.ref_counts[0] = 5
    assert a.ref_counts.dtype == np.int32 and a.ref_counts.tolist()[:4] == [1, 1, 1, 0]


def test_inputs_are_not_mutated_and_other_integer_dtypes_work():
    a = prepared()
    ids = np.array([2], dtype=np.uint8)
    a.touch(ids)
    a.free(ids)
    a.free(np.array([2], dtype=np.int64))
    assert ids.tolist() == [2] and a.ref_counts[2] == 0
    keys = [(1, 0), (2, 0), (2**64 - 1, 2**63)]
    assert a.lookup(keys).tolist() == [0, 1]
    a.check()
