"""Exact tracker vs the plain-Python Mattson stack and OrderedDict LRU (kvmm/testing/models/stack_distance.py)."""

import numpy as np
import pytest

from kvmm.policies import DistanceHistogram, StackDistanceTracker
from kvmm.testing.models.stack_distance import histogram_of, lru_miss_ratio, mattson_distances
from kvmm.traces import agent_trace


def zipf_stream(n, n_keys, alpha, seed):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_keys + 1) ** alpha
    cdf = np.cumsum(weights) / weights.sum()
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), n_keys - 1)
    return rng.permutation(n_keys).astype(np.int64)[ranks] * 1_000_003 + 17


def agent_stream(seed):
    return agent_trace(6, tasks=10, steps=(2, 6), system_prompt_tokens=1024, task_tokens=(100, 2000),
                       tool_result_tokens=(100, 1500), seed=seed).block_ids


STREAMS = {
    "random": lambda seed: np.random.default_rng(seed).integers(0, 60, size=1500),
    "zipf": lambda seed: zipf_stream(1500, 300, 1.0, seed),
    "agent": agent_stream,
}


@pytest.mark.parametrize("kind", sorted(STREAMS))
@pytest.mark.parametrize("seed", [0, 1])
def test_distances_equal_mattson_stack(kind, seed):
    keys = STREAMS[kind](seed)
    tracker = StackDistanceTracker(initial_keys=2)  # tiny arrays: growth and compaction run
    got = np.concatenate([tracker.access(part, return_distances=True) for part in np.array_split(keys, 5)])
    assert got.tolist() == mattson_distances(keys)
    tracker.check()
    counts, cold = histogram_of(mattson_distances(keys))
    hist = tracker.histogram()
    assert hist.counts[: len(counts)].tolist() == counts and not hist.counts[len(counts):].any()
    assert hist.cold == cold == tracker.cold_misses == np.unique(keys).size
    assert hist.total == keys.size == tracker.num_refs


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_mrc_equals_lru_replay_at_every_capacity(kind):
    keys = STREAMS[kind](3)
    tracker = StackDistanceTracker()
    tracker.access(keys)
    n_keys = np.unique(keys).size
    capacities = np.arange(n_keys + 2)
    mrc = tracker.mrc(capacities)
    step = max(1, n_keys // 40)  # the OrderedDict replay is slow: every capacity up to 40, then strided
    for c in list(range(min(n_keys + 2, 40))) + list(range(40, n_keys + 2, step)):
        assert mrc[c] == pytest.approx(lru_miss_ratio(keys, c), abs=1e-12), c
    # default capacities: 0 .. max distance + 1, ending at the cold-miss ratio
    full = tracker.mrc()
    assert full.shape[0] == tracker.histogram().max_capacity + 1
    assert full[-1] == pytest.approx(n_keys / keys.size)
    assert np.all(np.diff(full) <= 1e-15)  # miss ratio never rises with capacity


def test_worked_example_pins_every_number():
    tracker = StackDistanceTracker()
    d = tracker.access(np.array([1, 2, 1, 3, 2, 1], dtype=np.int64), return_distances=True)
    assert d.tolist() == [-1, -1, 1, -1, 2, 2]
    assert tracker.mrc([0, 1, 2, 3, 4]).tolist() == [1.0, 1.0, 5 / 6, 0.5, 0.5]
    assert tracker.hit_ratio(3) == 0.5
    assert tracker.working_set(1.0) == 3
    assert tracker.working_set(1 / 3) == 2  # 1 of 3 hits needs capacity 2
    assert tracker.working_set(0.2) == 2
    assert tracker.num_keys == 3 and tracker.cold_misses == 3


def test_working_set_is_smallest_capacity_reaching_fraction():
    keys = zipf_stream(4000, 800, 0.9, 5)
    tracker = StackDistanceTracker()
    tracker.access(keys)
    hist = tracker.histogram()
    caps = np.arange(hist.max_capacity + 1)
    hits = hist.hits(caps)
    for fraction in (0.1, 0.5, 0.9, 0.99, 1.0):
        ws = tracker.working_set(fraction)
        assert hits[ws] >= fraction * hist.max_hits - 1e-9
        assert ws == 0 or hits[ws - 1] < fraction * hist.max_hits
    assert tracker.working_set(1.0) == hist.max_capacity


def test_uint64_keys_beyond_int64_and_int64_views_are_the_same_key():
    big = np.array([2**64 - 1, 2**63, 5, 2**64 - 1, 2**63], dtype=np.uint64)
    tracker = StackDistanceTracker()
    assert tracker.access(big, return_distances=True).tolist() == [-1, -1, -1, 2, 2]
    # -1 as int64 is the same 64-bit word as 2**64 - 1 (stack now: 2**63, 2**64-1, 5)
    assert tracker.access(np.array([-1], dtype=np.int64), return_distances=True).tolist() == [1]
    # narrower integer dtypes are widened
    assert tracker.access(np.array([5], dtype=np.int32), return_distances=True).tolist() == [2]
    tracker.check()


def test_state_carries_across_batches_and_empty_batches():
    keys = np.random.default_rng(9).integers(0, 500, size=3000)
    one = StackDistanceTracker()
    one.access(keys)
    many = StackDistanceTracker(initial_keys=1)
    for part in np.array_split(keys, 37):
        many.access(part)
        many.access(np.array([], dtype=np.int64))
    assert np.array_equal(one.histogram().counts, many.histogram().counts)
    assert one.mrc().tolist() == many.mrc().tolist()
    many.check()


def test_large_stream_crosses_chunks_growth_and_compaction():
    keys = zipf_stream(60_000, 20_000, 0.8, 2)
    tracker = StackDistanceTracker(initial_keys=4)
    got = tracker.access(keys, return_distances=True)
    tracker.check()
    # reference: distances from an O(n^2)-free method (sorted last-access times) to stay fast
    last = {}
    times = []
    import bisect

    expect = []
    for t, k in enumerate(keys.tolist()):
        if k in last:
            p = last[k]
            i = bisect.bisect_right(times, p)
            expect.append(len(times) - i)
            times.pop(i - 1)
        else:
            expect.append(-1)
        last[k] = t
        times.append(t)
    assert got.tolist() == expect


def test_empty_tracker_queries():
    tracker = StackDistanceTracker()
    assert tracker.mrc([0, 5]).tolist() == [1.0, 1.0]
    assert tracker.working_set() == 0
    assert tracker.hit_ratio(10) == 0.0
    assert tracker.mrc().tolist() == [1.0]
    tracker.check()


def test_distance_histogram_scaled_buckets():
    # bucket d holds distances [d*scale, (d+1)*scale): with scale 10, bucket 1 = distances 10..19
    hist = DistanceHistogram(np.array([0.0, 4.0, 0.0, 6.0]), cold=10.0, total=20.0, scale=10.0)
    assert hist.hits([0, 10, 11, 20, 30, 31, 40]).tolist() == [0, 0, 4, 4, 4, 10, 10]
    assert hist.max_capacity == 31
    assert hist.working_set(0.4) == 11 and hist.working_set(1.0) == 31


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(keys=st.lists(st.integers(min_value=0, max_value=25), max_size=120),
       cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=4))
