"""Hypothesis state machine: the tracker against the Mattson stack, check() after every step."""

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import kvmm.policies.mrc.shards as shards_module
from kvmm.errors import KvmmError
from kvmm.policies import ShardsTracker, StackDistanceTracker
from kvmm.testing.models.stack_distance import MASK64, distinct_estimate, mix64, shards_stratified

KEYS = st.lists(st.integers(min_value=-3, max_value=40), min_size=0, max_size=60)


class TrackerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tracker = StackDistanceTracker(initial_keys=1)
        self.stack: list[int] = []  # model: most recent first
        self.hist: dict[int, int] = {}
        self.refs = 0

    @rule(keys=KEYS)
    def access(self, keys):
        got = self.tracker.access(np.array(keys, dtype=np.int64), return_distances=True)
        expect = []
        for k in keys:
            if k in self.stack:
                d = self.stack.index(k)
                self.stack.pop(d)
                self.hist[d] = self.hist.get(d, 0) + 1
            else:
                d = -1
            expect.append(d)
            self.stack.insert(0, k)
        self.refs += len(keys)
        assert got.tolist() == expect

    @rule(bad=st.sampled_from([np.array([1.5]), np.array([[1]]), np.array([True])]))
    def bad_access(self, bad):
        before = self.tracker.snapshot()
        try:
            self.tracker.access(bad)
        except KvmmError:
            pass
        else:
            raise AssertionError("bad keys accepted")
        after = self.tracker.snapshot()
        assert all(np.array_equal(before[n], after[n]) for n in before)

    @precondition(lambda self: self.refs > 0)
    @rule(capacity=st.integers(min_value=0, max_value=50))
    def miss_ratio(self, capacity):
        hits = sum(c for d, c in self.hist.items() if d < capacity)
        assert abs(self.tracker.mrc([capacity])[0] - (1 - hits / self.refs)) < 1e-12

    @invariant()
    def consistent(self):
        self.tracker.check()
        assert self.tracker.num_keys == len(self.stack)
        assert self.tracker.num_refs == self.refs


class FixedSizeMachine(RuleBasedStateMachine):
    """Fixed-size SHARDS: the sample never exceeds its size; check() holds after every batch."""

    def __init__(self):
        super().__init__()
        self.tracker = ShardsTracker(fixed_size=6, initial_keys=1)
        self.refs = 0

    @rule(keys=KEYS)
    def access(self, keys):
        self.tracker.access(np.array(keys, dtype=np.int64))
        self.refs += len(keys)

    @invariant()
    def consistent(self):
        self.tracker.check()
        assert self.tracker.num_refs == self.refs
        hist = self.tracker.histogram()
        assert self.refs == 0 or abs(hist.cold + hist.counts.sum() - self.refs) < 1e-6


class StratifiedMachine(RuleBasedStateMachine):
    """Stratified fixed-rate SHARDS: the counted keys against a dict model, check() after every
    batch, and the MRC against the plain-Python reference of the stream so far."""

    RATE, STRATIFY_RATE, SKETCH_BITS = 0.4, 0.8, 6  # 64 registers: the sketch's noise shows

    def __init__(self):
        super().__init__()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(shards_module, "DISTINCT_SKETCH_BITS", self.SKETCH_BITS)
            self.tracker = ShardsTracker(rate=self.RATE, stratify_rate=self.STRATIFY_RATE, initial_keys=1)
        self.keys: list[int] = []
        self.counted: dict[int, int] = {}  # model: references of each key hashing below the counting threshold

    @rule(keys=KEYS)
    def access(self, keys):
        self.tracker.access(np.array(keys, dtype=np.int64))
        self.keys.extend(keys)
        for k in keys:
            if mix64(k & MASK64) < self.STRATIFY_RATE * 2.0**64:
                self.counted[k] = self.counted.get(k, 0) + 1

    @precondition(lambda self: self.keys)
    @rule(capacity=st.integers(min_value=0, max_value=120))
    def miss_ratio(self, capacity):
        expect = shards_stratified(self.keys, self.RATE, self.STRATIFY_RATE, 8, self.SKETCH_BITS)(capacity)
        assert abs(self.tracker.mrc([capacity])[0] - expect) < 1e-9

    @invariant()
    def consistent(self):
        self.tracker.check()
        assert self.tracker.num_refs == len(self.keys)
        expect = distinct_estimate(self.keys, self.STRATIFY_RATE, self.SKETCH_BITS)
        assert abs(self.tracker.distinct_keys_estimate - expect) <= 1e-9 * max(expect, 1.0)
        table = self.tracker._strata_slots.reshape(-1, 2)
        held = {int(np.int64(np.uint64(k))): int(c) for k, c in table[table[:, 1] != 0]}
        assert held == self.counted


TestTracker = TrackerMachine.TestCase
TestStratified = StratifiedMachine.TestCase
TestFixedSize = FixedSizeMachine.TestCase
