"""The series from captured pre-RoPE q/k equals tiny transformers models' own attention logits."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kvmm.compress import RopeConfig, TriAttentionScorer, calibrate, convert_layout, series_logits  # noqa: E402
from kvmm.compress.hf import attention_logits, capture_qk, model_shape, rope_from_config  # noqa: E402
from kvmm.errors import BadInputError, DTypeError, ShapeError  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 10000.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0}

CASES = {
    "llama-llama3": ("LlamaConfig", "LlamaForCausalLM", LLAMA3, True),
    "llama-yarn": ("LlamaConfig", "LlamaForCausalLM", YARN, True),
    "qwen2-default": ("Qwen2Config", "Qwen2ForCausalLM", None, False),
    "qwen3-yarn": ("Qwen3Config", "Qwen3ForCausalLM", YARN, True),
    "qwen3-llama3": ("Qwen3Config", "Qwen3ForCausalLM", LLAMA3, True),
}


def tiny_model(name, seed=0):
    config_cls, model_cls, scaling, has_head_dim = CASES[name]
    kwargs = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
    if has_head_dim:
        kwargs["head_dim"] = 16
    if scaling:
        kwargs["rope_scaling"] = dict(scaling)
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**kwargs)
    return getattr(transformers, model_cls)(config).to(torch.float64).eval()


@pytest.mark.parametrize("name", list(CASES))
def test_series_equals_model_logits_both_layouts(name):
    model = tiny_model(name)
    ids = torch.randint(0, 64, (48,), generator=torch.Generator().manual_seed(1))
    rope = rope_from_config(model.config)
    rope_type = (CASES[name][2] or {}).get("rope_type", "none").replace("default", "none")
    assert rope.layout == "half" and rope.scaling.kind == rope_type
    pairs = capture_qk(model, ids)
    logits = attention_logits(model, ids)
    shape = model_shape(model)
    assert len(pairs) == len(logits) == shape["num_layers"] == 2
    interleaved = rope.with_layout("interleaved")
    for (q, k), real in zip(pairs, logits):
        assert q.shape == (48, 4, shape["head_dim"]) and k.shape == (48, 2, shape["head_dim"])
        assert real.shape == (4, 48, 48)
        scale = np.abs(real).max()
        got = series_logits(q, k, rope)
        assert np.abs(got - real).max() <= 1e-4 * scale
        got_i = series_logits(convert_layout(q, "half", "interleaved"), convert_layout(k, "half", "interleaved"),
                              interleaved)
        assert np.abs(got_i - real).max() <= 1e-4 * scale
        # and the series really depends on the scaling: plain RoPE does not fit scaled models
        if rope.scaling.kind != "none":
            plain = series_logits(q, k, RopeConfig(rope.head_dim, rope.theta))
            assert np.abs(plain - real).max() > 1e-3 * scale


def test_scorer_on_captured_keys_pre_and_post_rope_agree():
    model = tiny_model("qwen3-yarn")
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(2))
    rope = rope_from_config(model.config)
    pairs = capture_qk(model, ids)
    cal = calibrate([q for q, _ in pairs], [k for _, k in pairs], rope=rope)
    scorer = TriAttentionScorer(cal, layer=1, normalize=False)
    k = pairs[1][1]
    pos = np.arange(40)
    np.testing.assert_allclose(scorer.head_scores(rope.apply(k, pos), now=40, post_rope=True),
                               scorer.head_scores(k, pos, now=40), rtol=1e-9, atol=1e-9)


def test_bad_inputs():
    model = tiny_model("qwen2-default")
    with pytest.raises(ShapeError):
        capture_qk(model, np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(ShapeError):
        capture_qk(model, [])
    with pytest.raises(DTypeError, match="input_ids must hold integers"):  # was silently truncated to tokens 0, 3
        capture_qk(model, [0.7, 3.9])
    with pytest.raises(DTypeError):
        attention_logits(model, np.array([[1.5, 2.0]]))
    with pytest.raises(BadInputError):
        capture_qk(torch.nn.Linear(2, 2), [1, 2])
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                      rope_scaling={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(BadInputError, match="not supported"):
        rope_from_config(config)
