"""SIEVE: replay("sieve") == libCacheSim's Sieve == ManagedTier(SIEVEPolicy) == the naive
reference, request by request (entry counts and bytes, Mooncake blocks, Hypothesis streams); a
pinned worked example; explicit deletes and the hand; a state machine of the policy's plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, UnknownKeyError
from kvmm.policies import SIEVEPolicy, make_eviction_policy, replay
from kvmm.testing.models.sieve import replay_sieve_naive
from tests.policies.eviction import order_parity


def libcachesim_hits(keys, capacity, sizes):
    return order_parity.libcachesim_hits("Sieve", keys, capacity, sizes)


def managed_tier_hits(keys, capacity, sizes):
    return order_parity.managed_tier_hits(SIEVEPolicy(), keys, capacity, sizes)


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_request_blocks()


@pytest.mark.parametrize("capacity", [64, 4096])
def test_managed_tier_batch_offers_equal_the_replay(block_streams, capacity):
    # the simulator's path: one access_or_put_size_many per request (SIEVE's fast hooks)
    hits = order_parity.batch_offer_hits(make_eviction_policy("sieve"), block_streams["synthetic"], capacity)
    assert hits == replay("sieve", np.concatenate(block_streams["synthetic"]), capacity).tolist()


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 14), refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), max_size=150))
def test_hypothesis_streams_agree_everywhere(capacity, refs):
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("sieve", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    assert ours == replay_sieve_naive(keys, capacity, sizes)
    assert ours == libcachesim_hits(keys, capacity, sizes)
    assert ours == managed_tier_hits(keys, capacity, sizes)


def test_pinned_worked_example():
    policy = SIEVEPolicy()
    for k in "abcde":  # queue, oldest first: a b c d e
        policy.on_insert(k)
    policy.on_access("a")
    policy.on_access("b")
    policy.on_access("d")
    # the hand starts at the tail: a, b are visited (cleared), c leaves; the hand rests on d,
    # visited (cleared), so e leaves; past the head it wraps to the tail: a (now clear) leaves
    assert policy.victims(3) == ["c", "e", "a"]
    assert policy.victims(2, protected={"c"}) == ["e", "a"]
    policy.victims(3)
    policy.on_remove("c")
    assert policy.hand() == (True, "d") and not policy.visited("a") and not policy.visited("b")
    assert policy.visited("d")  # the hand has not passed d yet
    policy.on_insert("f")
    assert policy.keys() == ["a", "b", "d", "e", "f"]
    assert policy.victims(1) == ["e"]  # d is cleared, e leaves
    policy.check()
    # the same stream as libCacheSim's get sees it (capacity 5, then c evicted for f)
    keys = list("abcde") + list("abd") + ["f", "c"]
    assert replay("sieve", [ord(k) for k in keys], 5).tolist() == [False] * 5 + [True] * 3 + [False, False]


def test_explicit_delete_moves_a_hand_resting_on_it():
    policy = SIEVEPolicy()
    for k in range(4):
        policy.on_insert(k)
    policy.on_access(0)
    assert policy.victims(1) == [1]
    policy.on_remove(1)  # evicts 1; the hand rests on 2
    assert policy.hand() == (True, 2)
    policy.on_remove(2)  # a delete: the hand moves to 3
    assert policy.hand() == (True, 3)
    policy.on_remove(3)  # the head: the hand is unset, the next sweep starts at the tail
    assert policy.hand() == (False, None)
    assert policy.victims(5) == [0]  # 0's bit was cleared by the first sweep
    policy.check()
    with pytest.raises(UnknownKeyError):
        policy.on_access(3)


def test_takes_no_options():
    with pytest.raises(BadInputError, match="takes no option"):
        make_eviction_policy("sieve", capacity=3)
    with pytest.raises(BadInputError, match="takes no option"):
        replay("sieve", [1, 2], 3, window=2)


class SIEVEPlanMachine(RuleBasedStateMachine):
    """SIEVEPolicy against its tracked keys: inserts, accesses, deletes, and evictions of a
    prefix of a ``victims(n, protected)`` plan.  ``check()`` after every step; the whole order
    lists exactly the tracked keys."""

    def __init__(self):
        super().__init__()
        self.policy = SIEVEPolicy()
        self.tracked: set = set()

    @rule(key=st.integers(0, 20))
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
    def delete(self, data):
        key = data.draw(st.sampled_from(sorted(self.tracked)))
        self.policy.on_remove(key)
        self.tracked.remove(key)

    @precondition(lambda self: self.tracked)
    @rule(data=st.data(), n=st.integers(1, 6))
    def evict_prefix(self, data, n):
        for key in order_parity.evict_a_planned_prefix(self.policy, self.tracked, data, n):
            self.tracked.remove(key)

    @invariant()
    def consistent(self):
        self.policy.check()
        order = self.policy.victims(len(self.tracked) + 1)
        assert sorted(order) == sorted(self.tracked) and len(self.policy) == len(self.tracked)


TestSIEVEPlanMachine = SIEVEPlanMachine.TestCase
TestSIEVEPlanMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_runs_in_the_simulator_by_name(capsys):
    rows = order_parity.simulate_rows("sieve", capsys)
    assert len(rows) == 1 and rows[0]["tier_evictions"][0] > 0  # 8 GiB of DRAM filled up and evicted


def test_deep_and_pickled_copies_keep_working():
    import copy
    import pickle

    policy = SIEVEPolicy()
    for k in range(5):
        policy.on_insert(k)
    policy.on_access(0)
    policy.on_remove(policy.victims(1)[0])
    for clone in (copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        clone.check()
        assert clone.keys() == policy.keys() and clone.hand() == policy.hand()
        assert clone.victims(4) == policy.victims(4)


@settings(max_examples=80, deadline=None)
@given(capacity=st.integers(1, 30), refs=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 8)), max_size=120))
def test_sizes_that_change_between_references_match_libcachesim(capacity, refs):
    keys, sizes = [k for k, _ in refs], [s for _, s in refs]  # a miss uses the size of that reference
    ours = replay("sieve", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    assert ours == replay_sieve_naive(keys, capacity, sizes)
    assert ours == libcachesim_hits(keys, capacity, sizes)
