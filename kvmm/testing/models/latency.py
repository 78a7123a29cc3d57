"""Plain-Python reference of the roofline step time, written from docs/latency.md ("The roofline")
rather than from kvmm.sim.latency.roofline: it counts a step's FLOPs and bytes chunk by chunk and
sequence by sequence from the architecture's fields, then applies the page's formula.  Also the
kernels' references (step_split, decode_stretch) written from their docstrings' definitions.
"""

from __future__ import annotations

import math


def weight_matrices_per_token(arch) -> int:
    """Weights one token multiplies in the transformer layers (attention projections, dense
    MLPs, used experts, routers), from the architecture's fields (docs: G / 2)."""
    h, heads, layers = arch.hidden_size, arch.num_attention_heads, arch.num_layers
    if arch.kv_lora_rank:
        q_out = heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
        q = (h * arch.q_lora_rank + arch.q_lora_rank * q_out) if arch.q_lora_rank else h * q_out
        kv = (h * (arch.kv_lora_rank + arch.qk_rope_head_dim)
              + arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim))
        attention = q + kv + heads * arch.v_head_dim * h
    else:
        attention = h * heads * arch.head_dim * 2 + h * arch.num_kv_heads * arch.head_dim * 2
    total = 0
    for layer in range(layers):
        total += attention
        if layer in arch.moe_layer_indices:
            total += arch.experts_per_token * 3 * h * arch.moe_intermediate_size
            total += arch.n_shared_experts * 3 * h * arch.shared_expert_intermediate_size
            total += arch.n_routed_experts * h
        else:
            total += 3 * h * arch.intermediate_size
    return total


def pair_flops(arch, *, decode: bool) -> int:
    """FLOPs of one query-key pair, all layers (QK^T and AV); MLA decode in the latent space."""
    if not arch.kv_lora_rank:
        return arch.num_layers * 2 * arch.num_attention_heads * (arch.head_dim + arch.head_dim)
    if decode:
        qk, v = arch.kv_lora_rank + arch.qk_rope_head_dim, arch.kv_lora_rank
    else:
        qk, v = arch.qk_nope_head_dim + arch.qk_rope_head_dim, arch.v_head_dim
    return arch.num_layers * 2 * arch.num_attention_heads * (qk + v)


