"""Regression tests of issue 12's bad-input list: each call raised a built-in error (or was
accepted silently) and now raises a KvmmError with the structure unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import BadInputError, DTypeError, KvmmError, ShapeError
from kvmm.policies import ShardsTracker, StackDistanceTracker
from kvmm.policies.eviction import EVICTION_POLICIES, LRUPolicy, make_eviction_policy
from kvmm.tiers import ArenaTier, ManagedTier, SimulatedTier
from tests.state_snapshot import raises_unchanged

RAGGED = [[1, 2], [3]]


def deep_key(depth=5000):
    key = 0
    for _ in range(depth):
        key = (key,)
    return key


@pytest.mark.parametrize("name", sorted(EVICTION_POLICIES))
def test_eviction_policies_refuse_unhashable_keys_and_non_iterable_protected(name):
    pol = make_eviction_policy(name)
    pol.on_insert(1)
    for call in (lambda: pol.on_insert([1]), lambda: pol.on_access({}), lambda: pol.on_remove(np.zeros(2))):
        raises_unchanged(pol, DTypeError, call)
    raises_unchanged(pol, DTypeError, pol.victims, 1, 5)
    raises_unchanged(pol, DTypeError, pol.victims, 1, [[1]])
    raises_unchanged(pol, DTypeError, pol.victims, 1, "1")
    raises_unchanged(pol, DTypeError, pol.victims, 1, (), incoming=[2])
    assert pol.victims(1, {2}) == [1]
    pol.check()


def test_make_eviction_policy_refuses_options_the_policy_does_not_take():
    with pytest.raises(BadInputError, match="takes no option 'capacity'"):
        make_eviction_policy("lru", capacity=5)
    with pytest.raises(BadInputError, match="ghost_limit"):
        make_eviction_policy("arc", size=5)
    assert make_eviction_policy("arc", capacity=5).c == 5


def test_ragged_keys_in_block_allocator_and_trackers():
    alloc = BlockAllocator(16, 4)
    raises_unchanged(alloc, ShapeError, alloc.lookup, RAGGED)
    raises_unchanged(alloc, ShapeError, alloc.admit, RAGGED)
    alloc.check()
    for tracker in (StackDistanceTracker(), ShardsTracker(0.5), ShardsTracker(fixed_size=8)):
        raises_unchanged(tracker, ShapeError, tracker.access, RAGGED)
        raises_unchanged(tracker, DTypeError, tracker.access, [1, True])
        tracker.check()


@pytest.mark.parametrize("make", [lambda: ArenaTier(1000), lambda: SimulatedTier(1000),
                                  lambda: ManagedTier(ArenaTier(1000), LRUPolicy())])
def test_tiers_refuse_ragged_values_bad_key_lists_and_deep_keys(make):
    tier = make()
    tier.put(1, np.zeros(2))
    raises_unchanged(tier, ShapeError, tier.put, 2, RAGGED)
    raises_unchanged(tier, DTypeError, tier.get_many, 5)
    raises_unchanged(tier, DTypeError, tier.get_many, "1")
    raises_unchanged(tier, BadInputError, tier.put, deep_key(), np.zeros(2))
    tier.put(deep_key(32), np.zeros(1))  # 32 levels are fine
    assert [v.tolist() for v in tier.get_many([1])] == [[0.0, 0.0]]
    tier.check()


def test_managed_tier_refuses_a_non_iterable_protected():
    tier = ManagedTier(ArenaTier(1000), LRUPolicy())
    tier.put(1, np.zeros(2))
    raises_unchanged(tier, DTypeError, tier.put, 2, np.zeros(2), protected=5)
    raises_unchanged(tier, DTypeError, tier.put, 2, np.zeros(2), protected="1")
    tier.check()


@pytest.mark.parametrize("kwargs, exc", [
    (dict(initial_tokens="many"), DTypeError), (dict(initial_tokens=float("nan")), DTypeError),
    (dict(initial_tokens=None), DTypeError), (dict(initial_tokens=-5), BadInputError),
    (dict(initial_tokens=2**62), BadInputError), (dict(initial_sequences=2.5), DTypeError),
    (dict(initial_sequences=-1), BadInputError), (dict(initial_sequences=2**40), BadInputError),
])
def test_token_table_constructor_refuses_nonsense(kwargs, exc):
    with pytest.raises(exc):
        TokenTable(BlockAllocator(16, 4), **kwargs)


def test_token_table_plan_budget_beyond_int64():
    table = TokenTable(BlockAllocator(16, 4))
    raises_unchanged(table, BadInputError, table.plan, budget=2**64)
    table.plan(budget=2**63 - 1)  # the largest budget is fine
    table.check()


def test_group_histogram_refuses_non_integer_groups():
    tracker = StackDistanceTracker()
    tracker.access([1, 2, 1], groups=[0, 0, 1])
    raises_unchanged(tracker, DTypeError, tracker.group_histogram, None)
    raises_unchanged(tracker, DTypeError, tracker.group_histogram, 1.5)
    assert tracker.group_histogram(1).total == 1  # a real group still answers


@pytest.mark.parametrize("kwargs", [dict(initial_keys=2**62), dict(initial_keys=0), dict(initial_keys=1.5)])
def test_tracker_preallocation_is_bounded(kwargs):
    with pytest.raises(KvmmError):
        StackDistanceTracker(**kwargs)
    with pytest.raises(KvmmError):
        ShardsTracker(0.1, **kwargs)
    with pytest.raises(BadInputError):
        ShardsTracker(fixed_size=2**62)
