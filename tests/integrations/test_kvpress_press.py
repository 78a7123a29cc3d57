"""kvmm token scorers as a kvpress press, against the real kvpress 0.5.5 (kvpress venv only).

The kept token set of every (layer, KV head) is read from the compressed cache and compared
with kvpress's own press run on the same model and input.
"""

from __future__ import annotations

import importlib.metadata
import warnings

import numpy as np
import pytest
import torch
from kvpress import KnormPress, SnapKVPress, StreamingLLMPress
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from kvmm.compress import (
    KeyNormScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    TriAttentionPolicy,
    TriAttentionScorer,
    calibrate,
)
from kvmm.compress.hf import capture_qk, rope_from_config
from kvmm.errors import BadInputError
from kvmm.integrations.kvpress import KvmmPress

TOKENS = 48
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request):
    torch.manual_seed(0)
    if request.param == "llama":
        return LlamaForCausalLM(LlamaConfig(**SIZES)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**SIZES)).eval()


@pytest.fixture(scope="module")
def input_ids():
    return torch.randint(0, SIZES["vocab_size"], (1, TOKENS), generator=torch.Generator().manual_seed(1))


def prefill(model, input_ids, press):
    cache = DynamicCache()
    with torch.no_grad(), press(model):
        model(input_ids, past_key_values=cache)
    return cache


def kept_sets(model, input_ids, press) -> list[list[list[int]]]:
    """Per layer and KV head, the positions (sorted) whose keys survived in the cache."""
    full = prefill(model, input_ids, KvmmPress(KeyNormScorer(), 0.0))
    cache = prefill(model, input_ids, press)
    out = []
    for layer in range(SIZES["num_hidden_layers"]):
        k, f = cache.layers[layer].keys[0], full.layers[layer].keys[0]  # (kv_heads, n, d)
        out.append([sorted(int((f[h] - k[h, i]).abs().sum(-1).argmin()) for i in range(k.shape[1]))
                    for h in range(k.shape[0])])
    return out


def test_kvpress_version_is_the_pinned_one():
    assert importlib.metadata.version("kvpress") == "0.5.5"


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.9])
def test_key_norm_keeps_the_same_tokens_as_knorm_press(model, input_ids, ratio):
    ours = kept_sets(model, input_ids, KvmmPress(KeyNormScorer(), compression_ratio=ratio))
    assert ours == kept_sets(model, input_ids, KnormPress(compression_ratio=ratio))
    assert len(ours[0][0]) == max(1, int(TOKENS * (1 - ratio)))
    assert ours[0][0] != ours[0][1]  # heads choose for themselves


@pytest.mark.parametrize("ratio", [0.5, 0.75])
def test_streaming_llm_keeps_the_same_tokens(model, input_ids, ratio):
    ours = kept_sets(model, input_ids, KvmmPress(StreamingLLMScorer(sink_tokens=4), ratio))
    assert ours == kept_sets(model, input_ids, StreamingLLMPress(ratio, n_sink=4))
    n_kept = int(TOKENS * (1 - ratio))
    assert ours[1][1] == list(range(4)) + list(range(TOKENS - n_kept + 4, TOKENS))


@pytest.mark.parametrize("ratio", [0.3, 0.6])
def test_snapkv_keeps_the_same_tokens_without_pooling(model, input_ids, ratio):
    # kvpress averages the window's attention over queries and the query heads of each KV head;
    # kvmm sums it (the same order).  Pooling differs at the edges (kvpress zero-pads and divides
    # by the kernel; kvmm averages the tokens present and pools across the window boundary), so
    # the exact comparison uses kernel 1.
    ours = kept_sets(model, input_ids, KvmmPress(SnapKVScorer(window_size=8, kernel_size=1, pooling="avg"), ratio))
    assert ours == kept_sets(model, input_ids, SnapKVPress(ratio, window_size=8, kernel_size=1))
    assert all(set(range(TOKENS - 8, TOKENS)) <= set(head) for layer in ours for head in layer)


