"""Per-group (agent / request) views: each group's references, distances in the shared stream."""

import numpy as np

from kvmm.policies import StackDistanceTracker
from kvmm.testing.models.stack_distance import histogram_of, mattson_distances
from kvmm.traces import agent_trace


def test_group_histograms_partition_the_global_one():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 80, size=2000)
    groups = rng.integers(0, 5, size=2000) * 1000 - 7  # arbitrary (negative too) group ids
    tracker = StackDistanceTracker(initial_keys=2)
    for part in np.array_split(np.arange(2000), 6):
        tracker.access(keys[part], groups=groups[part])
    tracker.check()
    dist = np.array(mattson_distances(keys))
    assert tracker.groups().tolist() == sorted(set(groups.tolist()))
    total = np.zeros(tracker.histogram().counts.shape[0], dtype=np.int64)
    for g in tracker.groups():
        hist = tracker.group_histogram(int(g))
        counts, cold = histogram_of(dist[groups == g].tolist())
        assert hist.counts.tolist() == counts
        assert hist.cold == cold and hist.total == (groups == g).sum()
        total[: len(counts)] += counts
        # a group's MRC: its own references' hit ratio in the shared LRU cache
        for c in (1, 10, 40, 81):
            expect = 1 - np.sum((dist[groups == g] >= 0) & (dist[groups == g] < c)) / (groups == g).sum()
            assert abs(hist.mrc([c])[0] - expect) < 1e-12
    assert np.array_equal(total, tracker.histogram().counts)


def test_per_request_view_on_an_agent_trace():
    trace = agent_trace(4, tasks=6, steps=(2, 4), seed=5)
    request_of = np.repeat(np.arange(trace.num_requests), np.diff(trace.block_offsets))
    tracker = StackDistanceTracker()
    tracker.access(trace.block_ids, groups=request_of)
    first = tracker.group_histogram(0)
    assert first.cold == first.total == trace.blocks_of(0).size  # the first request is all cold
    assert tracker.group_histogram(10**9).total == 0  # unknown group: empty
