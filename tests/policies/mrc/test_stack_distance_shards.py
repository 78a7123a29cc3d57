"""SHARDS (fixed rate, stratified fixed rate, fixed size) vs plain-Python SHARDS references and
vs the exact MRC."""

import math

import numpy as np
import pytest

import kvmm.policies.mrc.shards as shards_module
from kvmm.errors import BadInputError
from kvmm.policies import ShardsTracker, StackDistanceTracker
from kvmm.testing.models.stack_distance import (
    MASK64,
    distinct_estimate,
    hll_improved_estimate,
    hll_registers,
    key_with_hash,
    mix64,
    shards_fixed_rate,
    shards_fixed_size,
    shards_stratified,
)
from tests.policies.mrc.test_stack_distance_exact import agent_stream, zipf_stream


@pytest.mark.parametrize("rate", [0.3, 0.7, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_rate_matches_reference(rate, seed):
    keys = zipf_stream(1200, 200, 0.9, seed)
    tracker = ShardsTracker(rate=rate, stratify_rate=None, initial_keys=2)
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


@pytest.mark.parametrize("rate, stratify_rate", [(0.3, 0.3), (0.3, 0.9), (0.5, 1.0), (0.1, "auto"), (1.0, 1.0)])
@pytest.mark.parametrize("min_keys", [1, 3, 8])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("sketch_bits", [4, 10])
def test_stratified_matches_reference(rate, stratify_rate, min_keys, seed, sketch_bits, monkeypatch):
    monkeypatch.setattr(shards_module, "MIN_STRATUM_KEYS", min_keys)
    monkeypatch.setattr(shards_module, "DISTINCT_SKETCH_BITS", sketch_bits)
    keys = zipf_stream(1500, 250, 0.9, seed)
    tracker = ShardsTracker(rate=rate, stratify_rate=stratify_rate, initial_keys=2)
    got = np.concatenate([tracker.access(p, return_distances=True) for p in np.array_split(keys, 5)])
    expect, _ = shards_fixed_rate(keys, rate)
    assert got.tolist() == expect  # stratification changes the weights, not the sampled distances
    tracker.check()
    r1 = max(rate, min(10 * rate, 0.25)) if stratify_rate == "auto" else stratify_rate
    assert tracker.stratify_rate == r1
    mrc = shards_stratified(keys, rate, r1, min_keys, sketch_bits)
    assert tracker.distinct_keys_estimate == pytest.approx(distinct_estimate(keys, r1, sketch_bits), rel=1e-12)
    for c in [0, 1, 2, 3, 5, 7, 10, 20, 33, 50, 100, 150, 200, 260]:
        assert tracker.mrc([c])[0] == pytest.approx(mrc(c), abs=1e-9), c


def test_band_weights_worked_example(monkeypatch):
    monkeypatch.setattr(shards_module, "MIN_STRATUM_KEYS", 1)
    weights = shards_module._band_weights(np.array([0, 0, 0, 1]), np.array([0, 1]), 0.5)
    assert weights.tolist() == [6.0, 2.0]  # band 0: 3 counted keys / 0.5 / 1 sampled; band 1: 1 / 0.5 / 1
    monkeypatch.setattr(shards_module, "MIN_STRATUM_KEYS", 2)
    # bands 3..0 hold 1, 0, 1, 0 sampled keys: stratum {3, 2, 1} closes at band 1, band 0 joins it
    weights = shards_module._band_weights(np.array([0, 0, 1, 1, 3, 3, 3]), np.array([1, 3]), 1.0)
    assert weights.tolist() == [3.5] * 4
    # a stratum that never fills on its own: everything is one stratum (the plain effective rate)
    weights = shards_module._band_weights(np.array([0, 0, 0, 0, 5]), np.array([0]), 0.25)
    assert weights.tolist() == [20.0] * 6


def test_stratification_lowers_the_error():
    """Across 12 redraws of the sampled keys (relabellings) of a 400 K-reference Zipf stream at
    R = 0.02 (~1,000 sampled keys), stratified SHARDS has a lower median and worst MAE."""
    keys = zipf_stream(400_000, 60_000, 0.9, 3) * 2654435761 + 5
    exact = StackDistanceTracker()
    exact.access(keys)
    caps = np.unique(np.linspace(0, exact.histogram().max_capacity, 100).astype(np.int64))
    truth = exact.mrc(caps)
    errors = {None: [], "auto": []}
    for salt in range(12):
        relabelled = keys.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt)
        for mode in errors:
            tracker = ShardsTracker(rate=0.02, stratify_rate=mode)
            tracker.access(relabelled)
            errors[mode].append(np.abs(tracker.mrc(caps) - truth).mean())
    plain, stratified = np.array(errors[None]), np.array(errors["auto"])
    assert np.median(stratified) < 0.8 * np.median(plain) and stratified.max() < plain.max()


@pytest.mark.parametrize("kwargs", [dict(rate=0.1, stratify_rate=0.05), dict(rate=0.1, stratify_rate=1.5),
                                    dict(rate=0.1, stratify_rate="some"), dict(rate=0.1, stratify_rate=float("nan")),
                                    dict(fixed_size=10, stratify_rate=0.5)])
def test_bad_stratify_rate(kwargs):
    with pytest.raises(BadInputError, match="stratify_rate"):
        ShardsTracker(**kwargs)


def test_stratify_defaults_and_estimates():
    assert ShardsTracker(rate=0.01).stratify_rate == pytest.approx(0.1)
    assert ShardsTracker(rate=0.05).stratify_rate == 0.25 and ShardsTracker(rate=0.5).stratify_rate == 0.5
    assert ShardsTracker(rate=1.0).stratify_rate is None and ShardsTracker(fixed_size=4).stratify_rate is None
    keys = np.arange(5000, dtype=np.int64).repeat(3)
    counted_all = ShardsTracker(rate=0.2, stratify_rate=1.0)  # every key counted: the estimate is exact
    counted_all.access(keys)
    assert counted_all.distinct_keys_estimate == 5000.0
    bands, weights = counted_all.stratum_weights()
    assert np.all(bands == 1) and np.allclose(weights, 5000 / counted_all.num_keys)
    with pytest.raises(BadInputError):
        ShardsTracker(rate=0.2, stratify_rate=None).stratum_weights()


@pytest.mark.parametrize("bits", [4, 8, 12])
def test_hll_registers_and_estimate_match_reference(bits, monkeypatch):
    """The kernel's HyperLogLog registers and the estimator against the plain-Python ones, and
    the estimate within 4 standard errors of the true distinct count from 1 to 10^5 keys."""
    monkeypatch.setattr(shards_module, "DISTINCT_SKETCH_BITS", bits)
    rng = np.random.default_rng(bits)
    for distinct in (1, 7, 300, 5000, 100_000):
        keys = rng.permutation(np.arange(distinct, dtype=np.int64) * 7919 - 10**12).repeat(2)
        tracker = ShardsTracker(rate=0.01, stratify_rate=0.02)
        tracker.access(keys)
        expected = hll_registers(keys[: 2 * min(distinct, 5000)], bits) if distinct <= 5000 else None
        if expected is not None:
            assert tracker._registers.tolist() == expected
        estimate = shards_module.hll_estimate(tracker._registers)
        assert estimate == pytest.approx(hll_improved_estimate(tracker._registers.tolist()), rel=1e-9)
        assert abs(estimate / distinct - 1) < 4 * 1.04 / np.sqrt(2**bits) + 1e-9
    assert shards_module.hll_estimate(np.zeros(16, dtype=np.uint8)) == 0.0


@pytest.mark.parametrize("rate, stratify_rate", [(0.25, 0.5), (1e-5, 1e-4), (2e-5, 2e-5), (1e-20, 1e-20),
                                                 (1e-21, "auto")])
def test_keys_at_the_hash_thresholds(rate, stratify_rate):
    """Keys hashing exactly at the sampling threshold ``floor(R 2**64)`` and around the counting
    bound ``stratify_rate * 2**64`` (counted iff below it, so a bound that is not a whole number,
    as at small rates, counts its floor; a bound below 1 still counts hash 0), and at the
    HyperLogLog's extreme ranks: sampled distances, counted keys, registers and MRC against the
    plain-Python reference."""
    r1 = max(rate, min(10 * rate, 0.25)) if stratify_rate == "auto" else stratify_rate
    threshold, bound = int(rate * 2.0**64), r1 * 2.0**64
    edges = [0, 1, threshold - 1, threshold, threshold + 1, math.floor(bound) - 1, math.floor(bound),
             math.ceil(bound), MASK64]
    edge_hashes = [h for h in sorted(set(edges)) if 0 <= h <= MASK64]
    edge_keys = [key_with_hash(h) for h in edge_hashes]
    assert [mix64(k) for k in edge_keys] == edge_hashes  # the keys really sit at the edges
    rng = np.random.default_rng(5)
    keys = np.concatenate([np.array(edge_keys, dtype=np.uint64).view(np.int64).repeat(3),
                           rng.integers(-(2**40), 2**40, size=300)])
    keys = np.concatenate([keys, rng.permutation(keys)])
    tracker = ShardsTracker(rate=rate, stratify_rate=stratify_rate, initial_keys=2)
    got = tracker.access(keys, return_distances=True)
    expect, _ = shards_fixed_rate(keys, rate)
    assert got.tolist() == expect
    tracker.check()
    table = tracker._strata_slots.reshape(-1, 2)
    counted = {int(k): int(c) for k, c in table[table[:, 1] != 0]}
    expect_counted: dict[int, int] = {}
    for k in keys.tolist():
        if mix64(k & MASK64) < bound:
            expect_counted[k & MASK64] = expect_counted.get(k & MASK64, 0) + 1
    assert counted == expect_counted and key_with_hash(0) in counted
    registers = tracker._registers.tolist()
    assert registers == hll_registers(keys, shards_module.DISTINCT_SKETCH_BITS)
    assert registers[0] == 65 - shards_module.DISTINCT_SKETCH_BITS and registers[-1] >= 1  # hashes 0 and 2**64 - 1
    mrc = shards_stratified(keys, rate, r1, shards_module.MIN_STRATUM_KEYS)
    for c in [0, 1, 2, 5, 50, 300, 10**6, 2**62]:
        assert tracker.mrc([c])[0] == pytest.approx(mrc(c), abs=1e-9), c


def test_saturated_sketch_leaves_the_estimate_finite(monkeypatch):
    """Every register at the top rank (keys hashing to 0 .. 2**bits - 1, one per register) makes
    Ertl's estimate infinite; the distinct-key estimate then uses the counted keys alone and the
    MRC stays finite and equal to the reference's (it was NaN, and mrc() raised)."""
    bits = 4
    monkeypatch.setattr(shards_module, "DISTINCT_SKETCH_BITS", bits)
    saturating = np.array([key_with_hash(h) for h in range(1 << bits)], dtype=np.uint64).view(np.int64)
    keys = np.concatenate([saturating, zipf_stream(600, 80, 0.9, 2), saturating])
    tracker = ShardsTracker(rate=0.3, stratify_rate=0.6)
    tracker.access(keys)
    tracker.check()
    assert tracker._registers.tolist() == [65 - bits] * (1 << bits)
    assert shards_module.hll_estimate(tracker._registers) == math.inf == hll_improved_estimate([65 - bits] * 16)
    counted = int(np.count_nonzero(tracker._strata_slots[1::2]))
    assert tracker.distinct_keys_estimate == counted / 0.6 == pytest.approx(distinct_estimate(keys, 0.6, bits))
    mrc = shards_stratified(keys, 0.3, 0.6, shards_module.MIN_STRATUM_KEYS, bits)
    for c in [0, 1, 3, 10, 40, 200]:
        assert tracker.mrc([c])[0] == pytest.approx(mrc(c), abs=1e-9), c


def test_rate_one_counting_every_key_is_the_exact_histogram():
    """rate 1 with stratify_rate 1: every key sampled and counted, so the weights are 1, the
    distance scale 1 and the histogram the exact tracker's, bucket for bucket."""
    keys = zipf_stream(20_000, 3_000, 0.9, 6)
    exact, tracker = StackDistanceTracker(), ShardsTracker(rate=1.0, stratify_rate=1.0, initial_keys=1)
    exact.access(keys)
    tracker.access(keys)
    want, got = exact.histogram(), tracker.histogram()
    assert got.scale == 1.0 and got.cold == want.cold and got.total == want.total
    assert np.array_equal(got.counts, want.counts[: got.counts.shape[0]]) and not want.counts[got.counts.shape[0]:].any()
    assert tracker.distinct_keys_estimate == exact.num_keys and np.all(tracker.stratum_weights()[1] == 1.0)


def test_counts_table_and_log_grow_many_times():
    """From one preallocated key, batches of uneven sizes make the counts table (30,000 new keys
    first) and the (id, distance) log (then 40,000 references to 500 hot keys) grow several
    times; check() after every batch, and the result equals the reference."""
    keys = np.concatenate([np.arange(30_000, dtype=np.int64) * 7919 + 10**9, zipf_stream(40_000, 500, 0.9, 8)])
    tracker = ShardsTracker(rate=0.5, stratify_rate=0.75, initial_keys=1)
    table_sizes, log_sizes = {tracker._strata_slots.shape[0]}, {tracker._log_ids.shape[0]}
    cuts = np.cumsum([1, 4095, 1, 4097, 3, 9000, 20, 12_000, 5000, 7, 10_000, 8000])
    for part in np.split(keys, cuts):
        tracker.access(part)
        tracker.check()
        table_sizes.add(tracker._strata_slots.shape[0])
        log_sizes.add(tracker._log_ids.shape[0])
    assert len(table_sizes) >= 4 and len(log_sizes) >= 4
    mrc = shards_stratified(keys, 0.5, 0.75, shards_module.MIN_STRATUM_KEYS)
    for c in [0, 1, 10, 100, 1000]:
        assert tracker.mrc([c])[0] == pytest.approx(mrc(c), abs=1e-9), c


@pytest.mark.parametrize("repeats", [1, 4])
def test_no_sampled_key_yet_still_counts_the_cold_misses(repeats):
    """A stream in which no key passes the sampling filter: stratified SHARDS has no distance
    but still knows the distinct keys (sketch and counted keys), so every miss ratio at c >= 1 is
    the cold misses' share, not 0 (all-distinct keys: 1.0, like the exact curve)."""
    rate = 0.01
    keys = np.array([k for k in range(3000) if mix64(k) >= int(rate * 2.0**64)][:400], dtype=np.int64)
    keys = np.tile(keys, repeats)
    tracker = ShardsTracker(rate=rate, initial_keys=2)
    tracker.access(keys)
    tracker.check()
    assert tracker.num_keys == 0
    exact = StackDistanceTracker()
    exact.access(keys)
    reference = shards_stratified(keys, rate, tracker.stratify_rate, shards_module.MIN_STRATUM_KEYS)
    for c in [0, 1, 50, 10_000]:
        assert tracker.mrc([c])[0] == pytest.approx(reference(c), abs=1e-9)
        assert abs(tracker.mrc([c])[0] - (1.0 if c == 0 else 1 / repeats)) < 0.01  # 400 cold misses
        if repeats == 1:
            assert abs(tracker.mrc([c])[0] - exact.mrc([c])[0]) < 0.01
    assert ShardsTracker(rate=rate).mrc([0, 1]).tolist() == [1.0, 1.0]  # nothing seen at all
