"""ModelArch (parameter counts against published figures, KV bytes by hand, config parsing),
the Hardware presets, and the KV pool that fits beside the weights."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from kvmm.errors import BadInputError, KvmmError
from kvmm.sim.latency import HARDWARE, Hardware, ModelArch, hardware, kv_pool_bytes
from kvmm.sim.latency.accelerators import ACTIVATION_RESERVE_GIB, NON_TORCH_GIB
from kvmm.testing.models.latency import weight_matrices_per_token
from tests.paths import ROOT

GiB = 1 << 30
MODELS_JSON = ROOT / "kvmm" / "sim" / "latency" / "models.json"

# Published parameter counts, each with where it is published (the same citations are in
# models.json's "published" field).
PUBLISHED_TOTAL = {
    # Hugging Face "Model size" of Llama-3.1-8B-Instruct (e.g. huggingface.co/nreHieW/Llama-3.1-8B-Instruct)
    "llama-3.1-8b": 8.03e9,
    # Hugging Face "Model size" of the 70B Llama architecture (huggingface.co/ProbablyFaiz/Meta-Llama-3.3-70B-Instruct-FP8)
    "llama-3.1-70b": 70.6e9,
    # Qwen2.5-7B-Instruct model card: "Number of Parameters: 7.61B"
    "qwen2.5-7b": 7.61e9,
    # Qwen2.5-32B(-Instruct) model card: "Number of Parameters: 32.5B"
    "qwen2.5-32b": 32.5e9,
    # Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated"
    "qwen3-30b-a3b": 30.5e9,
    # DeepSeek-V3 technical report (arXiv 2412.19437) and README_WEIGHTS.md: 671B (main model, MTP module apart)
    "deepseek-v3": 671e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_total_params_within_one_percent_of_the_published_figure(name):
    arch = ModelArch.named(name)
    assert abs(arch.total_params() / PUBLISHED_TOTAL[name] - 1) < 0.01


def test_active_params_match_the_publishers_conventions():
    # DeepSeek's README_WEIGHTS.md: "Activation parameters: 36.6B (including 0.9B for the output Head)",
    # i.e. without the embedding table
    ds = ModelArch.named("deepseek-v3")
    assert abs(ds.active_params(embedding=False) / 36.6e9 - 1) < 0.01
    # Qwen3-30B-A3B's card gives "3.3B activated", truncated to 0.1B as its other figures are
    # (30.53B total printed "30.5B", 29.91B non-embedding printed "29.9B"); it counts the embedding
    qwen = ModelArch.named("qwen3-30b-a3b")
    assert 3.3e9 <= qwen.active_params() < 3.4e9
    non_embedding = qwen.total_params() - 2 * qwen.vocab_size * qwen.hidden_size
    assert 29.9e9 <= non_embedding < 30.0e9
    # a dense model activates everything
    llama = ModelArch.named("llama-3.1-8b")
    assert llama.active_params() == llama.total_params()
    assert llama.active_params(embedding=False) == llama.total_params() - llama.vocab_size * llama.hidden_size


def test_kv_bytes_per_token_equal_the_hand_computed_figures():
    # GQA: layers x 2 (K and V) x kv_heads x head_dim x bytes
    assert ModelArch.named("llama-3.1-8b").kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2
    assert ModelArch.named("llama-3.1-70b").kv_bytes_per_token("bf16") == 80 * 2 * 8 * 128 * 2
    assert ModelArch.named("qwen2.5-7b").kv_bytes_per_token() == 28 * 2 * 4 * (3584 // 28) * 2
    assert ModelArch.named("qwen2.5-32b").kv_bytes_per_token() == 64 * 2 * 8 * (5120 // 40) * 2
    assert ModelArch.named("qwen3-30b-a3b").kv_bytes_per_token() == 48 * 2 * 4 * 128 * 2
    # MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes
    assert ModelArch.named("deepseek-v3").kv_bytes_per_token() == 61 * (512 + 64) * 2
    # fp8 halves, tensor parallelism shards KV heads or replicates them
    assert ModelArch.named("llama-3.1-8b").kv_bytes_per_token("fp8") == 32 * 2 * 8 * 128
    assert ModelArch.named("llama-3.1-8b").kv_bytes_per_token(tp=4) == 32 * 2 * 2 * 128 * 2
    assert ModelArch.named("qwen3-30b-a3b").kv_bytes_per_token(tp=8) == 48 * 2 * 1 * 128 * 2  # 4 heads on 8 GPUs
    assert ModelArch.named("deepseek-v3").kv_bytes_per_token(tp=8) == 61 * 576 * 2


def test_the_old_simulator_names_are_aliases_and_match_their_model_specs():
    from kvmm.sim.models import MODELS

    assert ModelArch.named("llama3-8b") == ModelArch.named("llama-3.1-8b")
    assert ModelArch.named("Qwen2.5-32B").name == "qwen2.5-32b"
    for old in MODELS.values():
        arch = ModelArch.named(old.name)
        assert arch.kv_bytes_per_token() == old.kv_bytes_per_token and arch.num_layers == old.layers
    assert set(ModelArch.names()) == {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-32b", "qwen3-30b-a3b",
                                      "deepseek-v3"}
    with pytest.raises(BadInputError, match="unknown model"):
        ModelArch.named("gpt-5")


def test_from_hf_config_round_trips_the_shipped_dicts_paths_and_folders(tmp_path):
    entries = json.loads(MODELS_JSON.read_text())
    for name, entry in entries.items():
        assert entry["source"] and entry["published"]
        from_dict = ModelArch.from_hf_config(entry["hf_config"], name=name)
        assert from_dict == ModelArch.named(name)
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(entry["hf_config"]))
        assert ModelArch.from_hf_config(folder, name=name) == from_dict
        assert ModelArch.from_hf_config(str(folder / "config.json"), name=name) == from_dict


def test_moe_layer_spellings():
    base = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100}
    qwen = ModelArch.from_hf_config({**base, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 16, "intermediate_size": 32,
                                     "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    assert qwen.moe_layer_indices == (1, 5)  # every 2nd layer, layer 3 forced dense
    mixtral = ModelArch.from_hf_config({**base, "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32})
    assert mixtral.moe_layer_indices == tuple(range(6)) and mixtral.moe_intermediate_size == 32
    ds = ModelArch.from_hf_config({**base, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                   "intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 2,
                                   "moe_layer_freq": 1, "topk_method": "noaux_tc"})
    assert ds.moe_layer_indices == (2, 3, 4, 5) and ds.router_bias and ds.shared_expert_intermediate_size == 16
    qwen2_moe = ModelArch.from_hf_config({**base, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                          "shared_expert_intermediate_size": 48})
    assert qwen2_moe.n_shared_experts == 1 and qwen2_moe.shared_expert_intermediate_size == 48
    # every count written out for the DeepSeek-style toy: 6 layers of attention (4 heads x 16 dims) and norms,
    # 2 dense MLPs, 4 MoE layers of 8 routed + 1 shared expert and a router with its bias, embedding, lm_head
    attention = 2 * 64 * 64 + 2 * 64 * 64
    moe_layer = 9 * 3 * 64 * 16 + 8 * 64 + 8
    total = 2 * 100 * 64 + 6 * (attention + 2 * 64) + 2 * 3 * 64 * 32 + 4 * moe_layer + 64
    assert ds.total_params() == total
    assert ds.active_params() == total - 4 * 6 * 3 * 64 * 16  # 6 of the 8 routed experts idle per MoE layer


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_gemm_flops_count_every_weight_a_token_multiplies(name):
    arch = ModelArch.named(name)
    assert arch.gemm_flops_per_token() == 2 * weight_matrices_per_token(arch)
    assert arch.lm_head_flops_per_row() == 2 * arch.hidden_size * arch.vocab_size
    if arch.is_mla:  # latent-space decode costs more per pair than the expanded form
        assert arch.attention_flops_per_pair(absorbed=True) > arch.attention_flops_per_pair()
    else:
        assert arch.attention_flops_per_pair() == arch.num_layers * 4 * arch.num_attention_heads * arch.head_dim
    assert arch.weight_bytes("fp8") * 2 == arch.weight_bytes("bf16") == arch.weight_bytes("fp16")


@pytest.mark.parametrize("config, key", [
    ({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8}, "num_hidden_layers"),
    ({"num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8}, "hidden_size"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8}, "vocab_size"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}, "intermediate_size"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8,
      "num_experts_per_tok": 2}, "num_experts_per_tok"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8,
      "n_routed_experts": 4, "num_experts_per_tok": 2}, "moe_intermediate_size"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8,
      "kv_lora_rank": 16, "qk_rope_head_dim": 4, "v_head_dim": 8}, "qk_nope_head_dim"),
    ({"num_hidden_layers": 2, "hidden_size": 66, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8}, "head_dim"),
    ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8,
      "use_sliding_window": True}, "sliding"),
    ({"num_hidden_layers": -2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8},
     "num_hidden_layers"),
])
def test_bad_configs_raise_naming_the_key(config, key):
    with pytest.raises(BadInputError, match=key):
        ModelArch.from_hf_config(config)


def test_bad_config_sources_and_arch_fields_raise(tmp_path):
    with pytest.raises(BadInputError, match="no config file"):
        ModelArch.from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BadInputError, match="JSON"):
        ModelArch.from_hf_config(tmp_path)
    with pytest.raises(BadInputError, match="dict"):
        ModelArch.from_hf_config(42)
    llama = ModelArch.named("llama-3.1-8b")
    with pytest.raises(BadInputError, match="num_kv_heads"):
        replace(llama, num_kv_heads=7)
    with pytest.raises(BadInputError, match="experts_per_token"):
        replace(ModelArch.named("qwen3-30b-a3b"), experts_per_token=200)
    with pytest.raises(BadInputError, match="moe_layer_indices"):
        replace(llama, moe_layer_indices=(40,))
    with pytest.raises(KvmmError, match="num_layers"):
        replace(llama, num_layers=0)
    with pytest.raises(BadInputError, match="kv_dtype"):
        llama.kv_bytes_per_token("int3")
    with pytest.raises(BadInputError, match="tp=3"):
        llama.check_tp(3)
    with pytest.raises(BadInputError, match="KV heads"):
        replace(llama, num_attention_heads=48, num_kv_heads=6).check_tp(4)  # 6 KV heads on 4 GPUs


def test_hardware_presets_carry_sources_and_resolve_by_any_spelling():
    expected = {"H100", "H200", "B200", "A100-80GB", "MI300X", "L40S", "Ascend-910C", "Ascend-950DT"}
    assert set(HARDWARE) == expected
    for hw in HARDWARE.values():
        assert isinstance(hw, Hardware)
        published = {"bf16_flops", "fp8_flops", "hbm_bytes", "hbm_bytes_per_s", "interconnect_bytes_per_s",
                     "mfu_prefill", "mfu_decode", "bw_efficiency", "max_num_batched_tokens", "max_num_seqs", "usd_per_hour"}
        assert published <= set(hw.sources), hw.name
        for name in hw.assumed:
            assert "assumed" in hw.sources[name], (hw.name, name)
        assert hardware(hw.name.lower()) is hw and hardware(hw) is hw
    assert hardware("h100_sxm") is HARDWARE["H100"] and hardware(" a100 ") is HARDWARE["A100-80GB"]
    assert hardware("Ascend 950") is HARDWARE["Ascend-950DT"]
    # BLIS-calibrated figures (hardware_config.json) and the simulator's H200 price
    h100 = HARDWARE["H100"]
    assert (h100.bf16_flops, h100.hbm_bytes_per_s, h100.mfu_prefill, h100.mfu_decode) == (989.5e12, 3.35e12, 0.45, 0.30)
    from kvmm.sim.models import H200_USD_PER_GPU_HOUR
    assert HARDWARE["H200"].usd_per_hour == H200_USD_PER_GPU_HOUR
    assert HARDWARE["A100-80GB"].fp8_flops is None and HARDWARE["Ascend-910C"].fp8_flops is None
    # vLLM 0.33 OPENAI_API_SERVER defaults by device memory
    assert [(HARDWARE[n].max_num_batched_tokens, HARDWARE[n].max_num_seqs) for n in ("H100", "B200", "A100-80GB")] == \
        [(8192, 1024), (16384, 1024), (2048, 256)]
    with pytest.raises(BadInputError, match="unknown hardware"):
        hardware("TPU-v9")
    with pytest.raises(BadInputError, match="mfu_decode"):
        replace(h100, mfu_decode=1.5)
    with pytest.raises(BadInputError, match="unknown fields"):
        replace(h100, assumed=frozenset({"speed"}))


def test_point_to_point_fabrics_give_small_tp_groups_fewer_links():
    mi300x, h100 = HARDWARE["MI300X"], HARDWARE["H100"]
    assert mi300x.allreduce_bytes_per_s(2) == 64e9 and mi300x.allreduce_bytes_per_s(8) == 448e9
    assert h100.allreduce_bytes_per_s(2) == h100.allreduce_bytes_per_s(8) == 450e9


def test_kv_pool_of_llama_8b_on_one_h100_by_hand():
    # 0.9 x 80 GiB, less 8,030,261,248 bf16 weights (2 bytes each), less 5.5 GiB activations and
    # 0.15 GiB non-torch memory (llm-d capacity planner constants)
    by_hand = 0.9 * 80 * GiB - 8_030_261_248 * 2 - (5.5 + 0.15) * GiB
    pool = kv_pool_bytes("llama-3.1-8b", "H100")
    assert abs(pool - by_hand) <= 1
    blocks = pool // (16 * 131072)
    assert blocks == int(by_hand) // (16 * 131072) and blocks > 25_000  # ~420K tokens


def test_llama_70b_does_not_fit_one_h100_but_fits_four():
    with pytest.raises(BadInputError, match=r"does not fit 1 x H100.*131\.42 GiB"):
        kv_pool_bytes("llama-3.1-70b", "H100")
    # four GPUs: 4 x 0.9 x 80 GiB, less all the weights, less 4 x (5.5 + 0.6) GiB
    by_hand = 4 * 0.9 * 80 * GiB - 70_553_706_496 * 2 - 4 * (5.5 + 0.6) * GiB
    assert abs(kv_pool_bytes("llama-3.1-70b", "H100", 4) - by_hand) <= 4
    # fp8 weights free the difference, per the same formula
    by_hand_fp8 = 4 * 0.9 * 80 * GiB - 70_553_706_496 - 4 * (5.5 + 0.6) * GiB
    assert abs(kv_pool_bytes("llama-3.1-70b", "H100", 4, weight_dtype="fp8") - by_hand_fp8) <= 4


def test_replicated_kv_counts_tokens_per_gpu():
    # DeepSeek-V3 (MoE, MLA) in fp8 on 8 H200: every GPU holds the same latent, so the pool is one
    # GPU's free memory, counted at the whole-model bytes per token (the latent itself)
    arch = ModelArch.named("deepseek-v3")
    free_per_gpu = 0.9 * 141 * GiB - arch.total_params() / 8 - (ACTIVATION_RESERVE_GIB["moe"] + NON_TORCH_GIB["tpn"]) * GiB
    assert abs(kv_pool_bytes(arch, "H200", 8, weight_dtype="fp8") - free_per_gpu) <= 1
    # Qwen3-30B-A3B's 4 KV heads on 8 GPUs: each GPU stores one head (8 x 1 heads for 4 distinct)
    qwen = ModelArch.named("qwen3-30b-a3b")
    free = 0.9 * 80 * GiB - qwen.total_params() * 2 / 8 - (8.0 + 0.6) * GiB
    assert abs(kv_pool_bytes(qwen, "H100", 8) - free * 4) <= 4
    assert kv_pool_bytes("llama-3.1-8b", "H100", activation_reserve_bytes=0) > kv_pool_bytes("llama-3.1-8b", "H100")
    with pytest.raises(BadInputError, match="gpu_memory_utilization"):
        kv_pool_bytes("llama-3.1-8b", "H100", gpu_memory_utilization=1.2)


def test_importing_the_package_is_cheap():
    import subprocess

    code = ("import sys, kvmm.sim.latency as L; "
            "assert 'numba' not in sys.modules and 'kvmm.sim.latency.arch' not in sys.modules; "
            "L.Roofline; assert 'numba' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr
