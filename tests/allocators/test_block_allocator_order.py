"""Exact-order tests: known operation sequences give pinned free-queue orders and counters."""

import numpy as np

from kvmm.allocators import BlockAllocator
from kvmm.allocators.block_allocator import CACHED, FREE_NEXT, FREE_PREV, KEY_NEXT, KEY_PREV, REF

A, B, C, K = (1, 0), (2, 0), (3, 0), (9, 9)


def keys(*ks):
    return np.array(ks, dtype=np.uint64).reshape(-1, 2)


def make(n):
    return BlockAllocator(n, 4, secret=bytes(16))


def test_initial_queue_is_every_block_ascending():
    a = make(5)
    assert a.free_queue().tolist() == [0, 1, 2, 3, 4]
    assert a.num_free == 5 and a.usage == 0.0
    assert a.ref_counts.tolist() == [0] * 5
    a.check()


def test_allocate_takes_from_the_head_and_sets_ref_one():
    a = make(5)
    assert a.allocate(2).tolist() == [0, 1]
    assert a.allocate(0).tolist() == []
    assert a.free_queue().tolist() == [2, 3, 4]
    assert a.ref_counts.tolist() == [1, 1, 0, 0, 0]
    assert a.usage == 0.4
    a.check()


def test_free_puts_uncached_at_head_in_order_and_cached_at_tail_in_order():
    a = make(8)
    ids = a.allocate(5)  # [0..4]; queue [5, 6, 7]
    a.cache_blocks([1, 3], keys(A, B))
    a.free(ids[::-1])  # freed 4, 3, 2, 1, 0: uncached 4, 2, 0 -> head; cached 3, 1 -> tail
    assert a.free_queue().tolist() == [4, 2, 0, 5, 6, 7, 3, 1]
    a.check()


def test_a_request_sequence_with_hits_and_evictions():
    a = make(6)
    r1 = a.allocate(3)  # [0, 1, 2]
    a.cache_blocks(r1[:2], keys(A, B))  # block 2 is the partial last block: not cached
    a.free(r1[::-1])
    assert a.free_queue().tolist() == [2, 3, 4, 5, 1, 0]

    # Request 2 shares the prefix A, B: both hit, get touched (leave the queue), 1 new block.
    hits = a.lookup(keys(A, B, C))
    assert hits.tolist() == [0, 1]
    a.touch(hits)
    new = a.allocate(1)
    assert new.tolist() == [2]
    assert a.free_queue().tolist() == [3, 4, 5]
    assert a.ref_counts.tolist() == [1, 1, 1, 0, 0, 0]
    a.cache_blocks(new, keys(C))
    a.free(np.concatenate([hits, new])[::-1])  # frees 2, 1, 0: all cached -> tail in that order
    assert a.free_queue().tolist() == [3, 4, 5, 2, 1, 0]

    # A big allocation walks into the cached tail: 2 (C) and 1 (B) are evicted, 0 (A) survives.
    assert a.allocate(5).tolist() == [3, 4, 5, 2, 1]
    assert a.stats == {"queries": 3, "hits": 2, "evictions": 2, "cached_blocks": 1, "cached_keys": 1}
    assert a.lookup(keys(A, B, C)).tolist() == [0]
    assert a.stats["queries"] == 6 and a.stats["hits"] == 3
    a.check()


def test_duplicate_key_lookup_returns_the_earliest_still_cached_block():
    a = make(4)
    ids = a.allocate(3)
    a.cache_blocks([2], keys(K))
    a.cache_blocks([0, 1], keys(K, K))  # no de-duplication: K is cached in 2, then 0, then 1
    assert a.cached_map() == {K: [2, 0, 1]}
    assert a.lookup(keys(K)).tolist() == [2]
    a.evict([2])
    assert a.lookup(keys(K)).tolist() == [0]
    a.free(ids[::-1])  # 2 (uncached now) -> head; 1, 0 -> tail
    assert a.free_queue().tolist() == [2, 3, 1, 0]
    assert a.allocate(3).tolist() == [2, 3, 1]  # evicts 1: K still in 0
    assert a.lookup(keys(K)).tolist() == [0]
    assert a.stats["evictions"] == 2
    a.check()


def test_touch_of_a_free_cached_block_takes_it_out_of_the_middle():
    a = make(5)
    ids = a.allocate(5)
    a.cache_blocks(ids, keys((0, 1), (1, 1), (2, 1), (3, 1), (4, 1)))
    a.free(ids)  # all cached: tail in freeing order
    assert a.free_queue().tolist() == [0, 1, 2, 3, 4]
    a.touch([2, 2, 4])
    assert a.free_queue().tolist() == [0, 1, 3]
    assert a.ref_counts.tolist() == [0, 0, 2, 0, 1]
    a.free([2, 4, 2])  # 4 reaches 0 first, then 2
    assert a.free_queue().tolist() == [0, 1, 3, 4, 2]
    a.check()


