"""Inputs that alias the pool's own arrays behave exactly like copies of them (issue 12).

``BlockAllocator.free(alloc.ref_counts)`` used to read the pool's ref counts through the no-copy
fast path while the kernel changed them: it raised DoubleFreeError but left the pool corrupted.
Every entry point that takes arrays must copy an input that shares memory with its state.
"""

import copy
import pickle

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator
from kvmm.errors import KvmmError
from kvmm.testing.allocator_machine import assert_same_snapshot


def prepared() -> BlockAllocator:
    a = BlockAllocator(16, 4, secret=bytes(16))
    ids = a.allocate(6)
    a.cache_blocks(ids[:3], [(11, 0), (12, 0), (13, 0)])
    a.touch(ids[1:2])
    a.free(ids[4:6][::-1].copy())
    return a


def observable(a: BlockAllocator):
    return (a.ref_counts.tolist(), a.free_queue().tolist(), a.cached_map(), a.stats)


# (name, call given the allocator and the input, the aliasing input)
CALLS = [
    ("free(ref_counts)", lambda a, x: a.free(x), lambda a: a.ref_counts),
    ("free(ref_counts[:3])", lambda a, x: a.free(x), lambda a: a.ref_counts[:3]),
    ("touch(ref_counts)", lambda a, x: a.touch(x), lambda a: a.ref_counts),
    ("free(free-queue links)", lambda a, x: a.free(x), lambda a: a.block_fields[2, :2]),
    ("free(table row)", lambda a, x: a.free(x), lambda a: a.table[0, :1]),
    ("evict(ref_counts)", lambda a, x: a.evict(x), lambda a: a.ref_counts[:4]),
    ("free_requests(ref_counts)", lambda a, x: a.free_requests([0, 2], x), lambda a: a.ref_counts[:2]),
    ("admit(block_keys)", lambda a, x: a.admit(x, 1), lambda a: a.block_keys),
    ("admit(block_keys[:2])", lambda a, x: a.admit(x), lambda a: a.block_keys[:2]),
    ("admit_many(block_keys)", lambda a, x: a.admit_many([0, 1, 3], x), lambda a: a.block_keys[:3]),
    ("lookup(block_keys)", lambda a, x: a.lookup(x), lambda a: a.block_keys[:3]),
    ("cache_blocks(ref_counts, keys)", lambda a, x: a.cache_blocks(x, [(7, 7)]), lambda a: a.ref_counts[1:2]),
]


@pytest.mark.parametrize("name, call, make", CALLS, ids=[c[0] for c in CALLS])
def test_aliasing_input_acts_like_its_copy(name, call, make):
    # b is a deep copy of a: two prepared() pools may differ (the prefix table's slot placement is
    # keyed per pool), and the call must see the same input on the same state
    a = prepared()
    b = copy.deepcopy(a)
    aliased = make(a)
    copied = make(a).copy()
    assert np.may_share_memory(aliased, a.block_fields) or np.may_share_memory(aliased, a.block_keys) \
        or np.may_share_memory(aliased, a.table)
    before = a.snapshot()
    outcomes = []
    for alloc, x in ((a, aliased), (b, copied)):
        try:
            out = call(alloc, x)
            outcomes.append(("ok", repr(out)))
        except KvmmError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]
    assert observable(a) == observable(b)
    a.check()
    if outcomes[0][0] != "ok":  # a call that raises leaves the pool exactly as it was
        after = a.snapshot()
        assert_same_snapshot(before, after)


def test_free_of_ref_counts_raises_and_leaves_the_pool_intact():
    # the reported case: ref counts [1, 2, 1, 0, ...] read as block ids free block 0 once,
    # 1 twice, 2 once, then block 0 ten more times: a double free, so nothing may change
    a = prepared()
    before = a.snapshot()
    with pytest.raises(KvmmError, match="more times than it is referenced"):
        a.free(a.ref_counts)
    after = a.snapshot()
    assert_same_snapshot(before, after)
    a.check()


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda a: pickle.loads(pickle.dumps(a))], ids=["deepcopy", "pickle"])
def test_a_copied_pool_is_independent_and_its_ref_counts_follow_it(clone):
    a = prepared()
    b = clone(a)
    assert observable(b) == observable(a)
    b.free(b.allocate(2))  # changes b only
    b.touch(np.array([0], dtype=np.int32))
    assert b.ref_counts.tolist() == b.snapshot()["block_fields"][0].tolist()
    assert b.ref_counts.tolist() != a.ref_counts.tolist() and not b.ref_counts.flags.writeable
    a.check()
    b.check()


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda a: pickle.loads(pickle.dumps(a))], ids=["deepcopy", "pickle"])
def test_the_raw_secret_is_not_kept_and_a_copy_hashes_alike(clone):
    secret = bytes(range(16))
    a = BlockAllocator(16, 4, secret=secret)
    assert secret not in pickle.dumps(a)  # only the SipHash key words are state
    assert not any(isinstance(v, (bytes, bytearray)) for v in vars(a).values())
    toks = np.arange(12, dtype=np.int64)
    b = clone(a)
    assert np.array_equal(b.hash_blocks(toks), a.hash_blocks(toks))
    assert np.array_equal(b.hash_blocks(toks), BlockAllocator(4, 4, secret=secret).hash_blocks(toks))
