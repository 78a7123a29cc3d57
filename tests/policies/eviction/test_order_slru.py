"""SLRU: kvmm.policies.replay('slru') == libCacheSim's SLRU == SLRUPolicy through ManagedTier ==
the plain-Python reference, request by request; options; the policy's state machine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, UnknownKeyError
from kvmm.policies import SLRUPolicy, make_eviction_policy, replay
from kvmm.testing.models.slru import NaiveSLRU, segment_maxima
from kvmm.tiers import ManagedTier, SimulatedTier
from tests.policies.eviction.order_parity import (
    hypothesis_stream,
    libcachesim_hits,
    mooncake_block_streams,
    zipf_sized_stream,
)
from tests.policies.eviction.order_parity import managed_tier_hits_admitted as managed_tier_hits


@pytest.fixture(scope="module")
def block_streams():
    return mooncake_block_streams()


def test_byte_sized_hits_evict_through_cooling():
    """With sizes a hit's cooling evicts from segment 0; ManagedTier deletes those keys."""
    keys, sizes = zipf_sized_stream(2500)
    policy = SLRUPolicy()
    tier = ManagedTier(SimulatedTier(2500), policy)
    dropped_on_hit = 0
    for key, size in zip(keys.tolist(), sizes.tolist()):
        if tier.contains(key):
            before = len(tier)
            tier.get(key)
            dropped_on_hit += before - len(tier)
        elif policy.admits(size):
            tier.put_size(key, size)
    assert dropped_on_hit > 0 and len(policy) == len(tier)  # the evicted keys are no longer tracked
    tier.check()


@settings(max_examples=120, deadline=None)
@given(capacity=st.integers(1, 40), options=st.sampled_from([{}, {"n_seg": 2}, {"seg_size": (1, 4)}, {"n_seg": 1}]),
       refs=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 12)), max_size=150))
def test_slru_equals_naive_libcachesim_and_managed_tier_on_generated_streams(capacity, options, refs):
    keys, sizes = hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("slru", np.array(keys, np.int64), capacity, np.array(sizes, np.int64), **options).tolist()
    maxima = segment_maxima(capacity, options.get("n_seg", 4), options.get("seg_size"))
    naive = NaiveSLRU(capacity, maxima)
    assert ours == [naive.get(k, s) for k, s in zip(keys, sizes)]
    assert ours == managed_tier_hits(SLRUPolicy(**options), keys, capacity, sizes)
    if not options:  # libCacheSim's Python SLRU takes no options
        assert ours == libcachesim_hits("SLRU", keys, capacity, sizes)


def test_pinned_small_example():
    # capacity 4, four segments of 1: a b fill segments 0, 1; the hit on a moves it up and cools b
    # down; c, d fill segments 2, 3; e evicts segment 0's tail b; b misses; a (segment 1) hits
    keys = [0, 1, 0, 2, 3, 4, 1, 0]
    assert replay("slru", keys, 4).tolist() == [False, False, True, False, False, False, False, True]
    policy = SLRUPolicy(capacity=4)
    for k in (0, 1):
        policy.on_insert(k)
    policy.on_access(0)
    assert policy.segments() == [[1], [0], [], []]
    assert policy.victims(2) == [1, 0]


def test_defaults_and_maxima_are_libcachesims():
    assert SLRUPolicy(capacity=10).maxima == [2, 2, 2, 2]  # capacity // n_seg
    assert SLRUPolicy(capacity=99, seg_size=(1, 4)).maxima == [19, 79]  # int(ratio / sum * capacity)
    assert make_eviction_policy("slru", n_seg=3).maxima == [0, 0, 0]  # standalone: grows with residents


@pytest.mark.parametrize("kwargs, words", [
    ({"n_seg": 0}, "n_seg must be in"), ({"n_seg": 17}, "n_seg must be in"), ({"n_seg": 1.5}, "n_seg"),
    ({"seg_size": (0, 0)}, "positive sum"), ({"seg_size": 3}, "sequence"), ({"seg_size": (1, -1)}, "ratio"),
    ({"capacity": 0}, "capacity"),
])
def test_bad_options_raise(kwargs, words):
    with pytest.raises(BadInputError, match=words):
        SLRUPolicy(**kwargs)


def test_replay_bad_option_raises():
    with pytest.raises(BadInputError, match="n_seg must be in"):
        replay("slru", [1, 2], 4, n_seg=0)
    with pytest.raises(BadInputError, match="takes no option 'window_size'"):
        replay("slru", [1, 2], 4, window_size=0.1)


