"""TriAttention scorer: the numba kernel against the plain numpy reference."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.compress import RopeConfig, RopeScaling, TriAttentionScorer, calibrate, default_offsets
from kvmm.errors import BadInputError, CalibrationError, ShapeError
from kvmm.testing.models import triattention as naive

SCALINGS = [RopeScaling(), RopeScaling("llama3", factor=8.0, original_max_position_embeddings=64),
            RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64)]


def _setup(seed, heads=4, kv=2, d=16, n=50, layout="half", scaling=RopeScaling(), with_keys=True):  # noqa: B008 (frozen)
    rng = np.random.default_rng(seed)
    rope = RopeConfig(d, 10000.0, layout, scaling)
    q = rng.normal(size=(80, heads, d)) + rng.normal(size=(1, heads, d)) * 1.5
    k = rng.normal(size=(80, kv, d))
    cal = calibrate(q, k if with_keys else None, rope=rope)
    keys = rng.normal(size=(n, kv, d)) * rng.uniform(0.5, 2.0, size=(n, 1, 1))
    positions = np.sort(rng.choice(5000, size=n, replace=False))
    return cal, keys, positions


def _reference(cal, keys, positions, now, offsets, **kw):
    rope = cal.rope
    return naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys, positions, now, rope.frequencies(), offsets,
                             layout=rope.layout, attention_factor=rope.attention_factor, **kw)


def test_default_offsets_are_powers_of_two():
    assert default_offsets().tolist() == [2.0 ** i for i in range(17)]
    assert default_offsets(10).tolist() == [1, 2, 4, 8]


@pytest.mark.parametrize("aggregation", ["mean", "max"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s.kind)
def test_kernel_matches_reference(aggregation, layout, scaling):
    cal, keys, pos = _setup(1, layout=layout, scaling=scaling)
    for normalize in (False, True):
        scorer = TriAttentionScorer(cal, aggregation=aggregation, normalize=normalize)
        got = scorer.head_scores(keys, pos, now=6000)
        ref = _reference(cal, keys, pos, 6000, scorer.offsets, aggregation=aggregation, normalize=normalize)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


@given(st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 3), st.integers(1, 40),
       st.sampled_from(["mean", "max"]), st.booleans(), st.lists(st.integers(0, 300), min_size=1, max_size=5))
def test_kernel_matches_reference_random_shapes(seed, kv, group, n, aggregation, norm_term, offsets):
    cal, keys, pos = _setup(seed, heads=kv * group, kv=kv, d=8, n=n)
    scorer = TriAttentionScorer(cal, aggregation=aggregation, normalize=False, norm_term=norm_term, offsets=offsets)
    got = scorer.head_scores(keys, pos, now=int(pos.max()) + 1)
    ref = _reference(cal, keys, pos, int(pos.max()) + 1, np.asarray(offsets, float), aggregation=aggregation,
                     normalize=False, norm_term=norm_term)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    kv_scores = scorer.kv_head_scores(keys, pos, now=int(pos.max()) + 1)
    np.testing.assert_allclose(kv_scores, naive.kv_head_scores(ref, kv), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(scorer.score(keys, pos, now=int(pos.max()) + 1), kv_scores.max(axis=0), atol=1e-12)


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s.kind)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_post_rope_keys_score_like_pre_rope_keys(scaling, layout):
    cal, keys, pos = _setup(2, scaling=scaling, layout=layout)
    scorer = TriAttentionScorer(cal, normalize=False)
    rotated = cal.rope.apply(keys, pos)
    np.testing.assert_allclose(scorer.head_scores(rotated, now=7000, post_rope=True),
                               scorer.head_scores(keys, pos, now=7000), rtol=1e-9, atol=1e-9)


def test_mean_trig_term_is_the_mean_of_the_series_over_offsets():
    # With a single offset and no norm term the score is the predicted logit q_center . key at that distance.
    cal, keys, pos = _setup(3, heads=2, kv=2)
    rope = cal.rope
    single = TriAttentionScorer(cal, normalize=False, norm_term=False, offsets=[5])
    now = 6000
    q_rot = rope.apply(rope.from_complex(cal.q_center[0])[None], [now + 5])[0]  # (heads, d)
    k_rot = rope.apply(keys, pos)
    expect = np.einsum("hd,nhd->hn", q_rot, k_rot) / np.sqrt(rope.head_dim)
    np.testing.assert_allclose(single.head_scores(keys, pos, now=now), expect, atol=1e-9)
    many = TriAttentionScorer(cal, normalize=False, norm_term=False, offsets=[1, 5, 9])
    parts = [TriAttentionScorer(cal, normalize=False, norm_term=False, offsets=[o]).head_scores(keys, pos, now=now)
             for o in (1, 5, 9)]
    np.testing.assert_allclose(many.head_scores(keys, pos, now=now), np.mean(parts, axis=0), atol=1e-9)


def test_zscore_per_head():
    cal, keys, pos = _setup(4)
    s = TriAttentionScorer(cal).head_scores(keys, pos, now=6000)
    np.testing.assert_allclose(s.mean(axis=1), 0.0, atol=1e-9)
    np.testing.assert_allclose(s.std(axis=1), 1.0, atol=1e-9)


def test_concentrated_head_prefers_keys_aligned_with_the_center():
    rope = RopeConfig(8, 10000.0)
    center = np.array([3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    q = np.tile(center, (20, 1, 1))
    cal = calibrate(q, rope=rope)
    # keys all at distance 0-ish; the one along the center wins, the opposite one loses
    keys = np.array([center, -center, np.roll(center, 1)])[:, None, :]
    s = TriAttentionScorer(cal, normalize=False, offsets=[0]).score(keys, [10, 10, 10], now=10)
    assert s[0] > s[2] > s[1]


def test_bad_input():
    cal, keys, pos = _setup(5)
    scorer = TriAttentionScorer(cal)
    bad = keys.copy()
    bad[3, 1, 2] = np.nan
    with pytest.raises(BadInputError, match="NaN or inf"):
        scorer.score(bad, pos, now=10)
    with pytest.raises(ShapeError, match="head_dim=16"):
        scorer.score(keys[..., :8], pos, now=10)
    with pytest.raises(ShapeError, match="multiple"):
        scorer.score(np.ones((3, 3, 16)), [0, 1, 2], now=10)
    with pytest.raises(CalibrationError, match="KV heads"):
        scorer.score(np.ones((3, 4, 16)), [0, 1, 2], now=10)
    with pytest.raises(BadInputError, match="positions are required"):
        scorer.score(keys, now=10)
    with pytest.raises(ShapeError, match="positions"):
        scorer.score(keys, pos[:-1], now=10)
    with pytest.raises(BadInputError, match="now"):
        scorer.score(keys, pos, now=float("nan"))
    with pytest.raises(BadInputError, match="aggregation"):
        TriAttentionScorer(cal, aggregation="median")
    with pytest.raises(BadInputError, match="layer"):
        TriAttentionScorer(cal, layer=1)
    with pytest.raises(BadInputError, match="offsets"):
        TriAttentionScorer(cal, offsets=[])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float32_keys_are_read_in_place(layout):
    cal, keys, pos = _setup(6, layout=layout)
    scorer = TriAttentionScorer(cal, normalize=False)
    k32 = keys.astype(np.float32)
    np.testing.assert_allclose(scorer.head_scores(k32, pos, now=6000),
                               scorer.head_scores(k32.astype(np.float64), pos, now=6000), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("post_rope", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mha_fused_path_matches_reference(post_rope, layout):
    # one query head per KV head and the folded mean: the kernel's fused fast path
    cal, keys, pos = _setup(7, heads=3, kv=3, layout=layout, scaling=SCALINGS[2])
    scorer = TriAttentionScorer(cal, normalize=False)
    given_keys = cal.rope.apply(keys, pos) if post_rope else keys
    got = scorer.head_scores(given_keys, None if post_rope else pos, now=6000, post_rope=post_rope)
    np.testing.assert_allclose(got, _reference(cal, keys, pos, 6000, scorer.offsets, normalize=False),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("positions", ["fractional", "huge"])
def test_direct_sin_cos_path_for_positions_outside_the_tables(positions):
    # integer positions below 2**22 use phase tables; the others take sin/cos directly
    cal, keys, pos = _setup(8, heads=2, kv=2)
    pos = pos + 0.5 if positions == "fractional" else pos + 2**23
    scorer = TriAttentionScorer(cal, normalize=False)
    now = float(pos.max()) + 1
    np.testing.assert_allclose(scorer.head_scores(keys, pos, now=now),
                               _reference(cal, keys, pos, now, scorer.offsets, normalize=False), rtol=1e-7, atol=1e-7)


@given(st.integers(0, 2**31), st.sampled_from([np.nan, np.inf, -np.inf]), st.sampled_from(["mean", "max"]),
       st.booleans(), st.sampled_from(["half", "interleaved"]), st.sampled_from([np.float32, np.float64]),
       st.integers(1, 2))
def test_any_non_finite_key_element_is_rejected(seed, value, aggregation, post_rope, layout, dtype, kv):
    # the kernel runs without fastmath's no-NaN assumption so every bad element reaches the output
    cal, keys, pos = _setup(seed % 1000, heads=2, kv=kv, d=8, n=12, layout=layout)
    rng = np.random.default_rng(seed)
    bad = keys.astype(dtype)
    i, g, j = rng.integers(12), rng.integers(kv), rng.integers(8)
    bad[i, g, j] = value
    scorer = TriAttentionScorer(cal, aggregation=aggregation)
    with pytest.raises(BadInputError, match=f"first at key {i}"):
        scorer.score(bad, None if post_rope else pos, now=6000, post_rope=post_rope)
