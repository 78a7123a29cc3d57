"""Eviction policies: the Protocol, bad input, victims semantics, and a stateful test per policy."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from kvmm.errors import BadInputError, DTypeError, KvmmError, UnknownKeyError
from kvmm.policies import EVICTION_POLICIES, ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy, make_eviction_policy
from kvmm.protocols import EvictionPolicy
from tests.tier_factories import POLICIES

IDS = [name for name, _ in POLICIES]
FACTORIES = [factory for _, factory in POLICIES]


def state(policy):
    return policy.lists() if isinstance(policy, ARCPolicy) else (list(policy.keys()), getattr(policy, "_rank", None))


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_speaks_the_protocol(make):
    assert isinstance(make(), EvictionPolicy)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_victims_skip_protected_and_do_not_mutate(make):
    policy = make()
    for k in range(6):
        policy.on_insert(k)
    policy.on_access(2)
    before = state(policy)
    first = policy.victims(3)
    assert policy.victims(3) == first and state(policy) == before
    assert len(first) == 3 and len(set(first)) == 3
    skipping = policy.victims(3, protected={first[0]})
    assert first[0] not in skipping and skipping[:2] == first[1:3]
    assert policy.victims(0) == []
    assert sorted(policy.victims(100)) == list(range(6))
    assert policy.victims(10, protected=range(6)) == []
    assert policy.victims(2, protected=iter([first[0]])) == skipping[:2]  # any iterable


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_bad_calls_raise_and_change_nothing(make):
    policy = make()
    for k in ("a", "b", "c"):
        policy.on_insert(k)
    before = state(policy)
    with pytest.raises(UnknownKeyError, match="does not track"):
        policy.on_access("zzz")
    with pytest.raises(UnknownKeyError):
        policy.on_remove("zzz")
    with pytest.raises(BadInputError, match="already tracks"):
        policy.on_insert("a")
    with pytest.raises(BadInputError):
        policy.victims(-1)
    with pytest.raises(DTypeError):
        policy.victims(1.5)
    assert state(policy) == before
    policy.check()


def test_lfu_counts_and_lru_tie_break():
    policy = LFUPolicy()
    for k in "abc":
        policy.on_insert(k)
    policy.on_access("a")
    policy.on_access("a")
    policy.on_access("c")
    assert policy.frequency("a") == 3 and policy.frequency("b") == 1
    assert policy.victims(3) == ["b", "c", "a"]


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
    assert set(EVICTION_POLICIES) == {"lru", "fifo", "lfu", "arc"}
    assert isinstance(make_eviction_policy("ARC", capacity=4), ARCPolicy)
    with pytest.raises(BadInputError, match="expected one of"):
        make_eviction_policy("mru")


class PolicyMachine(RuleBasedStateMachine):
    """A policy against a model set of tracked keys; ``check()`` after every step."""

    make = LRUPolicy

    def __init__(self):
        super().__init__()
        self.policy = type(self).make()
        self.tracked = set()

    @rule(key=st.integers(0, 12))
    def insert(self, key):
        if key in self.tracked:
            with pytest.raises(BadInputError):
                self.policy.on_insert(key)
        else:
            self.policy.on_insert(key)
            self.tracked.add(key)

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def access(self, data):
        self.policy.on_access(data.draw(st.sampled_from(sorted(self.tracked))))

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def evict_first_victim(self, data):
        protected = set(data.draw(st.lists(st.sampled_from(sorted(self.tracked)), max_size=3)))
        victims = self.policy.victims(2, protected)
        assert set(victims) <= self.tracked - protected
        assert len(victims) == min(2, len(self.tracked - protected))
        if victims:
            self.policy.on_remove(victims[0])
            self.tracked.remove(victims[0])

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def remove(self, data):
        key = data.draw(st.sampled_from(sorted(self.tracked)))
        self.policy.on_remove(key)
        self.tracked.remove(key)

    @invariant()
    def consistent(self):
        self.policy.check()
        assert len(self.policy) == len(self.tracked)
        assert set(self.policy.keys()) == self.tracked
        assert all(k in self.policy for k in self.tracked)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_policy_state_machine(make):
    machine = type("Machine", (PolicyMachine,), {"make": staticmethod(make)})
    run_state_machine_as_test(machine, settings=settings(max_examples=40, stateful_step_count=40, deadline=None))
