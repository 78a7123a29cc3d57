"""ManagedTier's batch calls used by the simulator equal the one-key calls, and bad input changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError, CapacityExceededError
from kvmm.policies.eviction import make_eviction_policy
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.simulated import SimulatedTier


def _tier(policy):
    return ManagedTier(SimulatedTier(10 * 100, spec="dram"), make_eviction_policy(policy))


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "arc"])
def test_offer_equals_one_key_calls(policy):
    rng = np.random.default_rng(3)
    batch, single = _tier(policy), _tier(policy)
    for _ in range(60):
        keys = rng.integers(0, 30, size=int(rng.integers(1, 8))).tolist()
        write = rng.random(len(keys)) < 0.7
        hits = batch.access_or_put_size_many(keys, 100, write)
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
        batch.check()
    assert batch.evictions > 0


def test_bad_offers_change_nothing():
    tier = _tier("lru")
    tier.access_or_put_size_many([1, 2, 3], 100, [True, True, True])
    before = (tier.keys(), tier.policy.keys(), tier.used_bytes)
    with pytest.raises(BadInputError):
        tier.access_or_put_size_many([4, 5], 100, [True])  # one flag per key
    with pytest.raises(CapacityExceededError):
        tier.access_or_put_size_many([4], 10_000, [True])  # can never fit
    assert (tier.keys(), tier.policy.keys(), tier.used_bytes) == before
