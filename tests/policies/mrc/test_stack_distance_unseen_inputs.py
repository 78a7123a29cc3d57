"""The stack-distance tracker, SHARDS and admission policies on inputs their own tests do not
use: libCacheSim's LRU at many capacities, streams cut at arbitrary points, 64-bit keys
of both signs, many compactions, huge capacities, empty and all-cached requests."""

import numpy as np
import pytest

from kvmm.errors import KvmmError
from kvmm.policies import (
    AdmissionRequest,
    RefillFilter,
    SelectiveWriteThrough,
    ShardsTracker,
    StackDistanceTracker,
    StoreThreshold,
    WriteAll,
)


def fenwick_distances(keys):
    """Plain-Python exact stack distances, O(n log n) (a Fenwick tree over reference times)."""
    n = len(keys)
    tree = [0] * (n + 1)

    def add(i, delta):
        i += 1
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(i):
        total, i = 0, i + 1
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    last, out, live = {}, [], 0
    for t, key in enumerate(keys):
        prev = last.get(key)
        if prev is None:
            out.append(-1)
            live += 1
        else:
            out.append(live - prefix(prev))
            add(prev, -1)
        add(t, 1)
        last[key] = t
    return np.array(out, dtype=np.int64)


def zipf_stream(rng, n, keys, alpha):
    p = 1.0 / np.arange(1, keys + 1) ** alpha
    return rng.choice(keys, n, p=p / p.sum()).astype(np.int64)


STREAMS = {
    "zipf0.6": lambda rng: zipf_stream(rng, 6000, 1500, 0.6),
    "zipf1.2": lambda rng: zipf_stream(rng, 6000, 1500, 1.2),
    "scan": lambda rng: np.tile(np.arange(400, dtype=np.int64), 12),
    "one-key": lambda rng: np.full(700, 7, dtype=np.int64),
    "all-distinct": lambda rng: np.arange(3000, dtype=np.int64),
    "high-uint64": lambda rng: rng.integers(0, 200, 6000).astype(np.uint64) + np.uint64(2**63),
    "negative": lambda rng: -rng.integers(1, 200, 6000).astype(np.int64),
}
CAPACITIES = [0, 1, 2, 3, 7, 50, 199, 200, 201, 399, 400, 401, 1000, 1499, 1500, 5000, 10**9]


