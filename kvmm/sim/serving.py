"""What a run serves with, resolved once from a :class:`~kvmm.sim.SimConfig`: the model, the GPU,
the latency model the step clock asks, the scheduler's limits and the KV pool.

Resolution rules (docs/latency.md, "In the simulator"):

* ``model``: a name of :func:`kvmm.sim.latency.ModelArch.named` (``"llama-3.1-8b"``, ...; the
  old ``"llama3-8b"`` too), a ``ModelArch`` (e.g. ``ModelArch.from_hf_config(path)``), or a
  :class:`~kvmm.sim.models.ModelSpec` (constant rates, no architecture).
* ``latency``: ``None`` picks ``"roofline"`` for a model with an architecture and
  ``"constant"`` for a ``ModelSpec``; ``"constant"`` with a model name uses that name's spec in
  :data:`kvmm.sim.models.MODELS` (today's rates); ``"fitted"`` fits ``latency_table`` (a CSV of
  measured steps, :func:`~kvmm.sim.latency.fit_latency`); or any ``LatencyModel`` object.
* ``chunked_prefill``: ``None`` is on, except with the constant-rate model, whose numbers were
  made with whole prefills (so ``latency="constant"`` gives exactly the old results).
* ``max_num_batched_tokens`` / ``max_num_seqs``: ``None`` takes vLLM's online-serving defaults
  for the hardware (``Hardware.max_num_batched_tokens`` / ``max_num_seqs``), or a ModelSpec's
  ``max_prefill_tokens`` / ``max_batch`` with the constant-rate model.
* ``gpu_kv_bytes``: ``None`` sizes the pool from memory
  (:func:`~kvmm.sim.latency.kv_pool_bytes`: ``gpu_memory_utilization x HBM x tp - weights -
  activation reserve``) when the model has an architecture; a bare ModelSpec keeps the old
  96 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvmm.errors import BadInputError
from kvmm.sim import latency as L  # a lazy package: each name loads its module on first use
from kvmm.sim.models import H200_USD_PER_GPU_HOUR, MODELS, ModelSpec

__all__ = ["Serving", "resolve_serving", "LEGACY_GPU_KV_BYTES", "LATENCY_NAMES"]

GiB = 1 << 30
#: the pool of a ModelSpec run without an architecture: one H200 (141 GB) at vLLM's 0.9 memory
#: utilisation minus an 8B model's 16 GB of bf16 weights and activation workspace (assumed)
LEGACY_GPU_KV_BYTES = 96 * GiB
#: latency models by name
LATENCY_NAMES = ("roofline", "constant", "fitted")
# the old simulator names and the architectures they stand for (their ModelSpec keeps the rates)
_SPEC_OF_ARCH = {"llama-3.1-8b": "llama3-8b", "qwen2.5-32b": "qwen2.5-32b"}


@dataclass(frozen=True)
class Serving:
    """A run's serving setup (see the module docstring).  ``gpus`` GPUs serve each instance
    (``tp``); ``gpu_usd_per_hour`` prices one of them."""

    name: str
    arch: L.ModelArch | None  # None for a bare ModelSpec
    hardware: L.Hardware | None  # None for a bare ModelSpec
    tp: int
    latency: L.LatencyModel  # what the clock asks
    latency_name: str
    kv_bytes_per_token: int
    layers: int
    gpu_usd_per_hour: float
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    long_prefill_token_threshold: int
    gpu_kv_bytes: int
    kv_from_memory: bool

    @property
    def gpus(self) -> int:
        return self.tp

    def describe(self) -> dict:
        """The plain facts a SimResult records of what the run used."""
        return {"model": self.name, "hardware": self.hardware.name if self.hardware is not None else None,
                "tp": self.tp, "latency": self.latency_name, "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "chunked_prefill": self.chunked_prefill,
                "long_prefill_token_threshold": self.long_prefill_token_threshold, "gpu_kv_bytes": self.gpu_kv_bytes,
                "gpu_kv_from_memory": self.kv_from_memory, "kv_bytes_per_token": self.kv_bytes_per_token,
                "gpu_usd_per_hour": self.gpu_usd_per_hour,
                "gpu_price_assumed": self.hardware is not None and self.hardware.usd_per_hour is None}


def resolve_serving(cfg) -> Serving:
    """The :class:`Serving` of ``cfg`` (a SimConfig).  Raises BadInputError naming the field
    when the combination cannot be served (e.g. roofline without an architecture, weights
    larger than the GPUs)."""
    model = cfg.model
    spec = model if isinstance(model, ModelSpec) else None
    arch = None
    if spec is None:
        arch = model if isinstance(model, L.ModelArch) else L.ModelArch.named(model)
    name = spec.name if spec is not None else (model if isinstance(model, str) else arch.name)
    hardware = L.hardware(cfg.hardware) if arch is not None else None
    latency_name, latency = _latency(cfg, spec, arch, hardware, name)
    chunked = cfg.chunked_prefill if cfg.chunked_prefill is not None else latency_name != "constant"
    budget, seqs = _scheduler_limits(cfg, latency_name, spec, arch, hardware, name)
    if spec is not None:
        kvb, layers, usd = spec.kv_bytes_per_token, spec.layers, spec.gpu_usd_per_hour
    else:
        kvb, layers = arch.kv_bytes_per_token(cfg.kv_dtype), arch.num_layers
        # a GPU without a published on-demand price is billed at the H200's (SimResult.serving says so)
        usd = hardware.usd_per_hour if hardware.usd_per_hour is not None else H200_USD_PER_GPU_HOUR
    if cfg.gpu_kv_bytes is not None:
        pool, from_memory = int(cfg.gpu_kv_bytes), False
    elif arch is None:
        pool, from_memory = LEGACY_GPU_KV_BYTES, False
    else:
        pool = L.kv_pool_bytes(arch, hardware, cfg.tp, gpu_memory_utilization=cfg.gpu_memory_utilization,
                               weight_dtype=cfg.weight_dtype, kv_dtype=cfg.kv_dtype)
        from_memory = True
    if budget < seqs and chunked:
        raise BadInputError(f"max_num_batched_tokens={budget} is below max_num_seqs={seqs}; expected at least one "
                            "token per sequence in a step (vLLM refuses it too)")
    return Serving(name=name, arch=arch, hardware=hardware, tp=int(cfg.tp), latency=latency, latency_name=latency_name,
                   kv_bytes_per_token=int(kvb), layers=int(layers), gpu_usd_per_hour=float(usd),
                   max_num_batched_tokens=int(budget), max_num_seqs=int(seqs), chunked_prefill=bool(chunked),
                   long_prefill_token_threshold=int(cfg.long_prefill_token_threshold), gpu_kv_bytes=int(pool),
                   kv_from_memory=from_memory)


def _latency(cfg, spec, arch, hardware, name) -> tuple[str, Any]:
    latency = cfg.latency
    if latency is None:
        latency = "constant" if spec is not None else "roofline"
    if not isinstance(latency, str):
        return type(latency).__name__, latency
    if latency == "constant":
        if spec is None:
            legacy = _SPEC_OF_ARCH.get(arch.name)
            if legacy is None:
                raise BadInputError(f"latency='constant' needs the model's constant rates; {name!r} has none (they "
                                    f"exist for {sorted(MODELS)}); expected a ModelSpec, one of those names, or "
                                    "latency='roofline'")
            spec = MODELS[legacy]
        return "constant", L.ConstantRate.from_spec(spec)
    if spec is not None:
        raise BadInputError(f"latency={latency!r} needs the model's architecture; a ModelSpec ({spec.name!r}) has only "
                            "rates; expected latency='constant', or model= a name or a ModelArch")
    if latency == "roofline":
        return "roofline", L.Roofline(arch, hardware, cfg.tp, weight_dtype=cfg.weight_dtype, kv_dtype=cfg.kv_dtype)
    if latency == "fitted":
        if cfg.latency_table is None:
            raise BadInputError("latency='fitted' needs latency_table= (a CSV of measured steps, docs/latency.md); "
                                "or pass latency=kvmm.sim.latency.fit_latency(table)")
        return "fitted", L.fit_latency(cfg.latency_table)
    raise BadInputError(f"unknown latency {latency!r}; expected one of {list(LATENCY_NAMES)} or a LatencyModel object")


def _scheduler_limits(cfg, latency_name, spec, arch, hardware, name) -> tuple[int, int]:
    budget, seqs = cfg.max_num_batched_tokens, cfg.max_num_seqs
    if budget is not None and seqs is not None:
        return budget, seqs
    if spec is not None or latency_name == "constant":  # a ModelSpec's own limits (the old scheduler's)
        legacy = spec if spec is not None else MODELS[_SPEC_OF_ARCH[arch.name]]
        defaults = (legacy.max_prefill_tokens, legacy.max_batch)
    else:
        defaults = (hardware.max_num_batched_tokens, hardware.max_num_seqs)
    return (budget if budget is not None else defaults[0]), (seqs if seqs is not None else defaults[1])
