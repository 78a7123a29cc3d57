"""rope_from_config picks the interleaved layout for GPT-J / Cohere-style models and refuses partial rotary."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kvmm.compress.hf import attention_logits, capture_qk, rope_from_config  # noqa: E402
from kvmm.errors import BadInputError  # noqa: E402


def test_cohere_captured_logits_match_the_model_with_the_detected_layout():
    torch.manual_seed(0)
    config = transformers.CohereConfig(vocab_size=50, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = transformers.CohereForCausalLM(config).eval()
    rope = rope_from_config(model.config)
    assert rope.layout == "interleaved"
    ids = np.arange(1, 25)
    (q, k), = capture_qk(model, ids)
    pos = np.arange(ids.size)
    mine = np.einsum("thd,shd->hts", rope.apply(q, pos), np.repeat(rope.apply(k, pos), 2, axis=1)) / np.sqrt(16)
    np.testing.assert_allclose(mine, attention_logits(model, ids)[0], atol=1e-4)
    # the half layout (what rope_from_config used to return) gets those logits wrong
    half = rope.with_layout("half")
    wrong = np.einsum("thd,shd->hts", half.apply(q, pos), np.repeat(half.apply(k, pos), 2, axis=1)) / np.sqrt(16)
    assert np.abs(wrong - mine).max() > 1e-2


def test_gptj_layout_and_partial_rotary_dim():
    full = transformers.GPTJConfig(n_embd=64, n_head=4, rotary_dim=16)
    assert rope_from_config(full).layout == "interleaved"
    assert rope_from_config(full).head_dim == 16
    with pytest.raises(BadInputError, match="rotary_dim=8 of head_dim=16"):
        rope_from_config(transformers.GPTJConfig(n_embd=64, n_head=4, rotary_dim=8))
    with pytest.raises(BadInputError, match="rotary_dim=32 of head_dim=64"):
        rope_from_config({"model_type": "gpt_neox", "hidden_size": 128, "num_attention_heads": 2, "rotary_dim": 32})
    llama = rope_from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})
    assert llama.layout == "half"
