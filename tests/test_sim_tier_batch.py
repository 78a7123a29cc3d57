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
