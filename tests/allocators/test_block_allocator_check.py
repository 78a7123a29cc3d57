"""check() notices every kind of corruption (so the stateful test's invariant can fail)."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator
from kvmm.allocators.block_allocator import (
    CACHED,
    FREE_NEXT,
    FREE_PREV,
    KEY_NEXT,
    META_EVICTIONS,
    META_HITS,
    META_NUM_CACHED,
    META_NUM_FREE,
    META_NUM_KEYS,
    REF,
)


def healthy() -> BlockAllocator:
    a = BlockAllocator(8, 4, secret=bytes(16))
    ids = a.allocate(5)
    keys = np.array([[1, 0], [2, 0], [1, 0]], dtype=np.uint64)
    a.cache_blocks(ids[:3], keys)  # key (1, 0) in blocks 0 and 2
    a.free(ids[[4, 1]])
    a.lookup(keys[:2])
    a.check()
    return a


def set_ref(a, b, v):
    a.block_fields[REF, b] = v


CORRUPTIONS = {
    "negative ref count": lambda a: set_ref(a, 0, -1),
    "free block with a ref": lambda a: set_ref(a, 4, 1),
    "used block with ref 0": lambda a: set_ref(a, 0, 0),
    "broken prev link": lambda a: a.block_fields.__setitem__((FREE_PREV, 5), 7),
    "cycle in the free queue": lambda a: a.block_fields.__setitem__((FREE_NEXT, 7), 4),
    "num_free off": lambda a: a.meta.__setitem__(META_NUM_FREE, 3),
    "cached flag without a chain": lambda a: a.block_fields.__setitem__((CACHED, 3), 1),
    "chain link to an uncached block": lambda a: a.block_fields.__setitem__((KEY_NEXT, 1), 3),
    "key changed under the table": lambda a: a.block_keys.__setitem__((2, 0), 9),
    "num_cached off": lambda a: a.meta.__setitem__(META_NUM_CACHED, 2),
    "num_keys off": lambda a: a.meta.__setitem__(META_NUM_KEYS, 5),
    "hits above queries": lambda a: a.meta.__setitem__(META_HITS, 99),
    "negative evictions": lambda a: a.meta.__setitem__(META_EVICTIONS, -1),
    "slot moved out of its probe run": lambda a: _move_slot(a),
}


def _move_slot(a):
    slot = int(np.flatnonzero(a.table[0] >= 0)[0])
    target = (slot + a.table.shape[1] // 2) % a.table.shape[1]
    while a.table[0, target] >= 0:
        target = (target + 1) % a.table.shape[1]
    a.table[:, target] = a.table[:, slot]
    a.table[:, slot] = -1


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_check_detects(name):
    a = healthy()
    CORRUPTIONS[name](a)
    with pytest.raises(AssertionError):
        a.check()
