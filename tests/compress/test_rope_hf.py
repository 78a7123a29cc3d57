"""RoPE against transformers' own rotary code (needs the ``hf`` extra)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.cohere import modeling_cohere  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

from kvmm.compress import RopeConfig  # noqa: E402
from kvmm.compress.hf import rope_from_config  # noqa: E402

HF_SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
    "yarn-mscale": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512,
                    "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16.0},
}


def _config(name, theta=500000.0):
    scaling = HF_SCALINGS[name]
    kwargs = dict(hidden_size=128, num_attention_heads=2, head_dim=64, max_position_embeddings=2048)
    if scaling is not None:
        kwargs["rope_scaling"] = dict(scaling, rope_theta=theta)
    else:
        kwargs["rope_theta"] = theta
    return LlamaConfig(**kwargs)


@pytest.mark.parametrize("name", list(HF_SCALINGS))
def test_frequencies_and_attention_factor_match_transformers(name):
    config = _config(name)
    rope = rope_from_config(config)
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        inv_freq, factor = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    # transformers computes inv_freq in float32: agreement to float32 round-off
    np.testing.assert_allclose(rope.frequencies(), inv_freq.double().numpy(), rtol=2e-6)
    assert rope.attention_factor == pytest.approx(float(factor), rel=1e-12)
    assert rope.theta == 500000.0 and rope.head_dim == 64 and rope.layout == "half"


@pytest.mark.parametrize("name", list(HF_SCALINGS))
def test_rotation_matches_transformers_rotary_embedding(name):
    config = _config(name)
    rope = rope_from_config(config)
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    positions = torch.arange(0, 300, 3)[None]
    cos, sin = rotary(torch.zeros(1, dtype=torch.float64), positions)
    mine_cos, mine_sin = rope.cos_sin(positions[0].numpy())
    # cos/sin of float32 angles (up to ~300 rad): float32 round-off of the angle
    np.testing.assert_allclose(cos[0].numpy(), mine_cos, atol=1e-4)
    np.testing.assert_allclose(sin[0].numpy(), mine_sin, atol=1e-4)


@pytest.mark.parametrize("name", list(HF_SCALINGS))
def test_half_layout_matches_hf_apply_rotary_pos_emb_to_float64_roundoff(name):
    rope = rope_from_config(_config(name))
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(12, 2, 64)), rng.normal(size=(12, 1, 64))
    pos = rng.integers(0, 100_000, size=12)
    cos, sin = (torch.from_numpy(a) for a in rope.cos_sin(pos))
    q_hf, k_hf = modeling_llama.apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(k), cos, sin, unsqueeze_dim=1)
    np.testing.assert_allclose(rope.apply(q, pos), q_hf.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rope.apply(k, pos), k_hf.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(HF_SCALINGS))
def test_interleaved_layout_matches_transformers_interleaved_rotate_half(name):
    # Cohere's rotary code in transformers pairs even/odd reals (the Meta / GGUF layout).
    rope = rope_from_config(_config(name)).with_layout("interleaved")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(9, 3, 64))
    pos = rng.integers(0, 100_000, size=9)
    angles = np.outer(pos, rope.frequencies())
    cos = torch.from_numpy(np.repeat(np.cos(angles), 2, axis=-1) * rope.attention_factor)[:, None, :]
    sin = torch.from_numpy(np.repeat(np.sin(angles), 2, axis=-1) * rope.attention_factor)[:, None, :]
    xt = torch.from_numpy(x)
    ref = xt * cos + modeling_cohere.rotate_half(xt) * sin
    np.testing.assert_allclose(rope.apply(x, pos), ref.numpy(), rtol=1e-12, atol=1e-12)


def test_rope_theta_from_old_style_attributes():
    class Old:  # transformers 4.x style: rope_theta + rope_scaling attributes
        hidden_size, num_attention_heads, head_dim = 64, 4, 16
        rope_theta = 1e6
        rope_scaling = {"type": "linear", "factor": 2.0}
        max_position_embeddings = 4096
        rope_parameters = None

    rope = rope_from_config(Old())
    assert (rope.theta, rope.scaling.kind, rope.scaling.factor, rope.head_dim) == (1e6, "linear", 2.0, 16)
    assert isinstance(rope, RopeConfig)
