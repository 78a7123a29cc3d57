"""Eviction policies: the exact orders and parameters of each kvmm policy.

The Protocol, bad input, victims semantics and a stateful test per policy are the contract suite
(kvmm.testing.EvictionPolicyContract, run over every policy in tests/policies/eviction/test_contract_policy_tier.py)."""

import pytest

from kvmm.errors import BadInputError, KvmmError, UnknownKeyError
from kvmm.policies import EVICTION_POLICIES, ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy, make_eviction_policy


def test_lfu_counts_and_lru_tie_break():
    policy = LFUPolicy()
    for k in "abc":
        policy.on_insert(k)
    policy.on_access("a")
    policy.on_access("a")
    policy.on_access("c")
    assert policy.frequency("a") == 3 and policy.frequency("b") == 1
    assert policy.victims(3) == ["b", "c", "a"]


def test_lfu_touch_moves_the_tie_break_and_keeps_the_count():
    policy = LFUPolicy()
    for k in "abcd":
        policy.on_insert(k)
    policy.on_access("d")
    policy.touch("a")  # an uncounted reference: a is now the most recent of count 1
    assert policy.victims(4) == ["b", "c", "a", "d"]
    assert [policy.frequency(k) for k in "abcd"] == [1, 1, 1, 2]
    policy.touch("d")  # alone at count 2: nothing moves
    assert policy.victims(4) == ["b", "c", "a", "d"] and policy.frequency("d") == 2
    policy.check()
    before = (dict(policy._rank), list(policy._order.items()))
    with pytest.raises(UnknownKeyError):
        policy.touch("z")
    assert (dict(policy._rank), list(policy._order.items())) == before  # a refused touch changes nothing


def test_fifo_ignores_access_and_lru_honours_it():
    fifo, lru = FIFOPolicy(), LRUPolicy()
    for p in (fifo, lru):
        for k in range(3):
            p.on_insert(k)
        p.on_access(0)
    assert fifo.victims(3) == [0, 1, 2]
    assert lru.victims(3) == [1, 2, 0]


def test_arc_removed_keys_become_ghosts_and_bounds_hold():
    policy = ARCPolicy(capacity=2)
    for k in range(2):
        policy.on_insert(k)
    policy.on_access(0)  # 0 -> T2
    policy.on_remove(1)  # T1 -> B1
    policy.on_remove(0)  # T2 -> B2
    assert policy.ghosts() == ([1], [0]) and len(policy) == 0
    policy.on_insert(1)  # B1 ghost hit: p grows, 1 goes straight to T2
    assert policy.p == 1.0 and policy.lists()["T2"] == [1]
    policy.check()
    with pytest.raises(UnknownKeyError):
        policy.on_remove(0)  # a ghost is not resident


@pytest.mark.parametrize("kwargs", [dict(capacity=0), dict(capacity=-3), dict(capacity=2.5)])
def test_arc_rejects_bad_capacity(kwargs):
    with pytest.raises(KvmmError):
        ARCPolicy(**kwargs)


def test_registry_and_factory():
    assert set(EVICTION_POLICIES) == {
        "lru",
        "fifo",
        "lfu",
        "arc",
        "clock",
        "belady",
        "s3fifo",
        "sieve",
        "2q",
        "lirs",
        "slru",
        "wtinylfu",
    }
    assert isinstance(make_eviction_policy("ARC", capacity=4), ARCPolicy)
    with pytest.raises(BadInputError, match="expected one of"):
        make_eviction_policy("mru")
