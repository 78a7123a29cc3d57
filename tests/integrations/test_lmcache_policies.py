"""kvmm eviction orders as LMCache 0.5.6 cache policies in a real LocalCPUBackend (lmcache venv only).

Run by .ci/run in .ci/venvs/lmcache; the main run does not collect tests/integrations.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from kvmm.testing.engines.lmcache_replay import (  # first: quiets LMCache's logs
    chunk_key,
    cpu_backend,
    new_chunk,
    replay,
    run_request,
)

# isort: split
from lmcache.v1.storage_backend import cache_policy as lmc_policies

import kvmm.integrations.lmcache as kl
from kvmm.errors import BadInputError
from kvmm.policies import EVICTION_POLICIES, ARCPolicy, LRUPolicy
from kvmm.traces import load_mooncake

N_REQUESTS = 1500
CAPACITY = 600  # chunks: the largest request fits, the working set does not


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


@pytest.fixture(scope="module", autouse=True)
def registered():
    return kl.register_cache_policies()


def test_lmcache_version_is_the_pinned_one():
    assert importlib.metadata.version("lmcache") == "0.5.6"


def test_register_adds_the_names_lmcache_resolves(registered):
    assert registered == ["KVMM_FIFO", "KVMM_LFU", "KVMM_LRU"]
    for name, cls in [("kvmm_lru", kl.KvmmLRU), ("Kvmm_Fifo", kl.KvmmFIFO), ("KVMM_LFU", kl.KvmmLFU)]:
        assert type(lmc_policies.get_cache_policy(name)) is cls  # LMCache's own factory, any case
    assert kl.register_cache_policies() == registered  # idempotent


def check_tracks_resident(backend):
    def check():
        ours = backend.cache_policy
        # every resident chunk is tracked by the policy or dropped by it (self-evicted), once
        assert set(ours.policy.keys()) | set(ours.dropped) == set(backend.hot_cache)
        ours.check()
        ours.policy.check()
    return check


@pytest.mark.parametrize("ours, theirs", [("kvmm_lru", "lru"), ("kvmm_fifo", "fifo")])
def test_replay_makes_exactly_lmcaches_evictions(trace, ours, theirs):
    mine, lmcache = cpu_backend(ours, CAPACITY), cpu_backend(theirs, CAPACITY)
    a = replay(mine, trace, N_REQUESTS, check=check_tracks_resident(mine))
    b = replay(lmcache, trace, N_REQUESTS)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"request {i}: {ours} (hits {x[0]}, evicted {x[2][:5]}...) differs from LMCache {theirs}"
    # The comparison means something: hits and evictions both happen, pinned hits were skipped.
    assert sum(r[0] for r in b) > 500 and sum(len(r[2]) for r in b) > 500
    assert set(mine.hot_cache) == set(lmcache.hot_cache)


def test_lfu_replay_against_lmcache_lfu(trace):
    """kvmm's LFU and LMCache's LFU (frequency buckets, FIFO among equal counts) on the same trace."""
    mine, lmcache = cpu_backend("kvmm_lfu", CAPACITY), cpu_backend("lfu", CAPACITY)
    a = replay(mine, trace, N_REQUESTS, check=check_tracks_resident(mine))
    b = replay(lmcache, trace, N_REQUESTS)
    assert a == b
    assert sum(len(r[2]) for r in b) > 500


def test_pinned_and_referenced_chunks_are_skipped():
    backend = cpu_backend("kvmm_lru", 3)
    keys = [chunk_key(h) for h in range(4)]
    held = None
    for i, key in enumerate(keys[:3]):
        obj = new_chunk(backend, fill=i)
        backend.submit_put_task(key, obj)
        obj.ref_count_down()
    assert backend.contains(keys[0], pin=True)      # the oldest is pinned by a lookup
    held = backend.get_blocking(keys[1])            # the next is referenced by a retrieve
    assert run_request(backend, [keys[3]])[2] == [2]  # so the LRU victim is the third
    assert backend.cache_policy.get_evict_candidates(backend.hot_cache, 5) == [keys[3]]
    held.ref_count_down()
    backend.unpin(keys[0])
    # the lookup's touch_cache made keys[0] more recent than keys[1]
    assert backend.cache_policy.get_evict_candidates(backend.hot_cache, 5) == [keys[1], keys[0], keys[3]]


def test_forced_remove_and_hits_reach_the_policy():
    backend = cpu_backend("kvmm_lru", 4)
    keys = [chunk_key(h) for h in range(3)]
    for key in keys:
        obj = new_chunk(backend)
        backend.submit_put_task(key, obj)
        obj.ref_count_down()
    policy = backend.cache_policy.policy
    assert backend.contains(keys[0], pin=True)
    backend.touch_cache()
    backend.unpin(keys[0])
    assert policy.keys() == [keys[1], keys[2], keys[0]]
    assert backend.remove(keys[2])                  # forced: update_on_force_evict
    assert policy.keys() == [keys[1], keys[0]]
    backend.clear()                                 # batched_remove of every evictable chunk
    assert policy.keys() == [] and not backend.hot_cache


def test_make_cache_policy_from_any_eviction_policy():
    cls = kl.make_cache_policy(lambda: ARCPolicy(capacity=8), name="KvmmARC8")
    assert isinstance(cls().policy, ARCPolicy) and cls().policy is not cls().policy
    assert kl.make_cache_policy(LRUPolicy()).__name__ == "KvmmLRUPolicy"
    assert kl.register_cache_policies({"my_arc": cls}) == ["KVMM_FIFO", "KVMM_LFU", "KVMM_LRU", "MY_ARC"]
    assert type(lmc_policies.get_cache_policy("my_arc")) is cls
    with pytest.raises(BadInputError, match="EvictionPolicy"):
        kl.make_cache_policy(object())
    with pytest.raises(BadInputError, match="LMCache's own"):
        kl.register_cache_policies({"lru": LRUPolicy})
    assert lmc_policies.POLICY_MAPPING["LRU"] is lmc_policies.LRUCachePolicy


ONLINE = sorted(name for name, cls in EVICTION_POLICIES.items() if not getattr(cls, "offline", False))


def order_backend(order, factory=None):
    name = f"KVMM_TEST_{order.upper()}"
    kl.register_cache_policies({name: factory or EVICTION_POLICIES[order]})
    return cpu_backend(name.lower(), CAPACITY)


@pytest.mark.parametrize("order", ONLINE)
def test_every_order_replays_a_trace_in_lmcache(trace, order):
    backend = order_backend(order)
    result = replay(backend, trace, N_REQUESTS, check=check_tracks_resident(backend))
    assert sum(r[0] for r in result) > 1000 and sum(len(r[2]) for r in result) > 5000
    assert isinstance(backend.cache_policy.policy, EVICTION_POLICIES[order])


def test_2q_in_lmcache_keeps_ghosts_and_promotes_them_unlike_fifo(trace):
    # LMCache pops the candidates itself: the mapping calls on_evict for them, so an A1in victim
    # becomes a ghost and its return enters Am (with on_remove, a delete, 2Q would be FIFO)
    twoq, fifo = order_backend("2q"), order_backend("fifo")
    a = replay(twoq, trace, N_REQUESTS, check=check_tracks_resident(twoq))
    b = replay(fifo, trace, N_REQUESTS)
    queues = twoq.cache_policy.policy.queues()
    assert queues["A1out"] and queues["Am"]
    assert [r[0] for r in a] != [r[0] for r in b]


class EvictsOnThirdInsert(LRUPolicy):
    """LRU that, like 2Q's Am quota or LIRS's demotions, evicts a key on its own: inserting the
    third distinct key evicts the least recent one and returns it (a test double of a
    self-evicting policy)."""

    self_evicting = True

    def on_insert(self, key, size=1, protected=()):
        evicted = self.victims(1, protected) if len(self) == 2 else []
        for k in evicted:
            self.on_remove(k)
        super().on_insert(key, size)
        return evicted


def test_self_evicted_chunks_are_dropped_then_offered_first_and_a_hit_reinserts_them():
    kl.register_cache_policies({"KVMM_TEST_SELF": EvictsOnThirdInsert})
    backend = cpu_backend("kvmm_test_self", 4)
    ours, keys = backend.cache_policy, [chunk_key(h) for h in range(5)]
    check = check_tracks_resident(backend)
    for i, key in enumerate(keys[:3]):
        obj = new_chunk(backend, fill=i)
        backend.submit_put_task(key, obj)
        obj.ref_count_down()
        check()
    # the third insert dropped keys[0]: still in LMCache (loadable), no longer in the policy
    assert list(ours.dropped) == [keys[0]] and ours.policy.keys() == [keys[1], keys[2]]
    assert backend.contains(keys[0])
    assert ours.get_evict_candidates(backend.hot_cache, 2) == [keys[0], keys[1]]
    # a hit on the dropped chunk brings it back to the policy as a new entry (most recent),
    # an insert like any other: the policy's third key again drops its least recent, keys[1]
    assert backend.contains(keys[0], pin=True)
    backend.touch_cache()
    backend.unpin(keys[0])
    check()
    assert list(ours.dropped) == [keys[1]] and ours.policy.keys() == [keys[2], keys[0]]
    assert backend.remove(keys[1]) and backend.remove(keys[2])  # forced removes: deletes
    check()
    assert not ours.dropped and ours.policy.keys() == [keys[0]]
