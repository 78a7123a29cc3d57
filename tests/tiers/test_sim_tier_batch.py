"""ManagedTier's batch calls used by the simulator equal the one-key calls, and bad input changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError, CapacityExceededError
from kvmm.policies.eviction import LRUPolicy, make_eviction_policy
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.simulated import SimulatedTier


def _tier(policy):
    return ManagedTier(SimulatedTier(10 * 100, spec="dram"), make_eviction_policy(policy))


@pytest.mark.parametrize("key_form", ["list", "int64", "uint64"])
@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "arc", "lru-subclass"])
def test_offer_equals_one_key_calls(policy, key_form):
    # built-in LRU/FIFO take the fast hooks, the others (and a subclass) their per-key hooks;
    # integer key arrays are read in one tolist: all must equal the one-key calls
    rng = np.random.default_rng(3)
    if policy == "lru-subclass":
        batch, single = (ManagedTier(SimulatedTier(10 * 100, spec="dram"), CountingLRU()) for _ in range(2))
    else:
        batch, single = _tier(policy), _tier(policy)
    for _ in range(60):
        keys = rng.integers(0, 30, size=int(rng.integers(1, 8))).tolist()
        write = rng.random(len(keys)) < 0.7
        offered = keys if key_form == "list" else np.array(keys, dtype=key_form)
        hits = batch.access_or_put_size_many(offered, 100, write)
        expected = []
        for k, w in zip(keys, write.tolist()):
            if k in single.keys():
                expected.append(True)
                single.get(k)  # an access
            else:
                expected.append(False)
                if w:
                    single.put_size(k, 100)
        assert hits.tolist() == expected
        assert batch.contains_many(keys).tolist() == [single.contains(k) for k in keys]
        assert batch.keys() == single.keys() and batch.policy.keys() == single.policy.keys()
        assert batch.evictions == single.evictions
        assert batch.backend._entries == single.backend._entries  # SimulatedTier.size_writer == put_size
        for stat in ("puts", "bytes_written", "write_seconds", "deletes"):
            assert batch.backend.stats[stat] == single.backend.stats[stat], stat
        batch.check()
    assert batch.evictions > 0
    if policy == "lru-subclass":  # the subclass's own hooks ran for every event
        assert batch.policy.events == single.policy.events > 0


class CountingLRU(LRUPolicy):
    """A subclass: its overridden hooks must run (no fast hooks for it)."""

    def __init__(self):
        super().__init__()
        self.events = 0

    def on_insert(self, key, size=1):
        self.events += 1
        super().on_insert(key, size)

    def on_access(self, key, size=None):
        self.events += 1
        super().on_access(key, size)


def test_fast_hooks_only_for_the_exact_builtin_classes():
    from kvmm.policies.eviction import FIFOPolicy

    assert LRUPolicy().fast_hooks() is not None and FIFOPolicy().fast_hooks() is not None
    assert CountingLRU().fast_hooks() is None


def test_bad_offers_change_nothing():
    tier = _tier("lru")
    tier.access_or_put_size_many([1, 2, 3], 100, [True, True, True])
    before = (tier.keys(), tier.policy.keys(), tier.used_bytes)
    with pytest.raises(BadInputError):
        tier.access_or_put_size_many([4, 5], 100, [True])  # one flag per key
    with pytest.raises(CapacityExceededError):
        tier.access_or_put_size_many([4], 10_000, [True])  # can never fit
    assert (tier.keys(), tier.policy.keys(), tier.used_bytes) == before


def _same_write_stats(batch, single):
    # an access is a policy event, not a backend read (the reference's get() also reads)
    for stat in ("puts", "bytes_written", "write_seconds", "deletes"):
        assert batch.backend.stats[stat] == single.backend.stats[stat], stat


def _one_key_calls(tier, keys, write):
    """The reference: one ``get`` / ``put_size`` per key, as the batch call documents."""
    hits = []
    for k, w in zip(keys, write):
        if k in tier.keys():
            hits.append(True)
            tier.get(k)
        else:
            hits.append(False)
            if w:
                tier.put_size(k, 100)
    return hits


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("room", [0, 1, 2, 3])
def test_prefix_shaped_offer_at_the_capacity_edge(policy, room):
    # hits first, then new keys: the one-run path when the new keys fit (room >= 2), the per-key
    # path with evictions when they do not; both must equal the one-key calls
    batch, single = _tier(policy), _tier(policy)
    for t in (batch, single):
        for k in range(10 - room):
            t.put_size(k, 100)
    offered = [2, 3, 50, 51]  # two hits, two new keys
    hits = batch.access_or_put_size_many(np.array(offered), 100, [True] * 4)
    assert hits.tolist() == _one_key_calls(single, offered, [True] * 4) == [True, True, False, False]
    assert batch.policy.keys() == single.policy.keys() and batch.keys() == single.keys()
    assert batch.evictions == single.evictions == max(0, 2 - room)
    _same_write_stats(batch, single)
    batch.check()


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_prefix_shaped_offer_larger_than_the_tier_evicts_its_own_keys(policy):
    # 12 new keys in a tier of 10: later keys evict earlier ones of the same call (and the hits),
    # so the victims cannot all be taken before one write: it must still equal the one-key calls
    batch, single = _tier(policy), _tier(policy)
    for t in (batch, single):
        for k in range(6):
            t.put_size(k, 100)
    offered = [0, 1] + list(range(100, 112))
    hits = batch.access_or_put_size_many(offered, 100, [True] * len(offered))
    assert hits.tolist() == _one_key_calls(single, offered, [True] * len(offered))
    assert batch.policy.keys() == single.policy.keys() == list(range(102, 112))
    assert batch.evictions == single.evictions == 8  # 6 stored + 12 new - 10 slots
    _same_write_stats(batch, single)
    batch.check()


def test_repeated_and_interleaved_keys_take_the_per_key_path():
    batch, single = _tier("lru"), _tier("lru")
    for t in (batch, single):
        t.put_size(1, 100)
    for offered, write in (([5, 5, 1], [True, True, True]), ([6, 1, 7], [True, False, True]), ([8, 9, 8], [False, True, True])):
        hits = batch.access_or_put_size_many(offered, 100, write)
        assert hits.tolist() == _one_key_calls(single, offered, write)
        assert batch.policy.keys() == single.policy.keys()
        _same_write_stats(batch, single)
        batch.check()


def test_write_may_be_a_function_of_the_managed_mask():
    tier = _tier("lru")
    tier.put_size(1, 100)
    seen = []

    def admit_every_other(cached):
        seen.append(cached.tolist())
        return np.array([True, False, True])

    assert tier.access_or_put_size_many([1, 2, 3], 100, admit_every_other).tolist() == [True, False, False]
    assert seen == [[True, False, False]]
    assert sorted(tier.keys()) == [1, 3]
    with pytest.raises(BadInputError):  # a decision of the wrong length changes nothing
        tier.access_or_put_size_many([4, 5], 100, lambda cached: [True])
    assert sorted(tier.keys()) == [1, 3]


def test_size_writer_many_equals_size_writer_even_over_stored_keys():
    many, one = SimulatedTier(1000, spec="nvme"), SimulatedTier(1000, spec="nvme")
    many.size_writer_many(100)([1, 2, 3])
    for k in (1, 2, 3):
        one.size_writer(100)(k)
    many.size_writer_many(50)([3, 4])  # 3 is stored already: its old size leaves the count
    for k in (3, 4):
        one.size_writer(50)(k)
    assert many._entries == one._entries and many.used_bytes == one.used_bytes == 300
    assert many.stats == one.stats
    with pytest.raises(CapacityExceededError):
        many.size_writer_many(100)([7, 8, 9, 10, 11, 12, 13, 14])  # 1,100 bytes > 1,000
    assert many._entries == one._entries and many.stats == one.stats  # nothing changed
    many.check()


def test_an_entry_written_behind_the_tiers_back_is_never_evicted_by_the_fast_path():
    # the fast eviction path relies on every backend entry being managed; with one that is not,
    # victims are planned as put_size plans them (and a write that cannot fit changes nothing)
    batch, single = _tier("lru"), _tier("lru")
    for t in (batch, single):
        t.backend.put_size("outsider", 500)  # 5 of 10 slots, unknown to the policy
        for k in range(4):
            t.put_size(k, 100)
    offered, write = [0, 20, 21, 22], [True] * 4
    hits = batch.access_or_put_size_many(offered, 100, write)
    assert hits.tolist() == _one_key_calls(single, offered, write)
    assert batch.policy.keys() == single.policy.keys() and batch.evictions == single.evictions == 2
    assert batch.backend.contains("outsider")
    before = (batch.keys(), batch.policy.keys(), batch.used_bytes)
    with pytest.raises(CapacityExceededError):
        batch.access_or_put_size_many([30], 600, [True])  # 600 > 1000 - 500 even with every managed entry gone
    assert (batch.keys(), batch.policy.keys(), batch.used_bytes) == before


@pytest.mark.parametrize("key_form", ["list", "int64"])
def test_prefix_hits_counts_the_leading_managed_keys(key_form):
    tier = _tier("lru")
    for k in (1, 2, 3, 7):
        tier.put_size(k, 100)
    order_before = tier.policy.keys()
    for keys, expected in (([1, 2, 3, 4, 7], 3), ([1, 2, 3], 3), ([4, 1], 0), ([], 0), ([7, 7, 1], 3)):
        offered = keys if key_form == "list" else np.array(keys, dtype=np.int64)
        assert tier.prefix_hits(offered) == expected
        mask = tier.contains_many(keys).tolist() + [False]
        assert expected == mask.index(False)  # the leading run of contains_many
    assert tier.policy.keys() == order_before  # a lookup, not an access
