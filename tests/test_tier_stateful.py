"""Hypothesis stateful tests: every tier against a dict model, ``check()`` after every step.

MmapTier's machine also closes and reopens the folder (a restart) and compacts at random
points; the model must survive both unchanged.
"""

import shutil
import tempfile
import uuid

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from kvmm.errors import CapacityExceededError, UnknownKeyError
from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.tiers import ArenaTier, ManagedTier, MmapTier, RedisTier, SimulatedTier
from tests.redis_server import *  # noqa: F401,F403  (fixtures)

CAPACITY = 600
KEYS = st.one_of(st.integers(0, 9), st.sampled_from(["a", "b", ("t", 1), b"k"]))
DTYPES = st.sampled_from([np.uint8, np.float16, np.int32, np.float64, np.bool_])
SHAPES = st.sampled_from([(), (0,), (3,), (2, 5), (4, 4, 2), (40,)])


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(DTYPES))
    shape = draw(SHAPES)
    seed = draw(st.integers(0, 255))
    n = int(np.prod(shape))
    return ((np.arange(n) + seed) % 7).astype(dtype).reshape(shape)


class TierMachine(RuleBasedStateMachine):
    """A tier against ``model: key -> array``; subclasses say how to build the tier."""

    holds_bytes = True

    def __init__(self):
        super().__init__()
        self.model = {}
        self.tier = self.make_tier()

    def make_tier(self):
        raise NotImplementedError

    def used(self):
        return sum(a.nbytes for a in self.model.values())

    @rule(key=KEYS, arr=arrays())
    def put(self, key, arr):
        old = self.model.get(key)
        if self.used() - (old.nbytes if old is not None else 0) + arr.nbytes > CAPACITY:
            with pytest.raises(CapacityExceededError):
                self.tier.put(key, arr)
        else:
            self.tier.put(key, arr)
            self.model[key] = arr

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def get(self, data):
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        got = self.tier.get(key)
        want = self.model[key]
        assert got.dtype == want.dtype and got.shape == want.shape
        if self.holds_bytes:
            np.testing.assert_array_equal(got, want)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        self.tier.delete(key)
        del self.model[key]

    @rule(key=KEYS)
    def missing_key_raises(self, key):
        if key not in self.model:
            with pytest.raises(UnknownKeyError):
                self.tier.get(key)
            with pytest.raises(UnknownKeyError):
                self.tier.delete(key)
        assert self.tier.contains(key) == (key in self.model)

    @invariant()
    def agrees_with_model(self):
        self.tier.check()
        assert self.tier.used_bytes == self.used()
        assert sorted(self.tier.keys(), key=repr) == sorted(self.model, key=repr)


class ArenaMachine(TierMachine):
    def make_tier(self):
        return ArenaTier(CAPACITY)


class SimulatedMachine(TierMachine):
    holds_bytes = False

    def make_tier(self):
        return SimulatedTier(CAPACITY)


class MmapMachine(TierMachine):
    def make_tier(self):
        self.folder = tempfile.mkdtemp(prefix="kvmm-mmap-")
        return MmapTier(self.folder, CAPACITY, segment_bytes=256, gc_bytes=300)

    @rule()
    def restart(self):
        self.tier.close()
        self.tier = MmapTier(self.folder, CAPACITY, segment_bytes=256, gc_bytes=300)
        assert self.tier.recovery["torn"] == 0 and self.tier.recovery["corrupt"] == 0

    @rule()
    def compact_everything(self):
        self.tier.compact(full=True)
        assert self.tier.garbage_bytes == 0

    def teardown(self):
        self.tier.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class RedisMachine(TierMachine):
    url = None

    def make_tier(self):
        return RedisTier(CAPACITY, url=self.url, prefix=f"kvmm-sm-{uuid.uuid4().hex[:10]}")

    def teardown(self):
        self.tier.drop_pool()
        self.tier.close()


FAST = settings(max_examples=40, stateful_step_count=30, deadline=None)
IO = settings(max_examples=25, stateful_step_count=30, deadline=None)


def test_arena_tier_matches_a_dict():
    run_state_machine_as_test(ArenaMachine, settings=FAST)


def test_simulated_tier_matches_a_dict():
    run_state_machine_as_test(SimulatedMachine, settings=FAST)


def test_mmap_tier_matches_a_dict_across_restarts_and_compactions():
    run_state_machine_as_test(MmapMachine, settings=IO)


def test_redis_tier_matches_a_dict(redis_url):
    RedisMachine.url = redis_url
    run_state_machine_as_test(RedisMachine, settings=IO)


class ManagedMachine(RuleBasedStateMachine):
    """ManagedTier(ArenaTier, policy): contents are always a subset of what was put, with the
    latest values, within capacity; the policy tracks exactly the stored keys."""

    make_policy = LRUPolicy

    def __init__(self):
        super().__init__()
        self.latest = {}
        self.tier = ManagedTier(ArenaTier(CAPACITY), type(self).make_policy())

    @rule(key=KEYS, arr=arrays(), protect=st.booleans())
    def put(self, key, arr, protect):
        keys = self.tier.keys()
        protected = {keys[0]} if protect and keys else set()
        protected.discard(key)
        old = self.tier.nbytes_of(key) if self.tier.contains(key) else 0
        need = self.tier.used_bytes - old + arr.nbytes - CAPACITY
        evictable = sum(self.tier.nbytes_of(k) for k in keys if k not in protected and k != key)
        if arr.nbytes > CAPACITY or need > evictable:
            with pytest.raises(CapacityExceededError):
                self.tier.put(key, arr, protected=protected)
            return
        evicted = self.tier.put(key, arr, protected=protected)
        assert key not in evicted and not (protected & set(evicted))
        self.latest[key] = arr

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def get(self, data):
        key = data.draw(st.sampled_from(sorted(self.tier.keys(), key=repr)))
        np.testing.assert_array_equal(self.tier.get(key), self.latest[key])

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(sorted(self.tier.keys(), key=repr)))
        self.tier.delete(key)

    @invariant()
    def consistent(self):
        self.tier.check()
        assert set(self.tier.keys()) <= set(self.latest)


@pytest.mark.parametrize("make_policy", [LRUPolicy, FIFOPolicy, LFUPolicy, ARCPolicy, lambda: ARCPolicy(capacity=2)],
                         ids=["lru", "fifo", "lfu", "arc", "arc-c2"])
def test_managed_tier_with_each_policy(make_policy):
    machine = type("Machine", (ManagedMachine,), {"make_policy": staticmethod(make_policy)})
    run_state_machine_as_test(machine, settings=FAST)
