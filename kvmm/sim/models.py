"""Model specs for the serving simulator: how fast a model prefills and decodes, KV bytes per token.

The figures are *assumptions* for one NVIDIA H200 in bf16 (order-of-magnitude throughput of
vLLM-class engines), not measurements; KV bytes per token follow from each model's published
architecture: ``layers x kv_heads x head_dim x 2 (K and V) x 2 bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvmm._validate import as_count, as_positive_float
from kvmm.errors import BadInputError

__all__ = ["ModelSpec", "MODELS", "model", "H200_USD_PER_GPU_HOUR"]

#: One NVIDIA H200, on-demand, USD per GPU-hour: Nebius AI Cloud's list price for a VM with one
#: H200, 16 vCPUs and 200 GiB RAM (docs.nebius.com, "Billing changes in October 2025": $3.50 per
#: hour, GPU, vCPU and RAM billed together).  Other public on-demand quotes in 2025-2026 range
#: from about $2 to $5.4 per H200-hour; override it per model or in the cost account's Prices.
H200_USD_PER_GPU_HOUR = 3.50


@dataclass(frozen=True)
class ModelSpec:
    """Throughput model of one serving instance.

    * a step's prefill takes ``prefill_tokens / prefill_tokens_per_s``;
    * a decode step over ``b`` running sequences takes
      ``(1 + decode_batch_cost * (b - 1)) / decode_tokens_per_s`` (each sequence gains a token);
    * at most ``max_batch`` sequences run, and one step prefills at most ``max_prefill_tokens``
      (a single longer prompt still runs alone).

    ``gpu_usd_per_hour`` prices the GPU one instance runs on (the cost account's GPU term; it does
    not affect the simulation).
    """

    name: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    decode_batch_cost: float
    kv_bytes_per_token: int
    max_batch: int
    max_prefill_tokens: int
    source: str = ""
    layers: int = 32  # transformer layers (layer-wise KV transfer in PD disaggregation)
    gpu_usd_per_hour: float = H200_USD_PER_GPU_HOUR

    def __post_init__(self) -> None:
        as_positive_float(self.prefill_tokens_per_s, "prefill_tokens_per_s")
        as_positive_float(self.decode_tokens_per_s, "decode_tokens_per_s")
        as_positive_float(self.decode_batch_cost, "decode_batch_cost", allow_zero=True)
        as_count(self.kv_bytes_per_token, "kv_bytes_per_token", minimum=1)
        as_count(self.max_batch, "max_batch", minimum=1)
        as_count(self.max_prefill_tokens, "max_prefill_tokens", minimum=1)
        as_count(self.layers, "layers", minimum=1)
        object.__setattr__(self, "gpu_usd_per_hour",
                           as_positive_float(self.gpu_usd_per_hour, "gpu_usd_per_hour", allow_zero=True))

    def decode_step_seconds(self, batch: int) -> float:
        return (1.0 + self.decode_batch_cost * (batch - 1)) / self.decode_tokens_per_s

    def with_(self, **changes) -> ModelSpec:
        return replace(self, **changes)


MODELS: dict[str, ModelSpec] = {
    "llama3-8b": ModelSpec(
        "llama3-8b", prefill_tokens_per_s=20_000.0, decode_tokens_per_s=110.0, decode_batch_cost=0.02,
        kv_bytes_per_token=32 * 8 * 128 * 2 * 2, max_batch=128, max_prefill_tokens=16_384,
        source="Llama-3.1-8B: 32 layers, 8 KV heads x 128 (128 KiB/token); H200 rates assumed"),
    "qwen2.5-32b": ModelSpec(
        "qwen2.5-32b", prefill_tokens_per_s=6_000.0, decode_tokens_per_s=38.0, decode_batch_cost=0.02,
        kv_bytes_per_token=64 * 8 * 128 * 2 * 2, max_batch=64, max_prefill_tokens=16_384,
        source="Qwen2.5-32B: 64 layers, 8 KV heads x 128 (256 KiB/token); H200 rates assumed", layers=64),
}


def model(name_or_spec) -> ModelSpec:
    """A model spec by name (see :data:`MODELS`), or the spec itself."""
    if isinstance(name_or_spec, ModelSpec):
        return name_or_spec
    if name_or_spec not in MODELS:
        raise BadInputError(f"unknown model {name_or_spec!r}; expected one of {sorted(MODELS)} or a ModelSpec")
    return MODELS[name_or_spec]