def test_property_mrc_equals_lru_replay(keys, cuts):
    keys = np.array(keys, dtype=np.int64)
    tracker = StackDistanceTracker(initial_keys=1)
    for part in np.split(keys, sorted(c for c in cuts if c <= keys.size)):
        tracker.access(part)
    for c in range(0, 28):
        assert tracker.mrc([c])[0] == pytest.approx(lru_miss_ratio(keys, c), abs=1e-12)
    tracker.check()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_order_rereads_match_mattson_stack(seed):
    """Contexts re-read in the order first read (the agent pattern the kernel's count shortcut
    serves: previous positions one apart, gaps within a word and across a word boundary), mixed
    with new blocks, interleaved re-reads and repeats of the same key."""
    rng = np.random.default_rng(seed)
    parts, next_key = [], 0
    contexts = []
    for _ in range(40):
        kind = rng.integers(0, 4)
        if kind == 0 or not contexts:  # a new context
            size = int(rng.integers(1, 150))
            contexts.append(np.arange(next_key, next_key + size))
            next_key += size
            parts.append(contexts[-1])
        elif kind == 1:  # re-read a context in order, sometimes skipping blocks (gaps of 1..70)
            ctx = contexts[rng.integers(len(contexts))]
            keep = rng.random(ctx.size) < rng.choice([1.0, 0.9, 0.05])
            parts.append(ctx[keep])
        elif kind == 2:  # re-read with a new tail
            ctx = contexts[rng.integers(len(contexts))]
            tail = np.arange(next_key, next_key + int(rng.integers(1, 40)))
            next_key += tail.size
            contexts.append(np.concatenate((ctx, tail)))
            parts.append(contexts[-1])
        else:  # scattered references and immediate repeats
            keys = rng.integers(0, max(next_key, 1), size=int(rng.integers(1, 30)))
            parts.append(np.repeat(keys, rng.integers(1, 3, size=keys.size)))
    keys = np.concatenate(parts).astype(np.int64)
    expect = mattson_distances(keys)
    for initial_keys in (2, 4096):  # with and without growth and compaction in the middle
        tracker = StackDistanceTracker(initial_keys=initial_keys)
        got = np.concatenate([tracker.access(part, return_distances=True) for part in np.array_split(keys, 3)])
        assert got.tolist() == expect
        tracker.check()
