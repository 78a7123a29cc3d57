"""Calibration statistics, the logit series and the versioned file format."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.compress import (
    Calibration,
    RopeConfig,
    RopeScaling,
    calibrate,
    logit_curve,
    mean_logit_by_distance,
    pearson,
    series_logits,
)
from kvmm.compress.calibration import FORMAT_VERSION
from kvmm.errors import BadInputError, CalibrationError, ShapeError
from kvmm.testing.models import rope as naive


def test_worked_example_from_docstring():
    cal = calibrate(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]), rope=RopeConfig(2))
    assert cal.q_center[0, 0, 0] == pytest.approx(0.5 + 0.5j)
    assert cal.q_abs_mean[0, 0, 0] == pytest.approx(1.0)
    assert cal.concentration[0, 0, 0] == pytest.approx(np.sqrt(0.5))
    assert cal.n_tokens.tolist() == [2]
    assert cal.k_center is None and cal.num_kv_heads == 1


def test_statistics_per_layer_head_and_pair():
    rng = np.random.default_rng(0)
    rope = RopeConfig(8, layout="interleaved")
    q = rng.normal(size=(3, 50, 4, 8))
    k = rng.normal(size=(3, 50, 2, 8))
    cal = calibrate(q, k, rope=rope)
    assert cal.q_center.shape == (3, 4, 4) and cal.k_center.shape == (3, 2, 4)
    z = q[..., 0::2] + 1j * q[..., 1::2]
    np.testing.assert_allclose(cal.q_center, z.mean(axis=1), atol=1e-14)
    np.testing.assert_allclose(cal.q_abs_mean, np.abs(z).mean(axis=1), atol=1e-14)
    assert np.all((cal.concentration >= 0) & (cal.concentration <= 1 + 1e-12))
    # a list of layers with different token counts works the same
    cal2 = calibrate([q[0], q[1][:20]], rope=rope)
    assert cal2.n_tokens.tolist() == [50, 20]


def test_concentration_is_one_for_constant_queries():
    rope = RopeConfig(8)
    q = np.tile(np.arange(1.0, 9.0), (30, 2, 1))
    cal = calibrate(q, rope=rope)
    np.testing.assert_allclose(cal.concentration, 1.0)
    np.testing.assert_allclose(cal.head_concentration(), 1.0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", [RopeScaling(), RopeScaling("yarn", factor=4.0, original_max_position_embeddings=32)])
def test_series_logits_equal_rotated_dot_products(layout, scaling):
    rng = np.random.default_rng(5)
    rope = RopeConfig(8, 10000.0, layout, scaling)
    q, k = rng.normal(size=(6, 2, 8)), rng.normal(size=(6, 1, 8))
    got = series_logits(q, k, rope)
    omega, a = rope.frequencies(), rope.attention_factor
    for h in range(2):
        for m in range(6):
            for n in range(6):
                expect = naive.rotate(q[m, h], m, omega, layout, a) @ naive.rotate(k[n, 0], n, omega, layout, a) / np.sqrt(8)
                assert got[h, m, n] == pytest.approx(expect, abs=1e-12)


def test_logit_curve_equals_measured_for_constant_vectors():
    # With every query equal and every key equal, centers are exact: curve == measurement.
    rope = RopeConfig(8, 100.0)
    rng = np.random.default_rng(6)
    q = np.tile(rng.normal(size=(1, 2, 8)), (40, 1, 1))
    k = np.tile(rng.normal(size=(1, 1, 8)), (40, 1, 1))
    deltas = np.arange(30)
    curve = logit_curve(calibrate(q, k, rope=rope), deltas)[0]
    measured = mean_logit_by_distance(q, k, rope, deltas)
    np.testing.assert_allclose(curve, measured, atol=1e-12)
    np.testing.assert_allclose(pearson(curve, measured), 1.0)


def test_logit_curve_tracks_measured_mean_for_concentrated_random_heads():
    rng = np.random.default_rng(7)
    rope = RopeConfig(16, 10000.0)
    q = rng.normal(size=(400, 2, 16)) * 0.3 + rng.normal(size=(1, 2, 16)) * 2
    k = rng.normal(size=(400, 1, 16)) * 0.3 + rng.normal(size=(1, 1, 16)) * 2
    deltas = np.arange(1, 200)
    r = pearson(logit_curve(calibrate(q, k, rope=rope), deltas)[0], mean_logit_by_distance(q, k, rope, deltas))
    assert np.all(r > 0.9)


def test_mean_logit_by_distance_brute_force():
    rng = np.random.default_rng(8)
    rope = RopeConfig(4, 50.0)
    q, k = rng.normal(size=(9, 2, 4)), rng.normal(size=(9, 2, 4))
    full = series_logits(q, k, rope)
    got = mean_logit_by_distance(q, k, rope, [0, 3, 8, 9])
    for j, delta in enumerate([0, 3, 8]):
        expect = np.mean([full[:, m, m - delta] for m in range(delta, 9)], axis=0)
        np.testing.assert_allclose(got[:, j], expect, atol=1e-12)
    assert np.isnan(got[:, 3]).all()


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(9)
    rope = RopeConfig(8, 1e6, "interleaved", RopeScaling("llama3", factor=8.0, original_max_position_embeddings=128))
    cal = calibrate(rng.normal(size=(2, 20, 4, 8)), rng.normal(size=(2, 20, 2, 8)), rope=rope)
    path = cal.save(tmp_path / "cal")
    assert path.name == "cal.npz"
    back = Calibration.load(path, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)
    assert back.rope == rope
    for name in ("q_center", "q_abs_mean", "k_center", "k_abs_mean", "n_tokens"):
        np.testing.assert_array_equal(getattr(back, name), getattr(cal, name))
    q_only = calibrate(rng.normal(size=(5, 4, 8)), rope=rope).save(tmp_path / "q.npz")
    assert Calibration.load(q_only).k_center is None


def test_load_rejects_wrong_version_shape_and_garbage(tmp_path):
    rope = RopeConfig(8)
    cal = calibrate(np.ones((4, 2, 8)), np.ones((4, 2, 8)), rope=rope)
    path = cal.save(tmp_path / "c.npz")
    with pytest.raises(CalibrationError, match="num_heads=2 \\(expected 32\\)"):
        Calibration.load(path, num_heads=32)
    with pytest.raises(CalibrationError, match="head_dim=8 \\(expected 128\\)"):
        Calibration.load(path, head_dim=128)
    data = dict(np.load(path))
    data["format_version"] = np.int64(FORMAT_VERSION + 1)
    np.savez(tmp_path / "v2.npz", **data)
    with pytest.raises(CalibrationError, match=f"version {FORMAT_VERSION + 1}"):
        Calibration.load(tmp_path / "v2.npz")
    data["format_version"] = np.int64(FORMAT_VERSION)
    data["q_center"] = data["q_center"][..., :2]
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(CalibrationError, match="q_center"):
        Calibration.load(tmp_path / "bad.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CalibrationError):
        Calibration.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(CalibrationError, match="not a kvmm calibration"):
        Calibration.load(tmp_path / "other.npz")


def test_bad_input():
    rope = RopeConfig(8)
    q = np.ones((4, 2, 8))
    with pytest.raises(ShapeError, match="head_dim=8"):
        calibrate(np.ones((4, 2, 6)), rope=rope)
    bad = q.copy()
    bad[2, 1, 0] = np.nan
    with pytest.raises(BadInputError, match="NaN or inf"):
        calibrate(bad, rope=rope)
    bad[2, 1, 0] = np.inf
    with pytest.raises(BadInputError, match="NaN or inf"):
        calibrate(q, bad, rope=rope)
    with pytest.raises(ShapeError, match="multiple of KV heads"):
        calibrate(np.ones((4, 3, 8)), np.ones((4, 2, 8)), rope=rope)
    with pytest.raises(CalibrationError, match="key centers"):
        logit_curve(calibrate(q, rope=rope), [1, 2])
    with pytest.raises(BadInputError):
        calibrate(q, rope="half")


@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31))
def test_gqa_curve_uses_the_group_kv_head(kv, group, seed):
    rng = np.random.default_rng(seed)
    rope = RopeConfig(4, 100.0)
    q = rng.normal(size=(10, kv * group, 4))
    k = rng.normal(size=(10, kv, 4))
    cal = calibrate(q, k, rope=rope)
    curve = logit_curve(cal, [0.0, 5.0])[0]
    for h in range(kv * group):
        single = calibrate(q[:, h:h + 1], k[:, h // group:h // group + 1], rope=rope)
        np.testing.assert_allclose(curve[h], logit_curve(single, [0.0, 5.0])[0, 0], atol=1e-12)