def test_snapkv_pooling_differs_only_through_the_edges(model, input_ids):
    ours = kept_sets(model, input_ids, KvmmPress(SnapKVScorer(window_size=8, kernel_size=5, pooling="avg"), 0.5))
    theirs = kept_sets(model, input_ids, SnapKVPress(0.5, window_size=8, kernel_size=5))
    overlap = [len(set(a) & set(b)) / len(a) for la, lb in zip(ours, theirs) for a, b in zip(la, lb)]
    assert min(overlap) >= 0.75


def test_one_score_for_all_heads(model, input_ids):
    sets = kept_sets(model, input_ids, KvmmPress(KeyNormScorer(), 0.5, per_head=False))
    assert all(layer[0] == layer[1] for layer in sets)


def triattention_press(model, input_ids, ratio):
    qk = capture_qk(model, input_ids)
    calibration = calibrate([q for q, _ in qk], [k for _, k in qk], rope=rope_from_config(model.config))
    return KvmmPress.triattention(calibration, compression_ratio=ratio)


def test_triattention_generates_and_keeps_each_heads_top_scores(model, input_ids):
    press = triattention_press(model, input_ids, 0.5)
    sets = kept_sets(model, input_ids, press)
    full = prefill(model, input_ids, KvmmPress(KeyNormScorer(), 0.0))
    for layer, scorer in enumerate(press.scorer):
        assert isinstance(scorer, TriAttentionScorer) and scorer.layer == layer
        keys = full.layers[layer].keys[0].permute(1, 0, 2).double().numpy()  # (n, kv_heads, d), post-RoPE
        scores = scorer.kv_head_scores(keys, now=TOKENS, post_rope=True)
        for head, kept in enumerate(sets[layer]):
            assert kept == sorted(np.argsort(-scores[head], kind="stable")[:TOKENS // 2].tolist())
    # A TriAttentionPolicy per layer, or one over all layers, scores with the layer's scorer, per
    # KV head: the same selection, with a warning that its own settings are not applied.
    with pytest.warns(UserWarning, match="kvpress cannot apply its .*protect_prompt=True"):
        per_layer = KvmmPress([TriAttentionPolicy(s) for s in press.scorer], 0.5)
    assert kept_sets(model, input_ids, per_layer) == sets
    whole = TriAttentionPolicy.from_calibration(press.scorer[0].calibration)
    with pytest.warns(UserWarning, match="aggregation='head'"):
        whole_press = KvmmPress(whole, 0.5)
    assert kept_sets(model, input_ids, whole_press) == sets
    with press(model):
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=6, min_new_tokens=6,
                             do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    assert out.sequences.shape == (1, TOKENS + 6)
    # The prefill cache was halved; decoding appended 5 tokens (the 6th is not cached yet).
    assert out.past_key_values.layers[0].keys.shape[2] == TOKENS // 2 + 5


def test_bad_configuration_is_a_clear_error(model, input_ids):
    with pytest.raises(BadInputError, match="compression_ratio"):
        KvmmPress(KeyNormScorer(), 1.0)
    with pytest.raises(BadInputError, match=r"compression_ratio must be a number in \[0, 1\], got True"):
        KvmmPress(KeyNormScorer(), True)
    with pytest.raises(BadInputError, match="TokenScorer"):
        KvmmPress(object(), 0.5)
    with pytest.raises(BadInputError, match="per-layer scorers"):
        with KvmmPress([KeyNormScorer()], 0.5)(model):
            pass


def test_a_calibration_for_another_layer_count_is_refused_however_the_scorers_are_given(model, input_ids):
    from kvmm.errors import CalibrationError

    qk = capture_qk(model, input_ids)[:1]  # a one-layer calibration for a two-layer model
    one_layer = calibrate([q for q, _ in qk], [k for _, k in qk], rope=rope_from_config(model.config))
    scorer = TriAttentionScorer(one_layer, layer=0)
    for given in ([scorer, scorer], {0: scorer, 1: scorer}, TriAttentionPolicy(scorer), [TriAttentionPolicy(scorer)] * 2):
        with pytest.raises(CalibrationError, match="num_layers=1 \\(expected 2\\)"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a policy's dropped settings (tested above)
            with KvmmPress(given, 0.5)(model):
                pass
