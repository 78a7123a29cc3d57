"""rope_from_config on the RoPE settings of real model families, against transformers' own code.

The dicts are the ``rope_*`` fields of the published ``config.json`` files (Llama-3.1-8B,
Qwen2.5-7B / its YaRN long-context recipe, Qwen3-8B, DeepSeek-style YaRN with mscale), given
to transformers the way ``from_pretrained`` gives them (``rope_scaling`` + ``rope_theta``), as
the transformers-5 ``rope_parameters`` shape, as a plain ``config.json`` dict and as a
transformers-4 style object.
"""

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

from kvmm.compress.hf import rope_from_config  # noqa: E402
from kvmm.errors import BadInputError  # noqa: E402

LLAMA31 = {"rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
MODELS = {
    # name: (config class, size fields, rope fields)
    "llama-3.1-8b": ("LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                         max_position_embeddings=131072), LLAMA31),
    "qwen2.5-7b": ("Qwen2Config", dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                       max_position_embeddings=32768), {"rope_theta": 1000000.0, "rope_scaling": None}),
    "qwen2.5-7b-yarn": ("Qwen2Config", dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                            max_position_embeddings=131072),
                        {"rope_theta": 1000000.0,
                         "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
    "qwen3-8b": ("Qwen3Config", dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                     max_position_embeddings=40960), {"rope_theta": 1000000.0, "rope_scaling": None}),
    "qwen3-yarn": ("Qwen3Config", dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                       max_position_embeddings=131072),
                   {"rope_theta": 1000000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                              "original_max_position_embeddings": 32768}}),
    "deepseek-yarn-mscale": ("LlamaConfig", dict(hidden_size=2048, num_attention_heads=16, head_dim=64,
                                                 max_position_embeddings=163840),
                             {"rope_theta": 10000.0, "rope_scaling": {
                                 "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                 "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707}}),
    "yarn-explicit-attention-factor": ("LlamaConfig", dict(hidden_size=4096, num_attention_heads=32,
                                                           max_position_embeddings=131072),
                                       {"rope_theta": 1000000.0, "rope_scaling": {
                                           "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                                           "attention_factor": 0.8, "beta_fast": 16.0, "beta_slow": 2.0}}),
    "yarn-no-truncate": ("LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=65536),
                         {"rope_theta": 1000000.0, "rope_scaling": {
                             "rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768,
                             "truncate": False}}),
    "linear": ("LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=8192),
               {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}),
}


def _hf_config(name):
    cls, size, rope = MODELS[name]
    return getattr(transformers, cls)(**size, **{k: dict(v) if isinstance(v, dict) else v for k, v in rope.items()})


def _hf_frequencies(config):
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        inv_freq, factor = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return inv_freq.double().numpy(), float(factor)


@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_rope_settings_match_transformers(name):
    config = _hf_config(name)
    inv_freq, factor = _hf_frequencies(config)
    cls, size, rope_fields = MODELS[name]
    flat = dict(size, **rope_fields, model_type=cls)
    old_style = types.SimpleNamespace(**size, **rope_fields)  # transformers 4: attributes, no rope_parameters
    new_style = types.SimpleNamespace(**size, rope_parameters=dict(config.rope_parameters))
    for source in (config, flat, old_style, new_style):
        rope = rope_from_config(source)
        # transformers computes inv_freq in float32
        np.testing.assert_allclose(rope.frequencies(), inv_freq, rtol=2e-6, err_msg=f"{name}: {source!r:.80}")
        assert rope.attention_factor == pytest.approx(factor, rel=1e-12)
        assert rope.theta == config.rope_parameters["rope_theta"] and rope.layout == "half"
        assert rope.head_dim == size.get("head_dim", size["hidden_size"] // size["num_attention_heads"])


def test_llama31_rotation_matches_llama_rotary_embedding():
    config = _hf_config("llama-3.1-8b")
    rope = rope_from_config(config)
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    pos = torch.tensor([[0, 1, 7, 100, 2047, 8191, 8192, 20000]])
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), pos)
    mine_cos, mine_sin = rope.cos_sin(pos[0].numpy())
    # float32 angles in transformers: about 1e-7 * angle of round-off
    np.testing.assert_allclose(cos[0].double().numpy(), mine_cos, atol=5e-3)
    np.testing.assert_allclose(sin[0].double().numpy(), mine_sin, atol=5e-3)
    np.testing.assert_allclose(cos[0, :4].double().numpy(), mine_cos[:4], atol=2e-5)  # angles <= 100 rad


def test_empty_rope_parameters_fall_back_to_rope_scaling_and_theta_inside_wins():
    old = types.SimpleNamespace(hidden_size=64, num_attention_heads=4, max_position_embeddings=4096, rope_theta=1e4,
                                rope_parameters={}, rope_scaling={"type": "linear", "factor": 2.0, "rope_theta": 5e5})
    rope = rope_from_config(old)
    assert (rope.scaling.kind, rope.scaling.factor, rope.theta) == ("linear", 2.0, 5e5)
    old.rope_scaling = {"type": "linear", "factor": 2.0, "rope_theta": None}  # None inside: the attribute
    assert rope_from_config(old).theta == 1e4


def test_top_level_original_max_position_embeddings_wins_as_in_transformers():
    fields = dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072, rope_theta=1e6,
                  original_max_position_embeddings=16384,
                  rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32768})
    config = transformers.LlamaConfig(**{k: dict(v) if isinstance(v, dict) else v for k, v in fields.items()})
    inv_freq, factor = _hf_frequencies(config)
    assert config.rope_parameters["original_max_position_embeddings"] == 16384
    for source in (config, fields, types.SimpleNamespace(**fields)):
        rope = rope_from_config(source)
        assert rope.scaling.original_max_position_embeddings == 16384
        np.testing.assert_allclose(rope.frequencies(), inv_freq, rtol=2e-6)


