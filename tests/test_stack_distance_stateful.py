"""Hypothesis state machine: the tracker against the Mattson stack, check() after every step."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import KvmmError
from kvmm.policies import ShardsTracker, StackDistanceTracker

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


TestTracker = TrackerMachine.TestCase
TestFixedSize = FixedSizeMachine.TestCase
