"""2Q: the numba replay, TwoQPolicy through ManagedTier, the plain-Python reference
(kvmm/testing/models/twoq.py) and libCacheSim's TwoQ give the same hits request by request; bad options;
a Hypothesis state machine of ManagedTier(TwoQPolicy) against the reference."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies import TwoQPolicy, make_eviction_policy, replay
from kvmm.testing.models.twoq import NaiveTwoQ, replay_twoq_naive
from kvmm.tiers import ManagedTier, SimulatedTier
from tests.policies.eviction import order_parity


def managed_tier_hits(keys, capacity, sizes, **params):
    return order_parity.managed_tier_hits(TwoQPolicy(**params), keys, capacity, sizes, miss=order_parity.store_within_a1in)


def libcachesim_hits(keys, capacity, sizes, **params):
    # a small table: fast to build
    return order_parity.libcachesim_hits("TwoQ", keys, capacity, sizes, hashpower=12, **params)


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_block_streams()


def test_a_ghost_entering_a_full_am_evicts_from_am_although_the_tier_has_room():
    """libCacheSim's Am is a cache of its own (quota c - Kin): a ghost entering a full Am pushes
    out Am's least recent key even when the whole cache has room (on_insert returns it);
    ManagedTier evicts it too and put returns it."""
    policy = TwoQPolicy()
    tier = ManagedTier(SimulatedTier(100), policy)  # Kin 25, Kout 50, Am 75
    assert [tier.put_size(k, 25) for k in "abcd"] == [[], [], [], []]
    assert tier.put_size("e", 20) == ["a"]  # A1in (100) over its quota: a leaves for A1out
    assert tier.put_size("a", 25) == ["b"]  # a's ghost: a enters Am; b leaves A1in
    assert tier.put_size("b", 25) == ["c"]
    assert tier.put_size("c", 25) == ["d"]
    assert policy.queues() == {"A1in": ["e"], "A1out": ["d"], "Am": ["a", "b", "c"]}
    tier.delete("e")  # an explicit delete: no ghost; A1in is now empty, Am full (75)
    assert copy.deepcopy(policy).on_insert("d", 25) == ["a"]
    assert tier.put_size("d", 25) == ["a"]  # 75 + 25 <= 100, but Am's quota is 75
    assert policy.queues() == {"A1in": [], "A1out": [], "Am": ["b", "c", "d"]}
    assert tier.used_bytes == 75
    tier.check()
    model = NaiveTwoQ(100)
    for k, s in zip("abcdeabc", [25] * 4 + [20, 25, 25, 25]):
        model.reference(k, s)
    model.delete("e")
    model.reference("d", 25)
    assert (list(model.a_in), list(model.a_out), list(model.am)) == ([], [], ["b", "c", "d"])


@pytest.mark.parametrize("params", [dict(a_in_size_ratio=0.1, a_out_size_ratio=0.2),
                                    dict(a_in_size_ratio=0.5, a_out_size_ratio=1.5)])
def test_other_shares_equal_libcachesim(block_streams, params):
    keys = block_streams["conversation"][:8000]
    ones = [1] * keys.size
    for capacity in (50, 700):
        ours = replay("2q", keys, capacity, **params).tolist()
        assert ours == libcachesim_hits(keys.tolist(), capacity, ones, **params)
        assert ours == managed_tier_hits(keys.tolist(), capacity, ones, **params)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 24), a_in=st.sampled_from([0.25, 0.1, 0.5]),
       refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 6)), max_size=150))
def test_replay_equals_the_reference_libcachesim_and_managed_tier(capacity, a_in, refs):
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("2q", np.array(keys, np.int64), capacity, np.array(sizes, np.int64), a_in_size_ratio=a_in).tolist()
    assert ours == replay_twoq_naive(keys, capacity, sizes, a_in_size_ratio=a_in)
    if capacity > 0:
        assert ours == libcachesim_hits(keys, capacity, sizes, a_in_size_ratio=a_in)
        assert ours == managed_tier_hits(keys, capacity, sizes, a_in_size_ratio=a_in)


def test_pinned_small_example():
    # capacity 4: Kin 1, Kout 2, Am 3.  a b c d fill A1in; e pushes a (A1in over its quota) out to
    # A1out; a comes back as a ghost into Am and pushes b out; b likewise pushes c out; d is still
    # in A1in (a hit, nothing moves); a is in Am (a hit).
    keys = [0, 1, 2, 3, 4, 0, 1, 3, 0]
    assert replay("2q", keys, 4).tolist() == [False] * 7 + [True, True]
    assert replay_twoq_naive(keys, 4) == [False] * 7 + [True, True]
    policy = TwoQPolicy(capacity=4)
    tier = ManagedTier(SimulatedTier(4), policy)
    for key in keys[:7]:
        tier.put_size(key, 1)
    assert policy.queues() == {"A1in": [3, 4], "A1out": [2], "Am": [0, 1]}


def test_defaults_and_registry_names_are_libcachesims():
    policy = make_eviction_policy("2q")
    assert isinstance(policy, TwoQPolicy)
    assert (policy.a_in_size_ratio, policy.a_out_size_ratio) == (0.25, 0.5)
    assert TwoQPolicy(capacity=1000).quotas() == {"A1in": 250, "A1out": 500, "Am": 750}
    assert TwoQPolicy(capacity=7, a_in_size_ratio=0.3).quotas() == {"A1in": 2, "A1out": 3, "Am": 5}


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(a_in_size_ratio=0.0), BadInputError, "a_in_size_ratio must be in"),
    (dict(a_in_size_ratio=0.75), BadInputError, "a_in_size_ratio must be in"),
    (dict(a_in_size_ratio=float("nan")), BadInputError, "a_in_size_ratio"),
    (dict(a_out_size_ratio=-0.1), BadInputError, "a_out_size_ratio must be >= 0"),
    (dict(a_in_size_ratio="0.2"), DTypeError, "a number"),
    (dict(a_out_size_ratio=True), DTypeError, "a number"),
    (dict(capacity=0), BadInputError, "capacity"),
])
def test_bad_options_name_the_problem(kwargs, error, words):
    with pytest.raises(error, match=words):
        TwoQPolicy(**kwargs)
    if "capacity" not in kwargs:
        with pytest.raises(error, match=words):
            replay("2q", [1, 2], 4, **kwargs)


def test_bad_calls_change_nothing():
    policy = TwoQPolicy(capacity=8)
    for key in range(4):
        policy.on_insert(key)
    before = (policy.queues(), policy.queue_sizes())
    for call, error in [(lambda: policy.on_insert(1), BadInputError), (lambda: policy.on_access(9), UnknownKeyError),
                        (lambda: policy.on_remove(9), UnknownKeyError), (lambda: policy.on_insert(7, -1), BadInputError),
                        (lambda: policy.victims(1, incoming=5, incoming_size=-2), BadInputError),
                        (lambda: policy.on_insert(5, 1, protected=5), DTypeError)]:
        with pytest.raises(error):
            call()
        assert (policy.queues(), policy.queue_sizes()) == before
    policy.check()


def test_explicit_delete_leaves_no_ghost_but_a_planned_eviction_does():
    policy = TwoQPolicy(capacity=4)
    for key in "abcd":
        policy.on_insert(key)
    policy.on_remove("b")  # not planned: a delete
    assert policy.ghosts() == []
    assert policy.victims(1, incoming="e") == ["a"]
    policy.on_remove("a")
    assert policy.ghosts() == ["a"]
    policy.check()


def test_on_evict_is_the_eviction_step_without_a_plan():
    # an owner evicting a batch (vLLM's evict(n)) names no incoming key: on_evict is then the
    # eviction, on_remove the delete; a planned victims(incoming=) + on_remove is the same step
    states = []
    for evict in ("on_evict", "planned", "on_remove"):
        policy = TwoQPolicy(capacity=8)  # Kin 2, Kout 4, Am 6
        for key in "abcdefgh":
            policy.on_insert(key)
        planned = {"incoming": "z"} if evict == "planned" else {}  # None would be a key (issue 33)
        assert policy.victims(1, **planned) == ["a"]  # A1in > Kin
        getattr(policy, "on_remove" if evict == "planned" else evict)("a")
        policy.on_insert("a")  # back: a ghost enters Am, a forgotten key A1in
        policy.check()
        states.append(policy.queues())
    assert states[0] == states[1] == {"A1in": list("bcdefgh"), "A1out": [], "Am": ["a"]}
    assert states[2] == {"A1in": list("bcdefgha"), "A1out": [], "Am": []}
    policy = TwoQPolicy(capacity=8)
    policy.on_insert("a")
    before = policy.queues()
    with pytest.raises(UnknownKeyError, match="does not track 'q' as resident"):
        policy.on_evict("q")
    assert policy.queues() == before
    policy.on_evict("a")  # an Am or A1in key leaves; A1in's becomes a ghost
    assert policy.queues() == {"A1in": [], "A1out": ["a"], "Am": []}


class TwoQMachine(RuleBasedStateMachine):
    """ManagedTier(SimulatedTier, TwoQPolicy) against NaiveTwoQ: references (get or put_size as
    a trace replay does) and explicit deletes; the hits, residents and queues agree."""

    def __init__(self) -> None:
        super().__init__()
        self.capacity = 40
        self.policy = TwoQPolicy()
        self.tier = ManagedTier(SimulatedTier(self.capacity), self.policy)
        self.model = NaiveTwoQ(self.capacity)
        self.size_of: dict = {}

    @rule(key=st.integers(0, 20), size=st.integers(1, 12))
    def reference(self, key: int, size: int) -> None:
        # one size per key, as in a trace: a key too large for A1in is then never a ghost (a miss
        # that libCacheSim does not store still forgets its ghost; ManagedTier sees no event)
        size = self.size_of.setdefault(key, size)
        hit = self.tier.contains(key)
        if hit:
            self.tier.get(key)
            size = self.model.a_in.get(key, self.model.am.get(key))
        elif size <= self.policy.quotas()["A1in"]:
            self.tier.put_size(key, size)
        assert self.model.reference(key, size) == hit

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def delete(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.tier.keys())))
        self.tier.delete(key)
        self.model.delete(key)

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def victims_do_not_change_the_order(self, data) -> None:
        n = data.draw(st.integers(0, 6))
        first = self.policy.victims(n)
        assert first == self.policy.victims(n)
        assert len(first) == min(n, len(self.tier)) and set(first) <= set(self.tier.keys())

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.tier.check()
        queues = self.policy.queues()
        assert queues == {"A1in": list(self.model.a_in), "A1out": list(self.model.a_out), "Am": list(self.model.am)}
        assert set(self.tier.keys()) == self.model.residents()


TestTwoQMachine = TwoQMachine.TestCase
TestTwoQMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