@pytest.mark.parametrize("fields, match", [
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "not supported"),
    ({"num_attention_heads": None, "hidden_size": None}, "head_dim"),
])
def test_unsupported_or_incomplete_settings_raise_bad_input(fields, match):
    config = {**dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=4096, rope_theta=1e4), **fields}
    with pytest.raises(BadInputError, match=match):
        rope_from_config(config)


def test_bfloat16_torch_tensors_are_read_as_float32():
    # q/k captured from a bf16 model: numpy cannot read bfloat16 tensors directly
    from kvmm.compress import H2OScorer, KeyNormScorer, RopeConfig, TriAttentionPolicy, TriAttentionScorer, calibrate

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(16, 4, 8, generator=gen).to(torch.bfloat16)
    k = torch.randn(16, 2, 8, generator=gen).to(torch.bfloat16)
    rope = RopeConfig(8, 1e6)
    cal = calibrate(q, [k], rope=rope)
    ref = calibrate(q.float().numpy(), k.float().numpy(), rope=rope)
    np.testing.assert_array_equal(cal.q_center, ref.q_center)
    np.testing.assert_array_equal(rope.apply(k, np.arange(16)), rope.apply(k.float().numpy(), np.arange(16)))
    scorer = TriAttentionScorer(cal)
    np.testing.assert_array_equal(scorer.score(k, np.arange(16), now=16),
                                  scorer.score(k.float().numpy(), np.arange(16), now=16))
    policy = TriAttentionPolicy(scorer, budget=8)
    policy.observe(0, keys=k, attention=torch.full((4, 1, 16), 1 / 16).to(torch.bfloat16))
    assert policy.scores(0).shape == (16,)
    for s in (KeyNormScorer(), H2OScorer()):
        s.observe(0, keys=k, attention=torch.full((4, 1, 16), 1 / 16).to(torch.bfloat16))
        assert s.scores(0).shape == (16,)


def test_multimodal_configs_use_their_text_config():
    from kvmm.compress.hf import model_shape

    config = transformers.Qwen2_5_VLConfig(text_config=dict(hidden_size=256, num_attention_heads=4,
                                                            num_key_value_heads=2, num_hidden_layers=3,
                                                            rope_theta=123456.0))
    rope = rope_from_config(config)
    assert (rope.head_dim, rope.theta, rope.scaling.kind) == (64, 123456.0, "none")
    assert rope_from_config(config.to_dict()) == rope  # the config.json of the model
    shape = model_shape(types.SimpleNamespace(config=config))
    assert shape == {"num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "head_dim": 64}
