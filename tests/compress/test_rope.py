"""RoPE math against closed forms and the plain reference (numpy only)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.compress import RopeConfig, RopeScaling, convert_layout
from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.testing.models import rope as naive

LLAMA3 = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
YARN = RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64)
SCALINGS = [RopeScaling(), RopeScaling("linear", factor=2.0), LLAMA3, YARN]


def test_base_frequencies_closed_form():
    assert RopeConfig(8, 10000.0).frequencies() == pytest.approx([1.0, 0.1, 0.01, 0.001], rel=1e-15)
    assert RopeConfig(4, 100.0).frequencies() == pytest.approx([1.0, 0.1], rel=1e-15)


def test_linear_scaling_divides_every_frequency():
    base = RopeConfig(16, 500000.0).frequencies()
    lin = RopeConfig(16, 500000.0, scaling=RopeScaling("linear", factor=4.0)).frequencies()
    np.testing.assert_allclose(lin, base / 4.0, rtol=1e-15)


def test_llama3_scaling_three_bands_closed_form():
    rope = RopeConfig(32, 10000.0, scaling=LLAMA3)
    base, got = rope.base_frequencies(), rope.frequencies()
    wavelen = 2 * math.pi / base
    for f in range(16):
        if wavelen[f] < 64 / 4:  # high frequencies: unchanged
            assert got[f] == base[f]
        elif wavelen[f] > 64 / 1:  # low frequencies: divided by factor
            assert got[f] == pytest.approx(base[f] / 8.0, rel=1e-15)
        else:  # medium band: blend of base/factor and base weighted by smooth
            smooth = (64 / wavelen[f] - 1.0) / (4.0 - 1.0)
            assert got[f] == pytest.approx((1 - smooth) * base[f] / 8 + smooth * base[f], rel=1e-14)
    # the test exercises all three bands
    assert (wavelen < 16).any() and (wavelen > 64).any() and ((wavelen >= 16) & (wavelen <= 64)).any()


def test_yarn_scaling_ramp_and_attention_factor_closed_form():
    d, theta = 32, 10000.0
    rope = RopeConfig(d, theta, scaling=YARN)
    assert rope.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)

    def corr(rot):
        return d * math.log(64 / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low, high = max(math.floor(corr(32.0)), 0), min(math.ceil(corr(1.0)), d - 1)
    base = rope.base_frequencies()
    for f in range(d // 2):
        ramp = min(max((f - low) / (high - low), 0.0), 1.0)
        expect = base[f] / 4.0 * ramp + base[f] * (1 - ramp)
        assert rope.frequencies()[f] == pytest.approx(expect, rel=1e-14)
    assert RopeConfig(d, theta, scaling=RopeScaling("yarn", factor=4.0, attention_factor=1.5)).attention_factor == 1.5
    ms = RopeScaling("yarn", factor=4.0, mscale=1.0, mscale_all_dim=0.5)
    assert RopeConfig(d, theta, scaling=ms).attention_factor == pytest.approx(
        (0.1 * math.log(4) + 1) / (0.05 * math.log(4) + 1), rel=1e-15)
    for s in SCALINGS[:3]:
        assert RopeConfig(d, theta, scaling=s).attention_factor == 1.0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s.kind)
def test_apply_matches_plain_reference(layout, scaling):
    rng = np.random.default_rng(1)
    rope = RopeConfig(16, 10000.0, layout, scaling)
    x = rng.normal(size=(7, 3, 16))
    pos = rng.integers(0, 5000, size=7)
    got = rope.apply(x, pos)
    omega = rope.frequencies()
    for t in range(7):
        for h in range(3):
            np.testing.assert_allclose(got[t, h], naive.rotate(x[t, h], pos[t], omega, layout, rope.attention_factor),
                                       rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rope.unapply(got, pos), x, atol=1e-12)


def test_half_layout_is_hf_rotate_half_form():
    rng = np.random.default_rng(2)
    rope = RopeConfig(8, 10000.0, "half", YARN)
    x = rng.normal(size=(5, 8))
    pos = np.arange(5) * 37
    cos, sin = rope.cos_sin(pos)
    for t in range(5):
        ref = naive.rotate_half_form(x[t], pos[t], rope.frequencies(), rope.attention_factor)
        np.testing.assert_allclose(rope.apply(x, pos)[t], ref, atol=1e-13)
        rot = np.concatenate([-x[t, 4:], x[t, :4]])
        np.testing.assert_allclose(x[t] * cos[t] + rot * sin[t], ref, atol=1e-13)


def test_complex_views_worked_example():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert RopeConfig(4, layout="half").to_complex(x).tolist() == [1 + 3j, 2 + 4j]
    assert RopeConfig(4, layout="interleaved").to_complex(x).tolist() == [1 + 2j, 3 + 4j]
    assert convert_layout(x, "half", "interleaved").tolist() == [1.0, 3.0, 2.0, 4.0]
    for layout in ("half", "interleaved"):
        r = RopeConfig(4, layout=layout)
        np.testing.assert_array_equal(r.from_complex(r.to_complex(x)), x)


@given(st.integers(1, 8), st.integers(0, 2**31), st.sampled_from(["half", "interleaved"]))
def test_layout_conversion_preserves_pairs_and_round_trips(half, seed, src):
    d = 2 * half
    dst = "interleaved" if src == "half" else "half"
    x = np.random.default_rng(seed).normal(size=(3, d))
    y = convert_layout(x, src, dst)
    np.testing.assert_array_equal(RopeConfig(d, layout=dst).to_complex(y), RopeConfig(d, layout=src).to_complex(x))
    np.testing.assert_array_equal(convert_layout(y, dst, src), x)
    # rotating then converting equals converting then rotating
    pos = np.array([0, 5, 123])
    np.testing.assert_allclose(convert_layout(RopeConfig(d, layout=src).apply(x, pos), src, dst),
                               RopeConfig(d, layout=dst).apply(y, pos), atol=1e-12)


@given(st.integers(0, 2**31), st.integers(0, 3), st.sampled_from(["half", "interleaved"]),
       st.integers(0, 10_000), st.integers(0, 10_000), st.integers(-500, 500))
def test_rotated_dot_product_depends_only_on_distance(seed, scaling_idx, layout, m, n, shift):
    rng = np.random.default_rng(seed)
    rope = RopeConfig(8, 10000.0, layout, SCALINGS[scaling_idx])
    q, k = rng.normal(size=(1, 8)), rng.normal(size=(1, 8))
    m2, n2 = m + shift, n + shift
    a = rope.apply(q, [m])[0] @ rope.apply(k, [n])[0]
    b = rope.apply(q, [m2])[0] @ rope.apply(k, [n2])[0]
    assert a == pytest.approx(b, rel=1e-8, abs=1e-8)
    # and equals the trigonometric series
    series = rope.attention_factor ** 2 * np.real(
        (rope.to_complex(q)[0] * np.conj(rope.to_complex(k)[0]) * np.exp(1j * rope.frequencies() * (m - n))).sum())
    assert a == pytest.approx(series, rel=1e-8, abs=1e-8)
    # rotation keeps the norm (up to the attention factor)
    assert np.linalg.norm(rope.apply(q, [m])) == pytest.approx(rope.attention_factor * np.linalg.norm(q), rel=1e-12)


@pytest.mark.parametrize("kwargs, error", [
    (dict(head_dim=7), BadInputError),
    (dict(head_dim=0), BadInputError),
    (dict(head_dim=8.0), DTypeError),  # a float where an integer is expected
    (dict(head_dim=8, layout="neox"), BadInputError),
    (dict(head_dim=8, theta=0.0), BadInputError),
    (dict(head_dim=8, theta=-1.0), BadInputError),
    (dict(head_dim=8, theta=float("nan")), BadInputError),
    (dict(head_dim=8, scaling=dict(kind="dynamic")), BadInputError),
    (dict(head_dim=8, scaling=dict(kind="linear", factor=0.0)), BadInputError),
    (dict(head_dim=8, scaling=dict(kind="llama3", factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0)), BadInputError),
    # non-numbers in the scaling fields used to escape as a bare ValueError / TypeError
    (dict(head_dim=8, theta="fast"), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="linear", factor="abc")), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="linear", factor=None)), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="yarn", factor=4.0, beta_fast=[32])), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="yarn", factor=4.0, attention_factor="x")), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="yarn", factor=4.0, original_max_position_embeddings="long")), DTypeError),
    (dict(head_dim=8, scaling=dict(kind="yarn", factor=4.0, original_max_position_embeddings=0)), BadInputError),
])
def test_bad_config_raises_clear_error(kwargs, error):
    with pytest.raises(error) as info:
        RopeConfig(**kwargs)
    message = str(info.value)
    assert type(info.value) is error  # the documented class itself, not a broader KvmmError
    assert "got" in message and ("expected" in message or "must" in message or "needs" in message)


def test_bad_vectors_raise():
    rope = RopeConfig(8)
    with pytest.raises(ShapeError, match="head_dim=8"):
        rope.apply(np.zeros((3, 6)), [0, 1, 2])
    with pytest.raises(ShapeError, match="one entry per token"):
        rope.apply(np.zeros((3, 8)), [0, 1])
    bad = np.zeros((2, 8))
    bad[1, 3] = np.nan
    with pytest.raises(BadInputError, match="NaN or inf"):
        rope.apply(bad, [0, 1])
    bad[1, 3] = np.inf
    with pytest.raises(BadInputError, match="NaN or inf"):
        rope.to_complex(bad)
    with pytest.raises(BadInputError):
        convert_layout(np.zeros(8), "half", "gguf")


def test_from_hf_dicts():
    assert RopeScaling.from_hf(None).kind == "none"
    assert RopeScaling.from_hf({"rope_type": "default", "rope_theta": 1e6}).kind == "none"
    s = RopeScaling.from_hf({"type": "linear", "factor": 2.0})
    assert (s.kind, s.factor) == ("linear", 2.0)
    y = RopeScaling.from_hf({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    assert (y.kind, y.factor, y.original_max_position_embeddings, y.beta_fast) == ("yarn", 4.0, 4096, 32.0)
    with pytest.raises(BadInputError, match="not supported"):
        RopeScaling.from_hf({"rope_type": "longrope"})
