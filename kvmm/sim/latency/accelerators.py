"""Accelerator presets with their published figures, and the KV pool that fits beside the weights.

Every number in :data:`HARDWARE` carries its source in ``Hardware.sources``; the fields that are
assumptions (no published figure) are listed in ``Hardware.assumed`` and say why in their source
line.  docs/latency.md ("Hardware") renders the same table.

Conventions: FLOP/s are dense (no 2:4 sparsity); memory capacity is the vendor's "GB" figure read
as GiB, as BLIS's ``hardware_config.json`` does (its H100 is ``"MemoryGiB": 80.0``); bandwidths are
decimal bytes per second; ``interconnect_bytes_per_s`` is one GPU's unidirectional all-to-all
scale-up bandwidth (what a ring all-reduce can use per direction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kvmm._validate import as_count, as_fraction, as_positive_float
from kvmm.errors import BadInputError
from kvmm.sim.latency.arch import ModelArch, dtype_bytes

__all__ = ["Hardware", "HARDWARE", "hardware", "kv_pool_bytes", "ACTIVATION_RESERVE_GIB", "NON_TORCH_GIB"]

GiB = 1 << 30

#: Activation and workspace memory a vLLM worker keeps besides weights and KV (GiB), from
#: llm-d-benchmark's capacity planner (github.com/llm-d/llm-d-benchmark,
#: config_explorer/src/config_explorer/capacity_planner.py: ACTIVATION_MEMORY_BASE_DENSE_GIB = 5.5,
#: ACTIVATION_MEMORY_BASE_MOE_GIB = 8.0, "empirically validated against vLLM on H100 GPUs"); BLIS
#: uses the same constants (sim/latency/kv_capacity.go).
ACTIVATION_RESERVE_GIB = {"dense": 5.5, "moe": 8.0}
#: CUDA context and NCCL buffers per GPU (GiB), same sources: VLLM_NON_TORCH_MEMORY_TP1_GIB = 0.15,
#: VLLM_NON_TORCH_MEMORY_TPN_GIB = 0.6.
NON_TORCH_GIB = {"tp1": 0.15, "tpn": 0.6}

_H100_MFU_SOURCE = ("BLIS hardware_config.json (github.com/inference-sim/inference-sim@f90a1e3a): "
                    "'MFU values calibrated per Discussion #589'")
_BW_EFF_BLIS = ("1.0: BLIS's roofline divides bytes by peak bandwidth ('No bandwidth haircut', sim/latency/roofline.go) "
                "and its MFUs were calibrated that way")
_ALLREDUCE_ASSUMED = ("assumed 10 us per all-reduce: no published figure for vLLM's small-message all-reduce; the one "
                      "measurement read (stas00/ml-engineering network/README.md, 8x H200, torch.distributed all_reduce of "
                      "32 KiB at 0.82 GB/s algbw = 40 us) includes framework overhead vLLM's CUDA graphs avoid")


@dataclass(frozen=True)
class Hardware:
    """One accelerator (one GPU or NPU package) and vLLM's defaults on it.

    ``mfu_prefill`` / ``mfu_decode``: achievable shares of ``bf16_flops`` for prefill and decode
    tokens; ``bw_efficiency``: achievable share of ``hbm_bytes_per_s``.
    ``interconnect_per_peer_bytes_per_s``: set where GPUs are wired point to point (AMD Infinity
    Fabric) so a tensor-parallel group of ``tp`` GPUs gets only ``(tp - 1)`` links; ``None`` where
    a switch gives any group the full bandwidth (NVSwitch).
    ``usd_per_hour``: an on-demand list price of one GPU, ``None`` where none was found.
    """

    name: str
    bf16_flops: float
    fp8_flops: float | None
    hbm_bytes: int
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float
    mfu_prefill: float
    mfu_decode: float
    bw_efficiency: float
    max_num_batched_tokens: int
    max_num_seqs: int
    usd_per_hour: float | None
    interconnect_per_peer_bytes_per_s: float | None = None
    allreduce_latency_s: float = 10e-6
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    assumed: frozenset[str] = field(default_factory=frozenset, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise BadInputError(f"Hardware.name must be a non-empty string, got {self.name!r}")
        for name in ("bf16_flops", "hbm_bytes_per_s", "interconnect_bytes_per_s"):
            object.__setattr__(self, name, as_positive_float(getattr(self, name), f"Hardware.{name}"))
        for name in ("fp8_flops", "interconnect_per_peer_bytes_per_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, as_positive_float(getattr(self, name), f"Hardware.{name}"))
        if self.usd_per_hour is not None:
            object.__setattr__(self, "usd_per_hour", as_positive_float(self.usd_per_hour, "Hardware.usd_per_hour",
                                                                       allow_zero=True))
        for name in ("mfu_prefill", "mfu_decode", "bw_efficiency"):
            object.__setattr__(self, name, as_fraction(getattr(self, name), f"Hardware.{name}"))
        as_count(self.hbm_bytes, "Hardware.hbm_bytes", minimum=1)
        as_count(self.max_num_batched_tokens, "Hardware.max_num_batched_tokens", minimum=1)
        as_count(self.max_num_seqs, "Hardware.max_num_seqs", minimum=1)
        object.__setattr__(self, "allreduce_latency_s",
                           as_positive_float(self.allreduce_latency_s, "Hardware.allreduce_latency_s", allow_zero=True))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "assumed", frozenset(self.assumed))
        unknown = set(self.assumed) - {f for f in self.__dataclass_fields__}
        if unknown:
            raise BadInputError(f"Hardware.assumed names unknown fields {sorted(unknown)}")

    def allreduce_bytes_per_s(self, tp: int) -> float:
        """Per-direction bandwidth one GPU of a ``tp``-GPU group has for a ring all-reduce."""
        tp = as_count(tp, "tp", minimum=1)
        if self.interconnect_per_peer_bytes_per_s is None or tp <= 1:
            return self.interconnect_bytes_per_s
        return min(self.interconnect_bytes_per_s, (tp - 1) * self.interconnect_per_peer_bytes_per_s)

    def __repr__(self) -> str:
        fp8 = f", fp8 {self.fp8_flops / 1e12:g}" if self.fp8_flops else ""
        return (f"Hardware({self.name!r}: bf16 {self.bf16_flops / 1e12:g}{fp8} TFLOP/s, {self.hbm_bytes / GiB:g} GiB at "
                f"{self.hbm_bytes_per_s / 1e12:g} TB/s, MFU {self.mfu_prefill:g}/{self.mfu_decode:g})")


def hardware(name_or_hardware: str | Hardware) -> Hardware:
    """A preset by name or alias (case, spaces and underscores ignored), or the Hardware itself."""
    if isinstance(name_or_hardware, Hardware):
        return name_or_hardware
    if not isinstance(name_or_hardware, str):
        raise BadInputError(f"hardware must be a name or a Hardware, got {type(name_or_hardware).__name__}")
    key = _key(name_or_hardware)
    for hw in HARDWARE.values():
        if key == _key(hw.name) or key in {_key(a) for a in hw.aliases}:
            return hw
    raise BadInputError(f"unknown hardware {name_or_hardware!r}; expected one of {sorted(HARDWARE)} or a Hardware")


_resolve_hardware = hardware  # kv_pool_bytes's ``hardware`` argument shadows the function's name


def kv_pool_bytes(arch: ModelArch | str, hardware: Hardware | str, tp: int = 1, *, gpu_memory_utilization: float = 0.9,
                  weight_dtype: str = "bf16", kv_dtype: str = "bf16", activation_reserve_bytes: int | None = None) -> int:
    """Bytes of KV cache the instance holds, counted at ``arch.kv_bytes_per_token(kv_dtype)`` per
    token: the simulator's pool has ``kv_pool_bytes // (block_tokens * arch.kv_bytes_per_token(kv_dtype))``
    blocks.

    Each of the ``tp`` GPUs keeps ``gpu_memory_utilization x hbm_bytes``, less its shard of the
    weights and a reserve (activations + CUDA/NCCL, per GPU: vLLM profiles every worker), for KV.
    With KV sharded across the GPUs (``kv_heads >= tp``) that is
    ``util x HBM x tp - weights - reserve x tp``; where each GPU holds a replica (``kv_heads < tp``,
    MLA) the tokens that fit one GPU are converted back at the whole-model bytes per token.
    ``activation_reserve_bytes`` (per GPU) defaults to :data:`ACTIVATION_RESERVE_GIB` (dense or
    MoE) plus :data:`NON_TORCH_GIB` (tp 1 or more).  Raises :class:`BadInputError` with the
    figures when the weights and reserve do not fit.  Runtime O(1)."""
    arch = arch if isinstance(arch, ModelArch) else ModelArch.named(arch)
    hw = _resolve_hardware(hardware)
    tp = arch.check_tp(tp)
    util = as_fraction(gpu_memory_utilization, "gpu_memory_utilization")
    if activation_reserve_bytes is None:
        reserve = (ACTIVATION_RESERVE_GIB["moe" if arch.is_moe else "dense"] + NON_TORCH_GIB["tp1" if tp == 1 else "tpn"]) * GiB
    else:
        reserve = as_count(activation_reserve_bytes, "activation_reserve_bytes")
    weights = arch.total_params() * dtype_bytes(weight_dtype, "weight_dtype")
    free_per_gpu = util * hw.hbm_bytes - weights / tp - reserve
    if free_per_gpu <= 0:
        raise BadInputError(
            f"{arch.name} does not fit {tp} x {hw.name}: each GPU keeps {util:g} x {hw.hbm_bytes / GiB:g} GiB = "
            f"{util * hw.hbm_bytes / GiB:.2f} GiB, but its weight shard is {weights / tp / GiB:.2f} GiB "
            f"({weights / GiB:.2f} GiB in {weight_dtype} over tp={tp}) and the reserve {reserve / GiB:.2f} GiB; "
            f"expected a larger tp, a smaller weight dtype or more memory")
    full = arch.kv_bytes_per_token(kv_dtype)
    per_gpu = arch.kv_bytes_per_token(kv_dtype, tp=tp)
    return int(free_per_gpu * (full / per_gpu))


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _entry(name: str, *, sources: dict[str, str], assumed: tuple[str, ...] = (), **values) -> Hardware:
    return Hardware(name=name, sources=sources, assumed=frozenset(assumed), **values)


_VLLM_DEFAULTS = ("vLLM 0.33.0 EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py), OPENAI_API_SERVER usage "
                  "context: ")
_STAS_TFLOPS = "stas00/ml-engineering@744d01e compute/accelerator/README.md, 'TFLOPS comparison table' (dense)"
_STAS_MEM = "stas00/ml-engineering@744d01e compute/accelerator/README.md, memory table"
_STAS_NET = "stas00/ml-engineering@744d01e network/README.md, 'All-to-all bandwidth' (unidirectional)"
_MAMF = ("stas00/ml-engineering compute/accelerator/README.md 'Maximum Achievable Matmul FLOPS' (MAMF) bf16 efficiency")

HARDWARE: dict[str, Hardware] = {hw.name: hw for hw in (
    _entry("H100", aliases=("H100-SXM", "H100-SXM5", "H100-80GB"),
           bf16_flops=989.5e12, fp8_flops=1979e12, hbm_bytes=80 * GiB, hbm_bytes_per_s=3.35e12,
           interconnect_bytes_per_s=450e9, mfu_prefill=0.45, mfu_decode=0.30, bw_efficiency=1.0,
           max_num_batched_tokens=8192, max_num_seqs=1024, usd_per_hour=2.95,
           sources={"bf16_flops": "BLIS hardware_config.json TFlopsPeak 989.5; nvidia.com/en-us/data-center/h100 "
                                  "(1,979 with sparsity)",
                    "fp8_flops": "BLIS hardware_config.json TFlopsFP8 1979.0",
                    "hbm_bytes": "BLIS hardware_config.json MemoryGiB 80.0",
                    "hbm_bytes_per_s": "BLIS hardware_config.json BwPeakTBs 3.35",
                    "interconnect_bytes_per_s": f"NVLink 4: 450 GB/s per direction (900 GB/s bidirectional); {_STAS_NET}",
                    "mfu_prefill": _H100_MFU_SOURCE, "mfu_decode": _H100_MFU_SOURCE, "bw_efficiency": _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "8192 (>= 70 GiB, not A100)",
                    "max_num_seqs": _VLLM_DEFAULTS + "1024",
                    "usd_per_hour": "Nebius HGX H100 on-demand $2.95/GPU-hour (nebius.com/prices, as quoted by "
                                    "opslyft.com/blog/nebius-vs-aws-gpu-cost-allocation, read 2026-05-18)",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("allreduce_latency_s",)),
    _entry("H200", aliases=("H200-SXM", "H200-141GB"),
           bf16_flops=989.5e12, fp8_flops=1979e12, hbm_bytes=141 * GiB, hbm_bytes_per_s=4.8e12,
           interconnect_bytes_per_s=450e9, mfu_prefill=0.45, mfu_decode=0.30, bw_efficiency=1.0,
           max_num_batched_tokens=8192, max_num_seqs=1024, usd_per_hour=3.50,
           sources={"bf16_flops": f"same GH100 compute as H100 (989 dense); {_STAS_TFLOPS} note 16",
                    "fp8_flops": f"1979 dense; {_STAS_TFLOPS}",
                    "hbm_bytes": f"141 GB HBM3e; {_STAS_MEM}; nvidia.com/en-us/data-center/h200",
                    "hbm_bytes_per_s": f"4.8 TB/s; {_STAS_MEM}",
                    "interconnect_bytes_per_s": f"NVLink 4, 450 GB/s per direction; {_STAS_NET}",
                    "mfu_prefill": "assumed: H100's BLIS calibration (same die and clocks; MAMF lists 'H200 is the same')",
                    "mfu_decode": "assumed: H100's BLIS calibration (same die)",
                    "bw_efficiency": "assumed: " + _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "8192 (>= 70 GiB, < 160 GiB)",
                    "max_num_seqs": _VLLM_DEFAULTS + "1024",
                    "usd_per_hour": "Nebius, one H200 VM (1gpu-16vcpu-200gb) $3.50/hour, GPU, vCPU and RAM billed together "
                                    "(docs.nebius.com/signup-billing/billing-changes-oct-2025); "
                                    "kvmm.sim.models.H200_USD_PER_GPU_HOUR",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("mfu_prefill", "mfu_decode", "bw_efficiency", "allreduce_latency_s")),
    _entry("B200", aliases=("B200-SXM", "HGX-B200"),
           bf16_flops=2250e12, fp8_flops=4500e12, hbm_bytes=180 * GiB, hbm_bytes_per_s=8.0e12,
           interconnect_bytes_per_s=900e9, mfu_prefill=0.435, mfu_decode=0.29, bw_efficiency=1.0,
           max_num_batched_tokens=16384, max_num_seqs=1024, usd_per_hour=6.03,
           sources={"bf16_flops": f"2250 dense; {_STAS_TFLOPS} note 20 (NVIDIA DGX B200 datasheet)",
                    "fp8_flops": f"4500 dense; {_STAS_TFLOPS}",
                    "hbm_bytes": f"180 GB HBM3e (NVIDIA's HGX/DGX figure); {_STAS_MEM}",
                    "hbm_bytes_per_s": f"8.0 TB/s; {_STAS_MEM}",
                    "interconnect_bytes_per_s": f"NVLink 5, 900 GB/s per direction; {_STAS_NET}",
                    "mfu_prefill": f"assumed: H100's BLIS 0.45 x (B200 77.6 % / H100 80.3 %) {_MAMF}",
                    "mfu_decode": f"assumed: H100's BLIS 0.30 x (77.6 % / 80.3 %) {_MAMF}",
                    "bw_efficiency": "assumed: " + _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "16384 (>= 160 GiB)",
                    "max_num_seqs": _VLLM_DEFAULTS + "1024",
                    "usd_per_hour": "Spheron B200 on-demand $6.03/hour (spheron.network/blog/nvidia-h200-vs-b200-vs-gb200, "
                                    "prices of 2026-03-17)",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("mfu_prefill", "mfu_decode", "bw_efficiency", "allreduce_latency_s")),
    _entry("A100-80GB", aliases=("A100", "A100-SXM", "A100-80", "A100-SXM4-80GB"),
           bf16_flops=312e12, fp8_flops=None, hbm_bytes=80 * GiB, hbm_bytes_per_s=2.039e12,
           interconnect_bytes_per_s=300e9, mfu_prefill=0.38, mfu_decode=0.18, bw_efficiency=1.0,
           max_num_batched_tokens=2048, max_num_seqs=256, usd_per_hour=None,
           sources={"bf16_flops": "BLIS hardware_config.json A100-SXM TFlopsPeak 312",
                    "fp8_flops": "no FP8 tensor cores (BLIS TFlopsFP8 0; nvidia.com/en-us/data-center/a100)",
                    "hbm_bytes": "BLIS hardware_config.json MemoryGiB 80.0",
                    "hbm_bytes_per_s": "BLIS hardware_config.json BwPeakTBs 2.039",
                    "interconnect_bytes_per_s": f"NVLink 3, 300 GB/s per direction; {_STAS_NET}",
                    "mfu_prefill": _H100_MFU_SOURCE, "mfu_decode": _H100_MFU_SOURCE, "bw_efficiency": _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "2048 ('a100' in the device name keeps the small tier, PR #17885)",
                    "max_num_seqs": _VLLM_DEFAULTS + "256",
                    "usd_per_hour": "not set: only price ranges across providers were found",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("allreduce_latency_s",)),
    _entry("MI300X", aliases=("AMD-MI300X", "Instinct-MI300X"),
           bf16_flops=1307.4e12, fp8_flops=2614.9e12, hbm_bytes=192 * GiB, hbm_bytes_per_s=5.3e12,
           interconnect_bytes_per_s=448e9, interconnect_per_peer_bytes_per_s=64e9,
           mfu_prefill=0.288, mfu_decode=0.192, bw_efficiency=1.0,
           max_num_batched_tokens=16384, max_num_seqs=1024, usd_per_hour=1.85,
           sources={"bf16_flops": "1307.4 dense: 2100 MHz x 256 FMA x 2 x 1216 matrix cores (stas00/ml-engineering "
                                  "compute/accelerator/README.md); amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
                    "fp8_flops": "2614.9 dense (github.com/alpharomercoma/MI300X-vs-H200 METHODOLOGY.md spec table)",
                    "hbm_bytes": f"192 GB HBM3; {_STAS_MEM}",
                    "hbm_bytes_per_s": f"5.3 TB/s; {_STAS_MEM}",
                    "interconnect_bytes_per_s": f"Infinity Fabric, 7 x 64 GB/s per direction to the other 7 GPUs; {_STAS_NET}",
                    "interconnect_per_peer_bytes_per_s": "64 GB/s per link and direction (128 GB/s peak link, AMD); "
                                                         "stas00/ml-engineering network/README.md 'Peer-to-peer bandwidth'",
                    "mfu_prefill": f"assumed: H100's BLIS 0.45 x (MI300X 51.4 % / H100 80.3 %) {_MAMF}",
                    "mfu_decode": f"assumed: H100's BLIS 0.30 x (51.4 % / 80.3 %) {_MAMF}",
                    "bw_efficiency": "assumed: " + _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "16384 (192 GB >= 160 GiB; same rule on ROCm)",
                    "max_num_seqs": _VLLM_DEFAULTS + "1024",
                    "usd_per_hour": "Vultr MI300X on-demand $1.85/GPU-hour "
                                    "(cliffcenter.com/research/amd-inference-economics, 2026-05-18)",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("mfu_prefill", "mfu_decode", "bw_efficiency", "allreduce_latency_s")),
    _entry("L40S", aliases=("NVIDIA-L40S",),
           bf16_flops=362.05e12, fp8_flops=733e12, hbm_bytes=48 * GiB, hbm_bytes_per_s=0.864e12,
           interconnect_bytes_per_s=31e9, mfu_prefill=0.32, mfu_decode=0.08, bw_efficiency=1.0,
           max_num_batched_tokens=2048, max_num_seqs=256, usd_per_hour=1.861,
           sources={"bf16_flops": "BLIS hardware_config.json TFlopsPeak 362.05",
                    "fp8_flops": f"733 dense; {_STAS_TFLOPS} (nvidia.com/en-us/data-center/l40s: 1,466 with sparsity, "
                                 "the figure BLIS lists as TFlopsFP8)",
                    "hbm_bytes": "BLIS hardware_config.json MemoryGiB 48.0 (GDDR6)",
                    "hbm_bytes_per_s": "BLIS hardware_config.json BwPeakTBs 0.864",
                    "interconnect_bytes_per_s": "no NVLink: PCIe Gen4 x16, 31 GB/s per direction "
                                                "(stas00/ml-engineering network/README.md PCIe table)",
                    "mfu_prefill": _H100_MFU_SOURCE, "mfu_decode": _H100_MFU_SOURCE, "bw_efficiency": _BW_EFF_BLIS,
                    "max_num_batched_tokens": _VLLM_DEFAULTS + "2048 (< 70 GiB)",
                    "max_num_seqs": _VLLM_DEFAULTS + "256",
                    "usd_per_hour": "AWS G6e (1 x L40S) on-demand $1.861/hour, us-east-1 "
                                    "(modal.com/blog/nvidia-l40s-price-article, August 2025)",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("allreduce_latency_s",)),
    _entry("Ascend-910C", aliases=("910C", "Ascend910C"),
           bf16_flops=752e12, fp8_flops=None, hbm_bytes=128 * GiB, hbm_bytes_per_s=3.2e12,
           interconnect_bytes_per_s=196e9, mfu_prefill=0.45, mfu_decode=0.30, bw_efficiency=1.0,
           max_num_batched_tokens=2048, max_num_seqs=256, usd_per_hour=None,
           sources={"bf16_flops": "752 TFLOPS dense BF16 per dual-die package: Huawei's CloudMatrix384 paper (arXiv 2506.12708, "
                                  "as summarised by reportify.ai); 384 NPUs x 752 = ~289 PFLOPS "
                                  "(chinaresearchcollective.substack.com)",
                    "fp8_flops": "no FP8 rate published; the CloudMatrix384 paper quantizes to INT8 (arXiv 2506.12708 abstract)",
                    "hbm_bytes": "128 GB: two dies of 64 GB HBM each (vLLM-Ascend sees each die as a device; FlagTensor's 910C "
                                 "guide: 'Ascend 910C (64GB HBM/die), 8 chips x 2 dies = 16 NPU devices')",
                    "hbm_bytes_per_s": "3.2 TB/s, eight HBM2E stacks (TechPowerUp 2025-04-21 citing DigiTimes)",
                    "interconnect_bytes_per_s": "assumed: 'UB Interconnect BW: 196 GB/s / NPU' "
                                                "(chinaresearchcollective.substack.com, CloudMatrix 384 analysis); "
                                                "Huawei does not state the direction",
                    "mfu_prefill": "assumed: H100's BLIS calibration (no published MFU for Ascend)",
                    "mfu_decode": "assumed: H100's BLIS calibration",
                    "bw_efficiency": "assumed: " + _BW_EFF_BLIS,
                    "max_num_batched_tokens": "assumed: vLLM's rule for a 64 GB device (one die) gives 2048; "
                                              "vllm-ascend may override",
                    "max_num_seqs": "assumed: vLLM's rule for a 64 GB device gives 256",
                    "usd_per_hour": "not set: no public on-demand price found",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("interconnect_bytes_per_s", "mfu_prefill", "mfu_decode", "bw_efficiency", "max_num_batched_tokens",
                    "max_num_seqs", "allreduce_latency_s")),
    _entry("Ascend-950DT", aliases=("Ascend-950", "950DT", "Ascend950"),
           bf16_flops=486e12, fp8_flops=919e12, hbm_bytes=96 * GiB, hbm_bytes_per_s=4.0e12,
           interconnect_bytes_per_s=840e9, mfu_prefill=0.45, mfu_decode=0.30, bw_efficiency=1.0,
           max_num_batched_tokens=8192, max_num_seqs=1024, usd_per_hour=None,
           sources={"bf16_flops": "486: Atlas 950 SuperPoD spec table, 31.1 PFLOPS FP16/BF16 for 64 x Ascend 950DT "
                                  "(hiascend.com/en/hardware/cluster?tag=950, as divided in stas00/ml-engineering "
                                  "compute/accelerator/README.md note 28)",
                    "fp8_flops": "919: same table, 58.8 PFLOPS mxFP8/HiF8 for 64 cards (HiF8 is Huawei's format, not OCP FP8)",
                    "hbm_bytes": f"96 GB per card (64 x 96GB in the same table); {_STAS_MEM}",
                    "hbm_bytes_per_s": f"4.0 TB/s; {_STAS_MEM}",
                    "interconnect_bytes_per_s": "UB Link 1.68 TB/s bidirectional per NPU, halved (stas00/ml-engineering "
                                                "network/README.md 'UB Link')",
                    "mfu_prefill": "assumed: H100's BLIS calibration (no published MFU for Ascend)",
                    "mfu_decode": "assumed: H100's BLIS calibration",
                    "bw_efficiency": "assumed: " + _BW_EFF_BLIS,
                    "max_num_batched_tokens": "assumed: vLLM's rule for a 96 GB device gives 8192; vllm-ascend may override",
                    "max_num_seqs": "assumed: vLLM's rule gives 1024",
                    "usd_per_hour": "not set: no public on-demand price found (announced part)",
                    "allreduce_latency_s": _ALLREDUCE_ASSUMED},
           assumed=("mfu_prefill", "mfu_decode", "bw_efficiency", "max_num_batched_tokens", "max_num_seqs",
                    "allreduce_latency_s")),
)}
