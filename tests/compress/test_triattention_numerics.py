"""TriAttention at the edges real serving hits: positions near 1e6 and beyond, float32/float16 keys,
GQA 1/4/8, budget == live tokens, interval 1, odd ``now`` values, empty inputs."""

import warnings

import numpy as np
import pytest

from kvmm.compress import RopeConfig, RopeScaling, TriAttentionPolicy, TriAttentionScorer, calibrate
from kvmm.errors import BadInputError, KvmmError
from kvmm.testing.models import triattention as naive

SCALINGS = {"llama3.1": RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=8192),
            "yarn": RopeScaling("yarn", factor=4.0, original_max_position_embeddings=32768)}


def _calibration(rng, heads, kv, scaling, d=128):
    rope = RopeConfig(d, 500000.0, "half", scaling)
    q = rng.normal(size=(64, heads, d)) + rng.normal(size=(1, heads, d)) * 2
    k = rng.normal(size=(64, kv, d))
    return calibrate(q, k, rope=rope)


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("heads,kv", [(8, 8), (8, 2), (32, 4)], ids=["gqa1", "gqa4", "gqa8"])
def test_float32_keys_at_positions_near_a_million_match_the_float64_reference(scaling, heads, kv):
    rng = np.random.default_rng(heads * 10 + kv)
    cal = _calibration(rng, heads, kv, SCALINGS[scaling])
    keys = rng.normal(size=(24, kv, 128)).astype(np.float32)
    pos = np.sort(rng.choice(10**6, size=24, replace=False)) + 10**6  # around 1e6 .. 2e6
    now = int(pos.max()) + 1
    for aggregation in ("mean", "max"):
        scorer = TriAttentionScorer(cal, aggregation=aggregation, normalize=False)
        ref = naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys.astype(np.float64), pos, now,
                                cal.rope.frequencies(), scorer.offsets, layout="half",
                                attention_factor=cal.rope.attention_factor, aggregation=aggregation, normalize=False)
        scale = np.abs(ref).max()
        np.testing.assert_allclose(scorer.head_scores(keys, pos, now=now), ref, atol=1e-9 * scale)
        # the same keys stored after RoPE (what a paged cache holds) score the same
        post = cal.rope.apply(keys, pos)
        np.testing.assert_allclose(scorer.head_scores(post, now=now, post_rope=True), ref, atol=1e-9 * scale)
        # positions past the phase tables (2**22) take the direct sin/cos path: same scores
        far = pos + 2**23
        ref_far = naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys.astype(np.float64), far, now + 2**23,
                                    cal.rope.frequencies(), scorer.offsets, layout="half",
                                    attention_factor=cal.rope.attention_factor, aggregation=aggregation,
                                    normalize=False)
        np.testing.assert_allclose(scorer.head_scores(keys, far, now=np.uint64(now + 2**23)), ref_far,
                                   atol=1e-9 * np.abs(ref_far).max())
    # GQA: a KV head's score is the max over its query heads
    scorer = TriAttentionScorer(cal, normalize=False)
    per_head = scorer.head_scores(keys, pos, now=now)
    np.testing.assert_array_equal(scorer.kv_head_scores(keys, pos, now=now),
                                  per_head.reshape(kv, heads // kv, -1).max(axis=1))


def test_key_and_position_dtypes_give_the_same_scores():
    rng = np.random.default_rng(5)
    cal = _calibration(rng, 8, 2, SCALINGS["yarn"], d=32)
    scorer = TriAttentionScorer(cal)
    keys = rng.normal(size=(12, 2, 32)).astype(np.float16)  # bf16/fp16 caches arrive as float16 or float32
    pos = np.arange(12) * 1000
    ref = scorer.score(keys.astype(np.float64), pos, now=12000)
    for k, p, now in ((keys, pos.astype(np.int32), np.int64(12000)),
                      (keys.astype(np.float32), pos.astype(np.uint64), np.array(12000)),
                      (np.asfortranarray(keys.astype(np.float32)), pos.tolist(), 12000.0),
                      (np.repeat(keys, 2, axis=0)[::2], pos[::-1][::-1], 12000)):
        np.testing.assert_allclose(scorer.score(k, p, now=now), ref, rtol=1e-12, atol=1e-12)


def test_empty_keys_and_bad_now():
    rng = np.random.default_rng(6)
    scorer = TriAttentionScorer(_calibration(rng, 4, 2, SCALINGS["yarn"], d=16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty z-score used to warn "Mean of empty slice"
        assert scorer.score(np.zeros((0, 2, 16)), np.zeros(0, np.int64), now=5).shape == (0,)
        assert scorer.head_scores(np.zeros((0, 2, 16)), now=5, post_rope=True).shape == (4, 0)
    keys = rng.normal(size=(3, 2, 16))
    for now in ("10", None, float("nan"), np.inf, [1, 2]):
        with pytest.raises(BadInputError, match="now"):
            scorer.score(keys, np.arange(3), now=now)


@pytest.mark.parametrize("kv", [1, 4, 8])
def test_policy_budget_equal_to_live_interval_one_and_huge_positions(kv):
    rng = np.random.default_rng(kv)
    cal = _calibration(rng, 8, kv, SCALINGS["llama3.1"], d=16)
    scorer = TriAttentionScorer(cal)
    policy = TriAttentionPolicy(scorer, budget=20, interval=1, aggregation="global", protect_prompt=False,
                                trigger="interval")
    policy.observe(0, keys=rng.normal(size=(20, kv, 16)).astype(np.float32),
                   positions=np.arange(10**6, 10**6 + 20, dtype=np.uint64))
    assert policy.step(0).size == 0  # budget == live tokens: nothing to evict
    policy.observe(0, keys=rng.normal(size=(1, kv, 16)))  # next position: 10**6 + 20
    evicted = policy.step(0)  # interval 1: compresses right away, back to the budget
    assert evicted.size == 1 and policy.live_positions(0).size == 20
    assert np.setdiff1d(np.arange(10**6, 10**6 + 21), policy.live_positions(0)).tolist() == evicted.tolist()
    assert policy.keep_per_head(0, 20).shape == (kv, 20)
    policy.check()
    with pytest.raises(BadInputError, match="2\\*\\*63"):  # used to wrap to a negative position
        policy.observe(0, keys=rng.normal(size=(1, kv, 16)), positions=np.array([2**63 + 1], dtype=np.uint64))
    with pytest.raises(KvmmError):
        TriAttentionPolicy(scorer, budget=0)
    policy.check()


def test_calibration_files_torn_or_with_nan_statistics_raise_calibration_error(tmp_path):
    from kvmm.compress import Calibration
    from kvmm.errors import CalibrationError

    rng = np.random.default_rng(7)
    cal = _calibration(rng, 4, 2, SCALINGS["yarn"], d=16)
    path = cal.save(tmp_path / "cal")
    torn = tmp_path / "torn.npz"
    torn.write_bytes(path.read_bytes()[:200])  # a copy cut short (used to raise zipfile.BadZipFile)
    with pytest.raises(CalibrationError, match="cannot read"):
        Calibration.load(torn)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["q_center"] = arrays["q_center"] * np.nan
    np.savez(tmp_path / "nan.npz", **arrays)
    with pytest.raises(CalibrationError, match="NaN"):  # used to load, then fail every score as "keys contain NaN"
        Calibration.load(tmp_path / "nan.npz")
    assert Calibration.load(path, num_heads=np.int64(4)).num_kv_heads == 2


def test_unsorted_repeated_and_far_apart_positions_match_the_reference():
    # the phase tables keep one row per distinct position // 256 (they used to span 0..max position)
    rng = np.random.default_rng(8)
    cal = _calibration(rng, 8, 2, SCALINGS["llama3.1"], d=32)
    pos = np.array([5, 10**6, 3 * 10**6 + 7, 5, 255, 256, 2**22 - 1, 10**6])
    keys = rng.normal(size=(pos.size, 2, 32)).astype(np.float32)
    scorer = TriAttentionScorer(cal, normalize=False)
    ref = naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys.astype(np.float64), pos, 2**22,
                            cal.rope.frequencies(), scorer.offsets, layout="half",
                            attention_factor=cal.rope.attention_factor, aggregation="mean", normalize=False)
    np.testing.assert_allclose(scorer.head_scores(keys, pos, now=2**22), ref, atol=1e-9 * np.abs(ref).max())
