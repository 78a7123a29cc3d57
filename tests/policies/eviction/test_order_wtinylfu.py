"""W-TinyLFU: kvmm.policies.replay('wtinylfu') == libCacheSim's WTinyLFU == WTinyLFUPolicy through
ManagedTier == the plain-Python reference, request by request (the sketch's hashes included);
options; the policy's state machine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies import WTinyLFUPolicy, make_eviction_policy, replay
from kvmm.policies.eviction.wtinylfu import sketch_shape, sketch_slots, split_capacity
from kvmm.testing.models.wtinylfu import NaiveSketch, NaiveWTinyLFU, replay_wtinylfu_naive, xxh64_u64
from tests.policies.eviction.order_parity import hypothesis_stream, libcachesim_hits, zipf_sized_stream
from tests.policies.eviction.order_parity import managed_tier_hits_admitted as managed_tier_hits


def test_long_stream_with_sketch_halvings_equals_libcachesim():
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.3, 30_000) % 500 * 1_000_003 + 2**40  # large ids: all 64 bits are hashed
    naive = NaiveWTinyLFU(100)
    expected = [naive.get(k, 1) for k in keys.tolist()]
    ours = replay("wtinylfu", keys, 100).tolist()
    assert ours == expected == libcachesim_hits("WTinyLFU", keys.tolist(), 100, [1] * keys.size)
    assert sum(expected) > 3 * naive.max_hits  # several halvings happened


@settings(max_examples=30, deadline=None)
@given(capacity=st.integers(100, 300), window_size=st.sampled_from([0.01, 0.05, 0.2, 0.0]),
       refs=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=300))
def test_wtinylfu_equals_naive_libcachesim_and_managed_tier_on_generated_streams(capacity, window_size, refs):
    keys, sizes = hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("wtinylfu", np.array(keys, np.int64), capacity, np.array(sizes, np.int64),
                  window_size=window_size).tolist()
    assert ours == replay_wtinylfu_naive(keys, capacity, sizes, window_size)
    assert ours == managed_tier_hits(WTinyLFUPolicy(window_size=window_size), keys, capacity, sizes)
    assert ours == libcachesim_hits("WTinyLFU", keys, capacity, sizes, window_size=window_size)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.sampled_from([0x12345678, 0x12344321, 0]))
def test_numba_xxh64_equals_the_reference(value, seed):
    from kvmm.policies.eviction._kernels.wtinylfu import xxh64_u64 as numba_xxh64

    assert int(numba_xxh64(np.uint64(value), np.uint64(seed))) == xxh64_u64(value, seed)


def test_sketch_shape_and_slots_follow_libcachesims_formulas():
    assert sketch_shape(99)[1] == 10  # ceil(ln 2 * -ln(0.001) / ln(2)^2)
    assert sketch_shape(99)[0] == NaiveSketch(99).width == int(np.ceil(-np.log(0.001) / np.log(2) ** 2 * 99))
    assert sketch_shape(0) == (20, 10)  # too few counters: 2 * hashes
    width, hashes = sketch_shape(4000)
    assert sketch_slots(2**40 + 3, width, hashes) == NaiveSketch(4000).slots(2**40 + 3)


def test_split_and_small_capacities():
    assert split_capacity(510, 0.01) == (5, 505, [101, 404])
    assert split_capacity(99, 0.01)[0] == 0
    # below 1 / window_size the window is 0 and libCacheSim caches nothing
    keys = [1, 1, 2, 1]
    assert replay("wtinylfu", keys, 99).tolist() == [False] * 4 == libcachesim_hits("WTinyLFU", keys, 99, [1] * 4)
    assert not WTinyLFUPolicy(capacity=99).admits(1)


def test_pinned_small_example():
    # capacity 100: window 1, main 99 (segments 19 + 79).  The cache fills the window first
    # (nothing moves until an eviction), so 0..99 all stay; 100 makes main take the 99 least
    # recent (0..98), then the window's LRU key 99 competes with main's victim 0: 0 counts 2 (its
    # insert and its move; a window hit does not count), 99 counts 1, so 99 is evicted.  0 then
    # hits in main (its promotion cools segment 1 into segment 0, which evicts 1), so 99 misses
    # and fits without an eviction, and 100 hits in the window.
    keys = [0, 0] + list(range(1, 101)) + [0, 99, 100]
    hits = replay("wtinylfu", keys, 100).tolist()
    assert hits[:2] == [False, True] and not any(hits[2:102])
    assert hits[102:] == [True, False, True]
    assert hits == libcachesim_hits("WTinyLFU", keys, 100, [1] * len(keys))


@pytest.mark.parametrize("kwargs, error, words", [
    ({"main_cache": "LRU"}, BadInputError, "main_cache must be 'SLRU'"),
    ({"window_size": 1.0}, BadInputError, r"\[0, 1\)"), ({"window_size": -0.1}, BadInputError, r"\[0, 1\)"),
    ({"window_size": "0.1"}, DTypeError, "window_size must be a number"),
    ({"capacity": 0}, BadInputError, "capacity"),
])
def test_bad_options_raise(kwargs, error, words):
    with pytest.raises(error, match=words):
        WTinyLFUPolicy(**kwargs)
    if "capacity" not in kwargs:
        with pytest.raises(error, match=words):
            replay("wtinylfu", [1, 2], 200, **kwargs)


def test_registry_and_defaults():
    policy = make_eviction_policy("wtinylfu", capacity=1000)
    assert (policy.window_capacity, policy.main_capacity) == (10, 990)
    assert (policy.main_cache, policy.window_size) == ("SLRU", 0.01)


def test_bad_calls_change_nothing():
    policy = WTinyLFUPolicy(capacity=200)
    for k in range(5):
        policy.on_insert(k)
    before = (policy.lists(), policy.victims(5))
    for call, error in ((lambda: policy.on_insert(1), BadInputError), (lambda: policy.on_access(9), UnknownKeyError),
                        (lambda: policy.on_remove(9), UnknownKeyError),
                        (lambda: policy.on_insert(9, -1), BadInputError),
                        (lambda: policy.victims(1, incoming_size=-1), BadInputError)):
        with pytest.raises(error):
            call()
        assert (policy.lists(), policy.victims(5)) == before
    policy.check()


class WTinyLFUMachine(RuleBasedStateMachine):
    """Inserts (evicting the policy's first victims while full), accesses and explicit removes
    against the naive reference (capacity 120, window 6): the same lists and the same counters."""

    def __init__(self):
        super().__init__()
        self.policy = WTinyLFUPolicy(capacity=120, window_size=0.05)
        self.model = NaiveWTinyLFU(120, 0.05)

    @rule(key=st.integers(0, 200))
    def insert(self, key):
        if key in self.policy:
            return
        extra = []  # what the planned steps evicted besides their victims: the insert hands it over
        while self.model.used() + 1 > 120:
            victim = self.policy.victims(1, protected=extra, incoming=key)[0]
            self.model.evict()
            assert victim == self.model.main.evicted.pop(0)
            self.policy.on_remove(victim)
            extra += self.model.main.evicted
            self.model.main.evicted = []
        assert list(self.policy.on_insert(key)) == extra and not any(k in self.policy for k in extra)
        self.model.get(key, 1)

    @precondition(lambda self: len(self.policy) > 0)
    @rule(data=st.data())
    def access(self, data):
        key = data.draw(st.sampled_from(sorted(self.policy.keys())))
        evicted = self.policy.on_access(key)
        assert self.model.get(key, 1)
        assert list(evicted) == self.model.main.evicted and not any(k in self.policy for k in evicted)
        self.model.main.evicted = []

    @precondition(lambda self: len(self.policy) > 0)
    @rule(data=st.data())
    def remove(self, data):
        key = data.draw(st.sampled_from(sorted(self.policy.keys())))
        if key == self.policy.victims(1)[0]:
            # right after victims() a remove of its first key is the planned eviction step
            self.model.evict()
            assert key == self.model.main.evicted.pop(0)
            self.policy.on_remove(key)
            for other in self.model.main.evicted:  # the step's other victims, which victims() lists next
                self.policy.on_remove(other)
            self.model.main.evicted = []
            return
        self.policy.on_remove(key)
        if key in self.model.window:
            self.model.window_bytes -= self.model.window.pop(key)
        else:
            self.model.main._pop(key)

    @invariant()
    def same_state_and_check(self):
        lists = self.policy.lists()
        assert lists["window"] == list(self.model.window)
        assert [lists["probation"], lists["protected"]] == [list(s) for s in self.model.main.segs]
        assert self.policy._sketch.counters == {x: c for x, c in enumerate(self.model.sketch.counters) if c}
        assert sorted(self.policy.victims(len(self.policy) + 1)) == sorted(self.policy.keys())
        self.policy.check()


TestWTinyLFUMachine = WTinyLFUMachine.TestCase
TestWTinyLFUMachine.settings = settings(max_examples=25, stateful_step_count=60, deadline=None)


def test_byte_capacity_sketch_is_sparse_and_the_replay_compacts_it():
    # libCacheSim sizes the sketch by main's bytes (here ~72 M counters); kvmm keeps only the
    # slots the keys use, and both kvmm implementations still agree request by request
    capacity = 5_000_000
    keys, sizes = zipf_sized_stream(capacity, n=3000, universe=400, max_size=capacity // 100)
    policy = WTinyLFUPolicy()
    ours = replay("wtinylfu", keys, capacity, sizes).tolist()
    assert ours == managed_tier_hits(policy, keys.tolist(), capacity, sizes.tolist())
    assert policy._sketch.width > 70_000_000 and len(policy._sketch.counters) <= 400 * 10
    assert 0 < sum(ours)


def test_counters_past_uint16_spill_into_overflow_and_equal_libcachesim():
    # main 9,900: no halving before 316,800 main hits, so key 0's counters pass 2^16 - 1 (the
    # replay's uint16 counters continue in their uint32 overflow array) while other keys compete
    rng = np.random.default_rng(3)
    keys = np.where(rng.random(80_000) < 0.9, 0, rng.integers(1, 30_000, 80_000)).astype(np.int64)
    ours = replay("wtinylfu", keys, 10_000).tolist()
    assert (keys == 0).sum() > 70_000
    assert ours == replay_wtinylfu_naive(keys.tolist(), 10_000)
    assert ours == libcachesim_hits("WTinyLFU", keys.tolist(), 10_000, [1] * keys.size)
