"""Bad input raises a KvmmError naming the problem and leaves the tracker exactly as it was."""

import math

import numpy as np
import pytest

from kvmm.errors import BadInputError, DTypeError, KvmmError, ShapeError
from kvmm.policies import ShardsTracker, StackDistanceTracker

TRACKERS = {
    "exact": lambda: StackDistanceTracker(initial_keys=4),
    "shards-rate": lambda: ShardsTracker(rate=0.5, initial_keys=4),  # stratified, counting the sampled keys
    "shards-stratified": lambda: ShardsTracker(rate=0.2, stratify_rate=0.6, initial_keys=4),
    "shards-count-all": lambda: ShardsTracker(rate=0.2, stratify_rate=1.0, initial_keys=4),
    "shards-plain": lambda: ShardsTracker(rate=0.5, stratify_rate=None, initial_keys=4),
    "shards-size": lambda: ShardsTracker(fixed_size=8, initial_keys=4),
}


def assert_same(before, after):
    assert before.keys() == after.keys()
    for name in before:
        assert np.array_equal(before[name], after[name]), name


@pytest.fixture(params=sorted(TRACKERS))
def tracker(request):
    t = TRACKERS[request.param]()
    t.access(np.random.default_rng(0).integers(0, 40, size=300))
    return t


@pytest.mark.parametrize("keys, error, words", [
    (np.array([1.0, 2.0]), DTypeError, "integer"),
    (np.array([1.5]), DTypeError, "integer"),
    (np.array([True, False]), DTypeError, "integer"),
    (np.array(["a"]), DTypeError, "integer"),
    (np.array([[1, 2], [3, 4]]), ShapeError, "1-dimensional"),
    ([1.0, float("nan")], DTypeError, "integer"),
])
def test_bad_keys_raise_and_change_nothing(tracker, keys, error, words):
    before = tracker.snapshot()
    with pytest.raises(error, match=words):
        tracker.access(keys)
    assert_same(before, tracker.snapshot())
    tracker.check()


def test_bad_groups_raise_and_change_nothing():
    tracker = TRACKERS["exact"]()
    tracker.access(np.arange(10), groups=np.zeros(10, dtype=np.int64))
    before = tracker.snapshot()
    with pytest.raises(ShapeError, match="one entry per key"):
        tracker.access(np.arange(5), groups=np.zeros(4, dtype=np.int64))
    with pytest.raises(DTypeError, match="groups"):
        tracker.access(np.arange(3), groups=np.array([0.5, 1.0, 2.0]))
    assert_same(before, tracker.snapshot())


def test_shards_rejects_groups(tracker):
    if isinstance(tracker, ShardsTracker):
        before = tracker.snapshot()
        with pytest.raises(BadInputError, match="exact"):
            tracker.access(np.arange(3), groups=np.zeros(3, dtype=np.int64))
        assert_same(before, tracker.snapshot())


@pytest.mark.parametrize("caps, words", [
    ([1, float("nan")], "NaN"),
    ([float("inf")], "NaN or infinity"),
    ([-1, 2], ">= 0"),
    ([1.5], "whole numbers"),
    (np.array(["x"]), "integers"),
    (np.zeros((2, 2), dtype=np.int64), "1-dimensional"),
    ([[1, 2], [3]], "ragged"),
    ([1, True], "booleans"),
])
def test_bad_capacities(tracker, caps, words):
    before = tracker.snapshot()
    with pytest.raises(KvmmError, match=words):
        tracker.mrc(caps)
    assert_same(before, tracker.snapshot())


@pytest.mark.parametrize("cap", [float("nan"), -3, 2.5, "10", True])
def test_bad_hit_ratio_capacity(tracker, cap):
    with pytest.raises(KvmmError):
        tracker.hit_ratio(cap)


@pytest.mark.parametrize("fraction", [0, -0.1, 1.01, float("nan"), "a", None])
def test_fractions_outside_unit_interval(tracker, fraction):
    before = tracker.snapshot()
    with pytest.raises(KvmmError, match="fraction"):
        tracker.working_set(fraction)
    assert_same(before, tracker.snapshot())


@pytest.mark.parametrize("kwargs, words", [
    (dict(rate=0.0), "rate"), (dict(rate=1.5), "rate"), (dict(rate=math.nan), "rate"), (dict(rate=-0.1), "rate"),
    (dict(fixed_size=0), "fixed_size"), (dict(fixed_size=2.5), "fixed_size"),
    (dict(), "exactly one"), (dict(rate=0.1, fixed_size=10), "exactly one"),
])
def test_bad_sampling_parameters(kwargs, words):
    with pytest.raises(KvmmError, match=words):
        ShardsTracker(**kwargs)


def test_integral_float_capacities_are_accepted(tracker):
    assert tracker.mrc([3.0, 5.0]).tolist() == tracker.mrc([3, 5]).tolist()


@pytest.mark.parametrize("initial", [0, -5, 2.5, "8"])
def test_bad_initial_sizes(initial):
    with pytest.raises(KvmmError, match="initial_keys"):
        StackDistanceTracker(initial_keys=initial)
    with pytest.raises(KvmmError, match="initial_keys"):
        ShardsTracker(fixed_size=10, initial_keys=initial)