def test_admit_equals_lookup_touch_allocate_cache():
    a, b = make(6), make(6)
    for alloc in (a, b):
        first = alloc.allocate(2)
        alloc.cache_blocks(first, keys(A, B))
        alloc.free(first[::-1])  # queue [2, 3, 4, 5, 1, 0]
    ids, h = a.admit(keys(A, C), num_extra=1)
    hits = b.lookup(keys(A, C))
    b.touch(hits)
    new = b.allocate(2)
    b.cache_blocks(new[:1], keys(C))
    assert (ids.tolist(), h) == ([0, 2, 3], 1)
    assert ids.tolist() == hits.tolist() + new.tolist()
    # The hash tables differ only by their random slot seeds; everything else is identical.
    assert np.array_equal(a.block_fields, b.block_fields) and np.array_equal(a.block_keys, b.block_keys)
    assert a.cached_map() == b.cached_map()
    assert a.stats == b.stats
    a.check()


def test_docstring_worked_example():
    a = make(4)
    a.allocate(4)
    a.cache_blocks([1], keys(K))
    a.cache_blocks([3], keys(K))
    a.free([0])
    a.free([1])
    a.free([3])
    f = a.block_fields
    assert f[REF].tolist() == [0, 0, 1, 0]
    assert a.free_queue().tolist() == [0, 1, 3]
    assert f[FREE_PREV].tolist() == [-1, 0, -1, 1] and f[FREE_NEXT].tolist() == [1, 3, -1, -1]
    assert f[KEY_PREV].tolist() == [-1, -1, -1, 1] and f[KEY_NEXT].tolist() == [-1, 3, -1, -1]
    assert f[CACHED].tolist() == [0, 1, 0, 1]
    slot = np.flatnonzero(a.table[0] >= 0)
    assert a.table[:, slot].ravel().tolist() == [1, 3]
    assert a.lookup(keys(K)).tolist() == [1]
    assert a.allocate(2).tolist() == [0, 1]
    assert a.cached_map() == {K: [3]} and a.stats["evictions"] == 1
    a.check()


def test_allocate_many_equals_consecutive_allocates():
    a, b = make(10), make(10)
    offsets, ids = a.allocate_many([3, 0, 2])
    assert offsets.dtype == np.int64 and ids.dtype == np.int32
    assert offsets.tolist() == [0, 3, 3, 5] and ids.tolist() == [0, 1, 2, 3, 4]
    assert np.concatenate([b.allocate(3), b.allocate(0), b.allocate(2)]).tolist() == ids.tolist()
    a.check()


def test_reset_prefix_cache_refuses_while_blocks_are_in_use():
    a = make(3)
    ids = a.allocate(2)
    a.cache_blocks(ids, keys(A, B))
    assert a.reset_prefix_cache() is False
    assert a.cached_map() == {A: [0], B: [1]}
    a.free(ids[::-1])
    order = a.free_queue().tolist()
    assert a.reset_prefix_cache() is True
    assert a.cached_map() == {} and a.lookup(keys(A)).tolist() == []
    assert a.free_queue().tolist() == order == [2, 1, 0]
    assert a.stats["evictions"] == 0
    a.check()


def test_admit_many_stops_at_the_first_request_that_does_not_fit():
    a = make(5)
    offsets = [0, 2, 5, 6]
    flat = keys(A, B, A, B, C, (7, 7))
    n, block_offsets, block_ids, hits = a.admit_many(offsets, flat, num_extra=[0, 1, 0])
    # request 0: A, B miss -> blocks 0, 1; request 1: A, B hit, C miss + 1 extra -> 2, 3;
    # request 2 needs 1 block and 1 is free -> 4.
    assert n == 3
    assert block_offsets.tolist() == [0, 2, 6, 7]
    assert block_ids.tolist() == [0, 1, 0, 1, 2, 3, 4]
    assert hits.tolist() == [0, 2, 0]
    n2, _, ids2, _ = a.admit_many([0, 1], keys((8, 8)))
    assert n2 == 0 and ids2.tolist() == []
    a.check()


def test_evict_keeps_queue_position_and_counts():
    a = make(4)
    ids = a.allocate(2)
    a.cache_blocks(ids, keys(A, B))
    a.free(ids[::-1])
    assert a.free_queue().tolist() == [2, 3, 1, 0]
    assert a.evict([0, 0, 3]) == 1
    assert a.free_queue().tolist() == [2, 3, 1, 0]
    assert a.cached_map() == {B: [1]} and a.stats["evictions"] == 1
    a.check()