def _cut(rng, keys, pieces):
    return np.split(keys, np.sort(rng.integers(0, keys.size + 1, pieces)))


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_matches_libcachesim_lru_at_many_capacities(name, tmp_path):
    lcs = pytest.importorskip("libcachesim")
    rng = np.random.default_rng(sorted(STREAMS).index(name))
    keys = STREAMS[name](rng)
    tracker = StackDistanceTracker(initial_keys=1)
    for part in _cut(rng, keys, 9):
        tracker.access(part)
    tracker.check()
    records = np.zeros(keys.size, dtype=[("ts", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    records["ts"] = np.arange(keys.size)
    records["id"] = keys.view(np.uint64)
    records["size"] = 1
    records["next"] = -1
    path = tmp_path / "trace.oracleGeneral.bin"
    records.tofile(path)
    ours = tracker.mrc(CAPACITIES)
    for capacity, miss in zip(CAPACITIES, ours):
        if capacity == 0:
            assert miss == 1.0
            continue
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        expected = lcs.LRU(cache_size=min(capacity, 10**7)).process_trace(reader)[0]
        assert miss == pytest.approx(expected, abs=1e-12), capacity


@pytest.mark.parametrize("initial_keys", [1, 64])
def test_results_do_not_depend_on_how_the_stream_is_cut_across_compactions(initial_keys):
    """Small working sets over long streams force many time-array compactions; phases of new
    keys force growth in between.  Distances must equal the reference however it is cut."""
    rng = np.random.default_rng(initial_keys)
    keys = np.concatenate([
        rng.integers(0, 9, 12000),                                              # tiny working set
        np.concatenate([np.arange(i * 250, i * 250 + 600) for i in range(20)]),  # sliding window
        np.where(rng.random(8000) < 0.5, rng.integers(0, 15, 8000), np.arange(8000) + 10**6),
    ]).astype(np.int64)
    expected = fenwick_distances(keys.tolist())
    whole = StackDistanceTracker(initial_keys=initial_keys)
    np.testing.assert_array_equal(whole.access(keys, return_distances=True), expected)
    cut = StackDistanceTracker(initial_keys=initial_keys)
    got = [cut.access(part, return_distances=True) for part in _cut(rng, keys, 40)]
    np.testing.assert_array_equal(np.concatenate(got), expected)
    cut.check()
    one = StackDistanceTracker(initial_keys=initial_keys)  # one reference per call
    got = [one.access(keys[i:i + 1], return_distances=True)[0] for i in range(3000)]
    np.testing.assert_array_equal(got, expected[:3000])
    one.check()


def test_negative_int64_and_high_uint64_are_the_same_words():
    signed = np.array([-1, -2, -1, 5, -2], dtype=np.int64)
    unsigned = signed.view(np.uint64)
    a, b = StackDistanceTracker(), StackDistanceTracker()
    np.testing.assert_array_equal(a.access(signed, return_distances=True), [-1, -1, 1, -1, 2])
    np.testing.assert_array_equal(b.access(unsigned, return_distances=True), [-1, -1, 1, -1, 2])
    c = StackDistanceTracker()
    c.access(np.array([2**64 - 1], dtype=np.uint64))
    assert c.access(np.array([-1], dtype=np.int64), return_distances=True)[0] == 0


def test_mrc_at_zero_and_far_beyond_the_largest_distance():
    tracker = StackDistanceTracker()
    assert tracker.mrc().tolist() == [1.0] and tracker.working_set(1.0) == 0
    tracker.access(np.array([1, 2, 1, 3, 2, 1], dtype=np.int64))
    huge = [0, 10**15, 2**62, 1e30]
    assert tracker.mrc(huge).tolist() == [1.0, 0.5, 0.5, 0.5]
    assert tracker.mrc(np.array([0, 2**63 + 5, 2**64 - 1], dtype=np.uint64)).tolist() == [1.0, 0.5, 0.5]
    assert tracker.mrc(np.array([3], dtype=np.uint8)).tolist() == [0.5]
    assert tracker.hit_ratio(2**80) == tracker.hit_ratio(np.uint64(2**64 - 1)) == 0.5
    assert tracker.working_set(1e-300) == 2 and tracker.working_set(1.0) == 3
    sampled = ShardsTracker(rate=0.5)
    sampled.access(np.arange(100, dtype=np.int64).repeat(2))
    beyond = sampled.histogram().max_capacity + 1
    assert sampled.mrc(np.array([2**64 - 1], dtype=np.uint64))[0] == sampled.mrc([beyond])[0]
    with pytest.raises(KvmmError):
        tracker.mrc([-1])


def test_many_groups_partition_the_histogram():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 300, 20000)
    groups = rng.integers(-(10**12), 10**12, 20000)
    tracker = StackDistanceTracker()
    for k, g in zip(np.array_split(keys, 7), np.array_split(groups, 7)):
        tracker.access(k, groups=g)
    distances = fenwick_distances(keys.tolist())
    total = np.zeros(distances.max() + 1, dtype=np.int64)
    assert tracker.groups().size == np.unique(groups).size
    for g in tracker.groups()[:: 97]:
        hist = tracker.group_histogram(g)
        mine = distances[groups == g]
        assert hist.cold == (mine < 0).sum() and hist.total == mine.size
        np.testing.assert_array_equal(hist.counts, np.bincount(mine[mine >= 0], minlength=hist.counts.size))
    for g in tracker.groups():
        counts = tracker.group_histogram(g).counts
        total[: counts.size] += counts
    np.testing.assert_array_equal(total, tracker.histogram().counts[: total.size])


def test_fixed_size_shards_with_fewer_keys_than_the_size_is_exact():
    rng = np.random.default_rng(4)
    keys = zipf_stream(rng, 8000, 400, 0.9)
    exact = StackDistanceTracker()
    exact.access(keys)
    for size in (400, 401, 5000):
        sampled = ShardsTracker(fixed_size=size)
        for part in _cut(rng, keys, 11):
            sampled.access(part)
        sampled.check()
        assert sampled.current_rate == 1.0
        np.testing.assert_allclose(sampled.mrc(np.arange(500)), exact.mrc(np.arange(500)), atol=1e-12)
        assert sampled.working_set(0.9) == exact.working_set(0.9)


def test_shards_error_on_unseen_streams():
    """Streams of 200 K references over 40 K keys (8 K sampled keys at R = 0.2): MAE well under
    0.02 and the working set within 5 %, whatever the cut."""
    rng = np.random.default_rng(5)
    streams = [zipf_stream(rng, 200_000, 40_000, 0.8) * 2654435761 + 17,
               np.where(rng.random(200_000) < 0.5, np.tile(np.arange(20_000), 10),
                        rng.integers(10**6, 10**6 + 20_000, 200_000)).astype(np.int64)]
    for keys in streams:
        exact = StackDistanceTracker()
        exact.access(keys)
        caps = np.unique(np.linspace(0, exact.histogram().max_capacity, 100).astype(np.int64))
        for kwargs in (dict(rate=0.2), dict(fixed_size=8000)):
            sampled = ShardsTracker(**kwargs)
            for part in _cut(rng, keys, 5):
                sampled.access(part)
            assert np.abs(sampled.mrc(caps) - exact.mrc(caps)).mean() < 0.02
            assert abs(sampled.working_set(0.9) / exact.working_set(0.9) - 1) < 0.05


# --------------------------------------------------------------------------- admission
POLICIES = [WriteAll, StoreThreshold, SelectiveWriteThrough, lambda: RefillFilter(4),
            lambda: RefillFilter(4, adaptive=False, refill="any")]


@pytest.mark.parametrize("make", POLICIES)
def test_admission_empty_and_all_cached_requests(make):
    policy = make()
    for empty in (AdmissionRequest(np.zeros(0, np.int64), np.zeros(0, bool)), AdmissionRequest([], [])):
        mask = policy.admit(empty)
        assert mask.dtype == bool and mask.shape == (0,)
    keys = np.array([2**64 - 1, 2**63, 0], dtype=np.uint64)
    for _ in range(3):
        mask = policy.admit(AdmissionRequest(keys, np.ones(3, bool), np.ones(3, bool)))
        assert mask.tolist() == [False, False, False]  # cached blocks are never admitted


def test_refill_filter_switches_on_and_back_off():
    policy = RefillFilter(capacity_blocks=100, max_refill_blocks=4, update_every=8)
    for i in range(160):  # 40 contexts of 20 blocks in a cycle: working set 800 > 100
        context = i % 40
        keys = np.arange(context * 20, context * 20 + 20)
        mask = policy.admit(AdmissionRequest(keys, np.zeros(20, bool)))
        if i >= 48:
            assert policy.filtering and policy.working_set_estimate > 100
            assert not mask.any()  # a 20-block refill of evicted context is not written
    hot = np.arange(10**6, 10**6 + 10)
    for _ in range(3000):  # one hot context: the estimate falls below the tier
        mask = policy.admit(AdmissionRequest(hot, np.zeros(10, bool)))
    assert not policy.filtering and policy.working_set_estimate <= 100
    assert mask.all()


@pytest.mark.parametrize("kwargs", [dict(fixed_size=500), dict(rate=0.05)])
def test_shards_does_not_depend_on_how_the_stream_is_cut(kwargs):
    rng = np.random.default_rng(6)
    keys = zipf_stream(rng, 60_000, 20_000, 0.8)
    whole = ShardsTracker(**kwargs, initial_keys=1)
    expected = whole.access(keys, return_distances=True)
    cut = ShardsTracker(**kwargs)
    got = np.concatenate([cut.access(part, return_distances=True) for part in _cut(rng, keys, 50)])
    one = ShardsTracker(**kwargs)
    for i in range(3000):
        one.access(keys[i:i + 1])
    one.access(keys[3000:])
    np.testing.assert_array_equal(got, expected)
    for other in (cut, one):
        other.check()
        assert other.current_rate == whole.current_rate
        a, b = whole.histogram(), other.histogram()
        np.testing.assert_allclose(b.counts, a.counts, rtol=1e-12)
        assert (b.cold, b.total) == pytest.approx((a.cold, a.total), rel=1e-12)
