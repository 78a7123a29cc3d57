"""BlockIndex on bad input: each case raises the documented KvmmError subclass with a message
saying what was expected, and leaves snapshot() exactly as before."""

import numpy as np
import pytest

from kvmm.cluster import BlockIndex
from kvmm.errors import BadInputError, DTypeError, InvalidIdError, KvmmError, ShapeError, UnknownKeyError
from kvmm.testing.allocator_machine import assert_same_snapshot


def filled(**kwargs):
    index = BlockIndex(3, **kwargs)
    index.stored(0, [1, 2, 3], "GPU")
    index.stored(1, [1, 2], "CPU")
    return index


BAD_CALLS = [
    (InvalidIdError, r"instance 3 is out of range; expected an instance in \[0, 3\)", lambda ix: ix.stored(3, [1], "GPU")),
    (InvalidIdError, "out of range", lambda ix: ix.removed(-1, [1], "GPU")),
    (InvalidIdError, "out of range", lambda ix: ix.cleared(5)),
    (DTypeError, "instance must be an integer", lambda ix: ix.stored(1.0, [1], "GPU")),
    (InvalidIdError, r"instances contains 7", lambda ix: ix.stored_many([0, 7], [0, 1, 2], [1, 2], "GPU")),
    (BadInputError, r"unknown medium 'DISK'; expected one of \['GPU', 'CPU'\]", lambda ix: ix.stored(0, [1], "DISK")),
    (BadInputError, "unknown medium", lambda ix: ix.removed(0, [1], 2)),
    (BadInputError, "unknown medium", lambda ix: ix.cleared(0, "gpu")),
    (BadInputError, "unknown medium", lambda ix: ix.stored_many([0, 1], [0, 1, 2], [1, 2], ["GPU", "HBM"])),
    (ShapeError, "media must be one medium or one per group", lambda ix: ix.stored_many([0, 1], [0, 1, 2], [1, 2], ["GPU"])),
    (DTypeError, "must hold integer keys", lambda ix: ix.stored(0, [1.5], "GPU")),
    (DTypeError, "booleans", lambda ix: ix.stored(0, [True, 1], "GPU")),
    (DTypeError, "must hold integer keys", lambda ix: ix.stored(0, ["a"], "GPU")),
    (ShapeError, "key_width=1", lambda ix: ix.stored(0, np.zeros((2, 2), np.uint64), "GPU")),
    (ShapeError, r"1-D array of block ids or an \(n, 2\)", lambda ix: ix.stored(0, np.zeros((2, 3), np.int64), "GPU")),
    (ShapeError, "ragged", lambda ix: ix.stored(0, [[1], [2, 3]], "GPU")),
    (BadInputError, "does not fit 64 bits", lambda ix: ix.stored(0, [2**70], "GPU")),
    (BadInputError, "offsets must rise from 0", lambda ix: ix.stored_many([0, 1], [0, 3, 2], [1, 2], "GPU")),
    (ShapeError, "one more entry than instances", lambda ix: ix.stored_many([0, 1], [0, 2], [1, 2], "GPU")),
    (UnknownKeyError, r"instance 0 does not hold key 9 \(key 1 of the call\) on medium 'GPU'",
     lambda ix: ix.removed(0, [1, 9], "GPU")),
    (UnknownKeyError, "instance 1 does not hold key 3", lambda ix: ix.removed(1, [1, 3], "CPU")),
    (UnknownKeyError, "does not hold key 2", lambda ix: ix.removed(0, [2, 2], "GPU")),  # a repeat within the call
    (UnknownKeyError, "instance 1 does not hold key 1", lambda ix: ix.removed_many([0, 1, 1], [0, 3, 4, 5], [1, 2, 3, 1, 1],
                                                                              ["GPU", "CPU", "CPU"])),
    (DTypeError, "must hold integer keys", lambda ix: ix.prefix_hits([0.5])),
    (BadInputError, "offsets must rise", lambda ix: ix.prefix_hits_many([0, 5], [1, 2])),
]


@pytest.mark.parametrize("error, match, call", BAD_CALLS)
def test_bad_input_raises_and_changes_nothing(error, match, call):
    index = filled()
    before = index.snapshot()
    with pytest.raises(error, match=match):
        call(index)
    assert_same_snapshot(before, index.snapshot())
    index.check()


def test_a_failing_first_call_decides_no_key_width():
    index = BlockIndex(2, key_width=None)
    before = index.snapshot()
    with pytest.raises(UnknownKeyError):
        index.removed(0, [1], "GPU")
    with pytest.raises(BadInputError):
        index.stored_many([0], [0, 3], [1, 2], "GPU")
    assert index.key_width is None
    assert_same_snapshot(before, index.snapshot())
    index.stored(0, np.zeros((1, 2), np.uint64), "GPU")  # so (n, 2) keys are still welcome
    assert index.key_width == 2


def test_wide_index_refuses_block_ids():
    index = BlockIndex(2, key_width=2)
    with pytest.raises(ShapeError, match=r"key_width=2 keys: expected an \(n, 2\) uint64 array"):
        index.stored(0, [1, 2], "GPU")
    with pytest.raises(BadInputError, match="key must be two 64-bit words"):
        index.holders(-1)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_instances": 0}, "num_instances must be >= 1"),
    ({"media": "GPU"}, "media must be a non-empty sequence"),
    ({"media": ()}, "media must be a non-empty sequence"),
    ({"media": ("GPU", "GPU")}, "distinct"),
    ({"max_entries": 0}, "max_entries must be >= 1"),
    ({"key_width": 3}, "key_width must be 1"),
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(KvmmError, match=match):
        BlockIndex(**{"num_instances": 2, **kwargs})
