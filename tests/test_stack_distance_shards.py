"""SHARDS (fixed rate, fixed size) vs plain-Python SHARDS references and vs the exact MRC."""

import numpy as np
import pytest

from kvmm.policies import ShardsTracker, StackDistanceTracker
from tests.naive.stack_distance import shards_fixed_rate, shards_fixed_size
from tests.test_stack_distance_exact import agent_stream, zipf_stream


@pytest.mark.parametrize("rate", [0.3, 0.7, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_rate_matches_reference(rate, seed):
    keys = zipf_stream(1200, 200, 0.9, seed)
    tracker = ShardsTracker(rate=rate, initial_keys=2)
    got = np.concatenate([tracker.access(p, return_distances=True) for p in np.array_split(keys, 4)])
    expect, mrc = shards_fixed_rate(keys, rate)
    assert got.tolist() == expect
    tracker.check()
    for c in [0, 1, 2, 3, 5, 10, 20, 50, 100, 150, 200, 250]:
        assert tracker.mrc([c])[0] == pytest.approx(mrc(c), abs=1e-9), c
    assert tracker.sampled_refs == sum(1 for d in expect if d != -2)


@pytest.mark.parametrize("max_keys", [1, 5, 40])
@pytest.mark.parametrize("kind", ["zipf", "agent"])
def test_fixed_size_matches_reference(max_keys, kind):
    keys = zipf_stream(1500, 300, 0.8, 4) if kind == "zipf" else agent_stream(2)
    tracker = ShardsTracker(fixed_size=max_keys, initial_keys=2)
    got = np.concatenate([tracker.access(p, return_distances=True) for p in np.array_split(keys, 3)])
    expect, whist, cold, threshold = shards_fixed_size(keys, max_keys)
    assert got.tolist() == expect
    tracker.check()
    hist = tracker.histogram()
    counts = np.zeros(max(hist.counts.shape[0], max(whist, default=0) + 1))
    for d, w in whist.items():
        counts[d] = w
    counts[0] += keys.size - (cold + sum(whist.values()))  # SHARDS-adj
    assert np.allclose(hist.counts, counts[: hist.counts.shape[0]]) and not counts[hist.counts.shape[0]:].any()
    assert hist.cold == pytest.approx(cold)
    assert tracker.current_rate == (1.0 if threshold is None else threshold / 2.0**64)
    assert int((got >= -1).sum()) == tracker.sampled_refs


def test_fixed_size_bounds_the_sample():
    keys = zipf_stream(20_000, 5_000, 0.9, 7)
    tracker = ShardsTracker(fixed_size=64)
    tracker.access(keys)
    tracker.check()
    assert tracker.current_rate < 64 / 1000
    assert int((tracker._id_last[: tracker.num_keys] >= 0).sum()) == 64


@pytest.mark.parametrize("kwargs, tolerance", [(dict(rate=0.1), 0.02), (dict(fixed_size=2000), 0.01)])
def test_sampled_mrc_is_close_to_exact(kwargs, tolerance):
    keys = zipf_stream(200_000, 50_000, 0.9, 11)
    exact = StackDistanceTracker()
    exact.access(keys)
    sampled = ShardsTracker(**kwargs)
    sampled.access(keys)
    caps = np.unique(np.linspace(0, exact.histogram().max_capacity, 100).astype(np.int64))
    mae = np.abs(sampled.mrc(caps) - exact.mrc(caps)).mean()
    assert mae < tolerance
    assert abs(sampled.working_set(0.9) - exact.working_set(0.9)) < 0.1 * exact.working_set(0.9)