def kv_bytes_per_gpu(arch, kv_bytes: int, tp: int) -> int:
    if arch.kv_lora_rank:
        return arch.num_layers * (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_bytes
    return arch.num_layers * 2 * max(1, arch.num_kv_heads // tp) * arch.head_dim * kv_bytes


def streamed_weight_count(arch) -> int:
    """Weights read every step: total minus the embedding table (a gather) and all routed experts;
    with tied embeddings the table is still read once as the lm_head."""
    total = arch.total_params()
    table = arch.vocab_size * arch.hidden_size
    routed = len(arch.moe_layer_indices) * arch.n_routed_experts * 3 * arch.hidden_size * arch.moe_intermediate_size
    return total - (0 if arch.tie_word_embeddings else table) - routed


def step_seconds(arch, hw, tp, prefill_new, prefill_context, decode_context, *, weight_bytes=2, kv_bytes=2,
                 mfu_prefill=None, mfu_decode=None, bw_efficiency=None, step_overhead_s=0.0,
                 allreduce_latency_s=None) -> float:
    """docs/latency.md's roofline for one step, summed request by request."""
    if not prefill_new and not decode_context:
        return 0.0
    mfu_p = hw.mfu_prefill if mfu_prefill is None else mfu_prefill
    mfu_d = hw.mfu_decode if mfu_decode is None else mfu_decode
    eff = hw.bw_efficiency if bw_efficiency is None else bw_efficiency
    t_ar = hw.allreduce_latency_s if allreduce_latency_s is None else allreduce_latency_s
    peak = hw.fp8_flops if weight_bytes == 1 and hw.fp8_flops else hw.bf16_flops
    gemm = 2 * weight_matrices_per_token(arch)
    kv = kv_bytes_per_gpu(arch, kv_bytes, tp)
    prefill_flops = decode_flops = 0.0
    kv_traffic = 0
    for new, ctx in zip(prefill_new, prefill_context):
        pairs = sum(ctx + i + 1 for i in range(new))  # token i of the chunk sees ctx + i + 1 keys
        prefill_flops += new * gemm + pairs * pair_flops(arch, decode=False)
        kv_traffic += (ctx + new) * kv
    for ctx in decode_context:
        decode_flops += gemm + (ctx + 1) * pair_flops(arch, decode=True)
        kv_traffic += (ctx + 1) * kv
    sequences = len(prefill_new) + len(decode_context)
    decode_flops += sequences * 2 * arch.hidden_size * arch.vocab_size  # one logits row per sequence
    compute = (prefill_flops / (peak * mfu_p) + decode_flops / (peak * mfu_d)) / tp
    tokens = sum(prefill_new) + len(decode_context)
    weights = streamed_weight_count(arch) * weight_bytes
    if arch.n_routed_experts:
        n, k = arch.n_routed_experts, arch.experts_per_token
        expected_experts = n * (1 - (1 - k / n) ** tokens)
        expert_weights = 3 * arch.hidden_size * arch.moe_intermediate_size * weight_bytes
        weights += expected_experts * len(arch.moe_layer_indices) * expert_weights
    memory = (weights / tp + kv_traffic) / (hw.hbm_bytes_per_s * eff)
    comm = 0.0
    if tp > 1:
        link = hw.interconnect_bytes_per_s
        if hw.interconnect_per_peer_bytes_per_s is not None:
            link = min(link, (tp - 1) * hw.interconnect_per_peer_bytes_per_s)
        per_allreduce = tokens * arch.hidden_size * 2 * 2 * (tp - 1) / tp / link
        comm = 2 * arch.num_layers * (t_ar + per_allreduce)
    return max(compute, memory) + comm + step_overhead_s


def linear_total(coef, x) -> float:
    """A kind-1 coefficient array on features x = (step, P, A, Cp, D, Cd, S), term by term."""
    if x[6] == 0:
        return 0.0
    compute = sum(coef[1 + i] * x[i] for i in range(7))
    memory = sum(coef[8 + i] * x[i] for i in range(7))
    additive = sum(coef[15 + i] * x[i] for i in range(7))
    if coef[22] > 0 and coef[23] > 0:
        memory += coef[22] * coef[23] * (1 - (1 - coef[24] / coef[23]) ** (x[1] + x[4]))
    return max(compute, memory) + additive


def step_split(coef, P, A, Cp, D, Cd, S) -> tuple[float, float]:
    if coef[0] == 0:
        return P / coef[1], ((1.0 + coef[3] * (D - 1)) / coef[2] if D > 0 else 0.0)
    total = linear_total(coef, (1.0 if S else 0.0, P, A, Cp, D, Cd, S))
    tp = linear_total(coef, (1.0 if S - D else 0.0, P, A, Cp, 0.0, 0.0, S - D))
    td = linear_total(coef, (1.0 if D else 0.0, 0.0, 0.0, 0.0, D, Cd, D))
    if td == 0:
        return total, 0.0
    if tp == 0:
        return 0.0, total
    return total * tp / (tp + td), total - total * tp / (tp + td)


def decode_stretch(coef, b, Cd, k_max, until_s) -> tuple[int, float]:
    """Step by step: decode-only steps of b sequences, contexts Cd, Cd + b, ...; stop at the first
    k whose cumulative time reaches until_s (with 1e-12 of the last step's slack), at most k_max."""
    if coef[0] == 0:
        step_s = (1.0 + coef[3] * (b - 1)) / coef[2]
        k = k_max if until_s == math.inf else max(1, min(k_max, math.ceil(until_s / step_s - 1e-12)))
        return k, k * step_s
    elapsed = 0.0
    for j in range(k_max):
        step = sum(step_split(coef, 0.0, 0.0, 0.0, float(b), Cd + j * b, float(b)))
        elapsed += step
        if elapsed + 1e-12 * step >= until_s:
            return j + 1, elapsed
    return k_max, elapsed
