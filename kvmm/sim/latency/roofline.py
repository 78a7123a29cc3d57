"""A physical step-time model: the larger of compute time and memory time, plus tensor-parallel
communication (docs/latency.md, "The roofline").

Per step (features of :data:`~kvmm.sim.latency.step.FEATURES`, everything per GPU of ``tp``):

* compute = (GEMM FLOPs of the new tokens + attention FLOPs of their causal query-key pairs) at
  ``peak x mfu_prefill`` for prefill tokens and ``peak x mfu_decode`` for decode tokens, plus the
  logits of one row per sequence (vLLM V1 computes the last position of every scheduled
  request, ``logits_indices = query_start_loc[1:] - 1``) at the decode MFU;
* memory = (weights read once per step, the routed experts only as the expected distinct ones the
  step's ``P + D`` tokens pick, + the KV every chunk and decode reads + the KV every new token
  writes) / (``hbm_bytes_per_s x bw_efficiency``);
* step = max(compute, memory) + 2 all-reduces per layer of the new tokens' activations (ring:
  ``2 (tp - 1) / tp`` of them per GPU, plus a fixed latency each; nothing at tp = 1) +
  ``step_overhead_s``.

Every term is linear in the features except the experts' saturation, so the model is exported
as a kind-1 coefficient array and the simulator evaluates it with the kernels of
:mod:`kvmm.sim.latency._kernels`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm._validate import as_fraction, as_positive_float
from kvmm.errors import BadInputError
from kvmm.sim.latency.accelerators import Hardware
from kvmm.sim.latency.accelerators import hardware as _resolve_hardware
from kvmm.sim.latency.arch import ModelArch, dtype_bytes
from kvmm.sim.latency.step import COEF_LEN, FEATURES, linear_step_parts, linear_step_seconds, step_features

__all__ = ["Roofline", "ACTIVATION_BYTES"]

#: Bytes of one activation element in the all-reduces (bf16/fp16 activations, also with fp8 weights).
ACTIVATION_BYTES = 2

_STEP, _P, _A, _CP, _D, _CD, _S = range(len(FEATURES))
_C, _M, _ADD = 1, 8, 15  # first index of the compute, memory and additive blocks


class Roofline:
    """Step time of ``arch`` on ``tp`` GPUs of ``hardware`` (see the module docstring).

    ``mfu_prefill``, ``mfu_decode``, ``bw_efficiency``, ``allreduce_latency_s``: ``None`` takes the
    hardware's default.  ``weight_dtype="fp8"`` halves weight bytes and, where the hardware has FP8
    tensor cores, doubles the peak (as BLIS does); ``kv_dtype="fp8"`` halves KV bytes.  Building
    one costs O(num_layers); ``step_seconds`` O(chunks + decodes).
    """

    __slots__ = ("arch", "hardware", "tp", "weight_dtype", "kv_dtype", "mfu_prefill", "mfu_decode", "bw_efficiency",
                 "step_overhead_s", "allreduce_latency_s", "_coef")

    def __init__(self, arch: ModelArch | str, hardware: Hardware | str, tp: int = 1, *, weight_dtype: str = "bf16",
                 kv_dtype: str = "bf16", mfu_prefill: float | None = None, mfu_decode: float | None = None,
                 bw_efficiency: float | None = None, step_overhead_s: float = 0.0,
                 allreduce_latency_s: float | None = None) -> None:
        self.arch = arch if isinstance(arch, ModelArch) else ModelArch.named(arch)
        self.hardware = _resolve_hardware(hardware)
        self.tp = self.arch.check_tp(tp)
        dtype_bytes(weight_dtype, "weight_dtype")
        dtype_bytes(kv_dtype, "kv_dtype")
        self.weight_dtype, self.kv_dtype = weight_dtype.lower(), kv_dtype.lower()
        hw = self.hardware
        self.mfu_prefill = as_fraction(hw.mfu_prefill if mfu_prefill is None else mfu_prefill, "mfu_prefill")
        self.mfu_decode = as_fraction(hw.mfu_decode if mfu_decode is None else mfu_decode, "mfu_decode")
        self.bw_efficiency = as_fraction(hw.bw_efficiency if bw_efficiency is None else bw_efficiency, "bw_efficiency")
        self.step_overhead_s = as_positive_float(step_overhead_s, "step_overhead_s", allow_zero=True)
        self.allreduce_latency_s = as_positive_float(hw.allreduce_latency_s if allreduce_latency_s is None
                                                     else allreduce_latency_s, "allreduce_latency_s", allow_zero=True)
        self._coef = self._build_coefficients()
        self._coef.setflags(write=False)

    @property
    def peak_flops(self) -> float:
        """Dense FLOP/s the GEMMs run at: the FP8 rate for fp8 weights where the hardware has one."""
        hw = self.hardware
        return hw.fp8_flops if self.weight_dtype == "fp8" and hw.fp8_flops else hw.bf16_flops

    def step_seconds(self, prefill_new: Any, prefill_context: Any, decode_context: Any) -> float:
        return linear_step_seconds(self._coef, step_features(prefill_new, prefill_context, decode_context))

    def step_breakdown(self, prefill_new: Any, prefill_context: Any, decode_context: Any) -> dict[str, float]:
        """``{"compute_s", "memory_s", "additive_s", "seconds"}`` of one step: which side of the
        roofline it is on, and what the all-reduces and the fixed overhead add."""
        x = step_features(prefill_new, prefill_context, decode_context)
        if not x[_S]:
            return {"compute_s": 0.0, "memory_s": 0.0, "additive_s": 0.0, "seconds": 0.0}
        compute, memory, additive = linear_step_parts(self._coef, x)
        return {"compute_s": compute, "memory_s": memory, "additive_s": additive,
                "seconds": max(compute, memory) + additive}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Roofline) and all(getattr(self, k) == getattr(other, k)
                                                   for k in self.__slots__ if not k.startswith("_"))

    __hash__ = None

    def coefficients(self) -> np.ndarray:
        """Kind-1 coefficient array (layout in :mod:`kvmm.sim.latency._kernels`); a copy."""
        return self._coef.copy()

    def __repr__(self) -> str:
        return (f"Roofline({self.arch.name} on {self.tp} x {self.hardware.name}, {self.weight_dtype} weights, "
                f"{self.kv_dtype} KV, MFU {self.mfu_prefill:g}/{self.mfu_decode:g}, bw efficiency {self.bw_efficiency:g})")

    def _build_coefficients(self) -> np.ndarray:
        arch, hw, tp = self.arch, self.hardware, self.tp
        prefill_flops = self.peak_flops * self.mfu_prefill
        decode_flops = self.peak_flops * self.mfu_decode
        bandwidth = hw.hbm_bytes_per_s * self.bw_efficiency
        weight_bytes = dtype_bytes(self.weight_dtype)
        kv_bytes = arch.kv_bytes_per_token(self.kv_dtype, tp=tp)  # per GPU: sharded or replicated
        gemm = arch.gemm_flops_per_token() / tp
        pair_prefill = arch.attention_flops_per_pair() / tp
        pair_decode = arch.attention_flops_per_pair(absorbed=True) / tp
        coef = np.zeros(COEF_LEN, dtype=np.float64)
        coef[0] = 1.0
        # compute seconds per unit of each feature
        coef[_C + _P] = gemm / prefill_flops
        coef[_C + _A] = pair_prefill / prefill_flops
        coef[_C + _D] = (gemm + pair_decode) / decode_flops  # a decode also attends to its own new token
        coef[_C + _CD] = pair_decode / decode_flops
        coef[_C + _S] = arch.lm_head_flops_per_row() / tp / decode_flops
        # memory seconds per unit of each feature
        coef[_M + _STEP] = arch.streamed_params() * weight_bytes / tp / bandwidth
        coef[_M + _P] = coef[_M + _D] = kv_bytes / bandwidth  # KV written by every new token
        coef[_M + _CP] = coef[_M + _CD] = kv_bytes / bandwidth  # KV read from the cache
        if arch.is_moe:
            coef[22] = arch.routed_expert_params() * weight_bytes / tp / bandwidth
            coef[23] = arch.n_routed_experts
            coef[24] = arch.experts_per_token
        # additive seconds: fixed overhead and the tensor-parallel all-reduces
        coef[_ADD + _STEP] = self.step_overhead_s
        if tp > 1:
            collectives = 2 * arch.num_layers
            coef[_ADD + _STEP] += collectives * self.allreduce_latency_s
            ring_bytes = collectives * arch.hidden_size * ACTIVATION_BYTES * 2.0 * (tp - 1) / tp
            coef[_ADD + _P] = coef[_ADD + _D] = ring_bytes / hw.allreduce_bytes_per_s(tp)
        if not np.all(np.isfinite(coef)):
            raise BadInputError(f"Roofline coefficients are not finite for {arch.name} on {hw.name}; "
                                "expected finite hardware figures")
        return coef
