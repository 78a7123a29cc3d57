"""Exact decisions of each admission policy on hand-made request sequences."""

import numpy as np
import pytest

from kvmm.policies import AdmissionRequest, RefillFilter, SelectiveWriteThrough, StoreThreshold, WriteAll


def req(keys, cached=None, gpu_hit=None):
    keys = np.asarray(keys, dtype=np.int64)
    cached = np.zeros(keys.size, bool) if cached is None else np.asarray(cached, bool)
    return AdmissionRequest(keys, cached, None if gpu_hit is None else np.asarray(gpu_hit, bool))


def test_write_all():
    assert WriteAll().admit(req([1, 2, 3], [False, True, False])).tolist() == [True, False, True]


def test_store_threshold_counts_offers_including_repeats_in_one_request():
    p = StoreThreshold(k=3)
    assert p.admit(req([1, 2, 1])).tolist() == [False, False, False]
    assert p.admit(req([1, 2])).tolist() == [True, False]  # key 1: third offer
    assert p.admit(req([2, 5], [False, False])).tolist() == [True, False]
    assert p.admit(req([2], [True])).tolist() == [False]  # cached: never rewritten



def test_store_threshold_keeps_counts_while_its_key_table_grows():
    """Thousands of distinct keys (the counter starts with room for 1024) in uneven batches:
    every decision matches a dict of offer counts."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 6000, 30_000) * 2654435761
    p, seen = StoreThreshold(k=3), {}
    for part in np.split(keys, np.sort(rng.integers(0, keys.size, 40))):
        expect = []
        for key in part.tolist():
            seen[key] = seen.get(key, 0) + 1
            expect.append(seen[key] >= 3)
        assert p.admit(req(part)).tolist() == expect

def test_selective_write_through_on_second_hit():
    p = SelectiveWriteThrough(hits=2)
    assert p.admit(req([1, 2], gpu_hit=[True, False])).tolist() == [False, False]
    assert p.admit(req([1, 2], gpu_hit=[True, False])).tolist() == [True, False]
    assert p.admit(req([1, 2])).tolist() == [True, False]  # no gpu_hit given: count unchanged
    many = SelectiveWriteThrough(hits=1)
    assert many.admit(req([7], gpu_hit=[True])).tolist() == [True]


def test_refill_filter_adaptive_switches_on_the_working_set_estimate():
    # 10 agents cycling over their own 5-block contexts: working set ~ 50 blocks
    contexts = [np.arange(5) + 100 * a for a in range(10)]
    small = RefillFilter(capacity_blocks=10, max_refill_blocks=3, update_every=5)
    large = RefillFilter(capacity_blocks=1000, max_refill_blocks=3, update_every=5)
    for p in (small, large):
        for _ in range(3):
            for ctx in contexts:
                p.admit(req(ctx))
    assert small.working_set_estimate == large.working_set_estimate == 50
    assert small.filtering and not large.filtering
    refill = req(contexts[0])  # seen before, nothing cached: 5 blocks of refill > 3
    assert small.admit(refill).tolist() == [False] * 5
    assert large.admit(refill).tolist() == [True] * 5
    # an extension of a cached prefix: 4 cached blocks + 1 new one -> written
    ext = req(np.append(contexts[1][:4], 999), [True, True, True, True, False])
    assert small.admit(ext).tolist() == [False, False, False, False, True]
    # brand-new context (never seen) is not a refill, however large
    assert small.admit(req(np.arange(5000, 5010))).all()


def test_refill_filter_size_only_mode_and_threshold_boundary():
    p = RefillFilter(capacity_blocks=0, adaptive=False, refill="any", max_refill_blocks=2)
    assert p.filtering
    assert p.admit(req([1, 2, 3])).tolist() == [False, False, False]  # 3 new blocks > 2
    assert p.admit(req([4, 5])).tolist() == [True, True]  # exactly 2: written
    evicted = RefillFilter(capacity_blocks=0, adaptive=False, max_refill_blocks=2)
    evicted.admit(req([1, 2, 3]))
    assert evicted.admit(req([1, 2, 3])).tolist() == [False] * 3  # 3 seen-before blocks > 2
    assert evicted.admit(req([1, 2, 9], [True, False, False])).tolist() == [False, True, True]


def test_refill_filter_estimate_before_first_update_writes_everything():
    p = RefillFilter(capacity_blocks=0, update_every=100)
    for _ in range(3):
        assert p.admit(req([1, 2, 3, 4, 5])).all()
    assert not p.filtering and p.requests_seen == 3


@pytest.mark.parametrize("make", [WriteAll, lambda: StoreThreshold(k=2), lambda: SelectiveWriteThrough(hits=1)])
def test_array_requests_and_list_requests_give_the_same_decisions(make):
    # int64/uint64 arrays take the unconverted path, lists the general one: same decisions, and
    # the policy never writes into the caller's arrays
    rng = np.random.default_rng(5)
    as_arrays, as_lists = make(), make()
    for _ in range(30):
        keys = rng.integers(0, 12, size=int(rng.integers(0, 6)))
        cached = rng.random(keys.shape[0]) < 0.3
        gpu_hit = rng.random(keys.shape[0]) < 0.5
        before = (keys.copy(), cached.copy(), gpu_hit.copy())
        dtype = np.uint64 if rng.random() < 0.5 else np.int64
        got = as_arrays.admit(AdmissionRequest(keys.astype(dtype), cached, gpu_hit))
        want = as_lists.admit(AdmissionRequest(keys.tolist(), cached.tolist(), gpu_hit.tolist()))
        assert np.asarray(got).tolist() == np.asarray(want).tolist()
        assert all(np.array_equal(a, b) for a, b in zip((keys, cached, gpu_hit), before))


def test_admission_mask_accepts_the_protocol_forms():
    from kvmm.policies import admission_mask

    assert admission_mask(np.array([True, False, True]), 3).tolist() == [True, False, True]
    assert admission_mask(np.array([2, 0]), 3).tolist() == [True, False, True]
    assert admission_mask([], 2).tolist() == [False, False]


@pytest.mark.parametrize("bad", [np.array([-1]), np.array([3]), np.array([True, False]), np.zeros(0, dtype=bool),
                                 np.array([0.5, 1.0]), np.array([[0]])])
def test_admission_mask_rejects_what_numpy_would_wrap_or_misread(bad):
    from kvmm.errors import BadInputError
    from kvmm.policies import admission_mask

    with pytest.raises(BadInputError, match=r"WriteAll.admit returned .*expected a boolean mask of shape \(3,\)"):
        admission_mask(bad, 3, WriteAll())


def test_a_simulated_tier_refuses_an_admission_index_out_of_range():
    # an index of -1 used to wrap around to the request's last block; now it is a clear error
    from kvmm.errors import BadInputError
    from kvmm.sim import SimConfig, TierLevel, simulate

    class LastByNegativeIndex:
        def admit(self, request):
            return np.array([-1])

    cfg = SimConfig(workload="conversation", max_requests=50, tiers=(TierLevel("dram", admission=LastByNegativeIndex()),))
    with pytest.raises(BadInputError, match="LastByNegativeIndex.admit returned"):
        simulate(cfg)