def test_bad_calls_change_nothing():
    policy = SLRUPolicy(capacity=8)
    for k in range(5):
        policy.on_insert(k)
    before = (policy.segments(), policy.keys())
    for call, error in ((lambda: policy.on_insert(1), BadInputError), (lambda: policy.on_access(9), UnknownKeyError),
                        (lambda: policy.on_remove(9), UnknownKeyError),
                        (lambda: policy.on_insert(9, -1), BadInputError)):
        with pytest.raises(error):
            call()
        assert (policy.segments(), policy.keys()) == before
    policy.check()


def test_a_hit_returns_the_keys_its_cooling_evicted_and_forgets_them():
    policy = SLRUPolicy(capacity=10)  # 4 x 2; the cache holds up to 10, segment 0 overfills
    for k in range(10):
        assert policy.on_insert(k) == ()  # an insert never cools
    assert policy.segments() == [[0, 1, 8, 9], [2, 3], [4, 5], [6, 7]]  # 8, 9: no segment had room
    # to segment 1; its tail 2 cools into segment 0 (over: 1 8 9 2), which evicts 1, 8
    assert policy.on_access(0) == [1, 8]
    assert 1 not in policy and 8 not in policy and len(policy) == 8 and policy.victims(1) == [9]
    with pytest.raises(UnknownKeyError):  # evicted: no longer tracked (the owner inserts it afresh)
        policy.on_access(1)
    assert policy.on_insert(1) == () and 1 in policy.segments()[0]
    with pytest.raises(UnknownKeyError):
        policy.on_remove(8)
    policy.check()


class SLRUMachine(RuleBasedStateMachine):
    """Inserts, accesses, removes and evictions of the first victim against a model: the naive
    reference's segments (sizes 1, fixed capacity), with dropped keys removed as ManagedTier does."""

    def __init__(self):
        super().__init__()
        self.policy = SLRUPolicy(capacity=9)
        self.model = NaiveSLRU(9, segment_maxima(9))


    @rule(key=st.integers(0, 14))
    def insert(self, key):
        if key in self.policy:
            return
        while self.model.used() + 1 > 9:
            victim = self.policy.victims(1)[0]
            assert victim == self.model.evict()
            self.policy.on_remove(victim)
            self.model.evicted = []
        self.policy.on_insert(key)
        self.model.insert(key, 1)

    @precondition(lambda self: len(self.policy) > 0)
    @rule(data=st.data())
    def access(self, data):
        key = data.draw(st.sampled_from(sorted(self.model.where)))
        evicted = self.policy.on_access(key)
        self.model.hit(key)
        assert list(evicted) == self.model.evicted and not any(k in self.policy for k in evicted)
        self.model.evicted = []

    @precondition(lambda self: len(self.policy) > 0)
    @rule(data=st.data())
    def remove(self, data):
        key = data.draw(st.sampled_from(sorted(self.model.where)))
        self.policy.on_remove(key)
        self.model._pop(key)

    @invariant()
    def same_segments_and_check(self):
        assert self.policy.segments() == [list(s) for s in self.model.segs]
        assert self.policy.victims(len(self.policy)) == self.policy.keys()
        self.policy.check()


TestSLRUMachine = SLRUMachine.TestCase
TestSLRUMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


@pytest.mark.parametrize("order, capacity", [("slru", 1000), ("wtinylfu", 13_000)])
def test_managed_tier_batch_offers_equal_the_replay(block_streams, order, capacity):
    """The simulator's path (access_or_put_size_many, 100-byte blocks) deletes the keys a hit's
    cooling drops, request by request as the replay (with 4 x 250 bytes, SLRU's hits can evict)."""
    from kvmm.policies import WTinyLFUPolicy

    trace = block_streams["conversation"][:6000]
    tier = ManagedTier(SimulatedTier(capacity), SLRUPolicy() if order == "slru" else WTinyLFUPolicy())
    got = []
    for start in range(0, trace.size, 7):  # requests of 7 blocks
        blocks = trace[start:start + 7]
        got += tier.access_or_put_size_many(blocks, 100, np.ones(blocks.size, bool)).tolist()
        assert tier.used_bytes <= capacity and len(tier.policy) == len(tier)  # every evicted key deleted
    tier.check()
    expected = replay(order, trace, capacity, np.full(trace.size, 100)).tolist()
    assert got == expected and 0 < sum(got)
