"""Configuration of the composed serving simulator: :class:`SimConfig`, :class:`PDConfig` (and
:class:`~kvmm.sim.levels.TierLevel`, defined in :mod:`kvmm.sim.levels`, re-exported here).

Everything here is plain, frozen, picklable data (so :func:`kvmm.sim.sweep` can ship configs to
other processes).  Policies are given by registered name or as any object that satisfies the
Protocol (:class:`~kvmm.protocols.EvictionPolicy`, :class:`~kvmm.protocols.AdmissionPolicy`); an
object is deep-copied for every run, so one config can be simulated twice with the same result.

::

    SimConfig(workload="conversation", load=0.8,
              tiers=[TierLevel("dram", capacity_bytes=64 * GiB, eviction="arc", admission="write-all"),
                     TierLevel(preset("nvme"), eviction=MyPolicy(), admission="refill-filter")],
              policy="timely")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kvmm._validate import MAX_INSTANCES, MAX_INT64, MAX_UNITS, as_count, as_fraction, as_positive_float
from kvmm.cluster.fabric import link_by_name
from kvmm.errors import BadInputError
from kvmm.protocols import TokenScorer
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.sim.cost import Prices
from kvmm.sim.latency.accelerators import Hardware
from kvmm.sim.latency.arch import ModelArch
from kvmm.sim.latency.step import LatencyModel
from kvmm.sim.levels import (  # noqa: F401 (re-exported: TierLevel and its policy checks lived here)
    ADMISSION_NAMES,
    FILL_NAMES,
    TierLevel,
    as_tier_levels,
    check_admission,
    check_eviction,
    check_name_or_protocol,
    make_admission,
    make_eviction,
)
from kvmm.sim.models import ModelSpec
from kvmm.sim.serving import resolve_serving
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import TierSpec, preset
from kvmm.traces.trace import KVTrace

__all__ = ["SimConfig", "TierLevel", "PDConfig", "GiB", "ADMISSION_NAMES", "STAGING_NAMES", "SCORER_NAMES", "FILL_NAMES"]

GiB = 1 << 30

#: staging policies the simulator runs (kvmm.policies.staging, plus the write-through LRU baseline)
STAGING_NAMES = ("on-demand", "immediate", "immediate-edf", "timely", "write-through-lru")
#: token scorers by name (kvmm.compress.scorers; built by kvmm.sim.compression.make_scorer)
SCORER_NAMES = ("h2o", "scissorhands", "snapkv", "streamingllm", "random")


@dataclass(frozen=True)
class PDConfig:
    """Prefill/decode disaggregation: ``prefill_instances`` compute prompts and hand each
    request's KV to one of ``decode_instances`` over ``link`` (a TierSpec or a name in
    :data:`kvmm.tiers.spec.LINK_PRESETS`: bandwidth per direction and latency).  Each decode
    instance has one ingress link, a FIFO queue.  ``layerwise_overlap``: layer ``i``'s KV is sent
    while later layers are computed (only the last layer's share follows the prefill)."""

    prefill_instances: int = 1
    decode_instances: int = 1
    link: str | TierSpec = "rdma400"
    layerwise_overlap: bool = True

    def __post_init__(self) -> None:
        as_count(self.prefill_instances, "prefill_instances", minimum=1, maximum=MAX_INSTANCES)
        as_count(self.decode_instances, "decode_instances", minimum=1, maximum=MAX_INSTANCES)
        link = self.link
        if isinstance(link, str):
            link = link_by_name(link)  # a link or a fabric preset name: --pd and --fabric share names
        if not isinstance(link, TierSpec):
            raise BadInputError(f"PDConfig.link must be a TierSpec or a link preset name, got {type(self.link).__name__}")
        object.__setattr__(self, "link", link)
        if not isinstance(self.layerwise_overlap, bool):
            raise BadInputError(f"layerwise_overlap must be a bool, got {self.layerwise_overlap!r}")

    @property
    def instances(self) -> int:
        return self.prefill_instances + self.decode_instances


def _default_tiers() -> tuple:
    return (TierLevel(preset("nvme"), eviction="lru", admission="write-all"),)


@dataclass(frozen=True)
class SimConfig:
    """One simulation: workload, load, model, the memory hierarchy and the staging policy.

    ``workload``: a bundled trace name (``"conversation"``, ``"synthetic"``), a trace file path (any
    format :func:`kvmm.traces.load_trace` reads), a :class:`Workload` or a loaded
    :class:`~kvmm.traces.KVTrace`.  ``load``: target utilisation, the
    arrivals are rescaled so that the offered work (see :func:`kvmm.sim.load.offered_seconds`)
    divided by the span of the arrivals equals it; ``None`` replays the trace's timestamps
    (times ``time_scale``).  Picklable.
    """

    workload: str | os.PathLike | Workload | KVTrace = "conversation"
    max_requests: int | None = None  # replay only the first N requests
    load: float | None = 0.7  # target utilisation (None: trace timestamps x time_scale)
    time_scale: float = 1.0  # multiply inter-arrival times (only with load=None)
    # what serves (kvmm.sim.serving, docs/latency.md): a model name (kvmm.sim.latency.ModelArch.named),
    # a ModelArch or a ModelSpec (constant rates); the GPU (kvmm.sim.latency.HARDWARE); tensor parallelism
    model: str | ModelArch | ModelSpec = "llama-3.1-8b"
    hardware: str | Hardware = "H200"
    tp: int = 1
    # the step clock: "roofline" | "constant" (the old rates) | "fitted" (fit_latency(latency_table)) |
    # any LatencyModel object; None: roofline, or constant for a ModelSpec
    latency: str | LatencyModel | None = None
    latency_table: str | os.PathLike | None = None  # with latency="fitted": a CSV of measured steps
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    # the scheduler (vLLM V1): token budget per step and sequence cap (None: vLLM's defaults for the
    # hardware), chunked prefill (None: on, off with the constant-rate model) and its long-prefill cap
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    chunked_prefill: bool | None = None
    long_prefill_token_threshold: int = 0
    instances: int = 1  # colocated serving instances (requests dealt round-robin)
    # GPU memory for the KV pool: blocks = gpu_kv_bytes // (block tokens x model KV bytes per token);
    # None: gpu_memory_utilization x HBM x tp - weights - activation reserve (kvmm.sim.latency.kv_pool_bytes)
    gpu_kv_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    gpu_prefix_cache: bool = True  # finished requests' blocks stay cached in the pool (vLLM prefix caching)
    tiers: Sequence[TierLevel | TierSpec | str] = field(default_factory=_default_tiers)  # lower tiers, fastest first
    fast_tier: TierSpec = field(default_factory=lambda: preset("cxl", 100 * GiB))  # protected staging tier
    policy: str = "timely"  # staging: see STAGING_NAMES
    stage_efficiency: float = 0.85  # achieved / nominal lower-tier bandwidth when staging
    margin_s: float = 0.0  # ledger trigger slack (0: no policy gets a tuned slack)
    # advance notice: every request is known (looked up, its lower-tier hit claimed) this long
    # before it arrives, as an agent's next step is during a tool call of known duration; it joins
    # the queue at arrival (0: known at arrival; one engine only, not with pd= or cluster=)
    notice_s: float = 0.0
    poll_interval_s: float = 0.005  # the staging controller's clock (it also polls every step)
    initial_rate: float | None = None  # ledger's first progress-rate guess (default: model prefill rate)
    recompute_fallback: bool = False  # recompute a hit whose staging would finish later than recomputing it
    high_priority_share: float = 0.0  # share of requests in the high-priority class (they jump the queue)
    priority_seed: int = 0  # seeds the draw of each request's class
    pd: PDConfig | None = None  # a PDConfig: prefill/decode disaggregation (kvmm.sim.engine.pd)
    token_budget: int | None = None  # decode-time token compression: live tokens kept per request
    scorer: str | TokenScorer = "h2o"  # with token_budget: a scorer name (SCORER_NAMES) or TokenScorer object
    repack_interval: int = 64  # with token_budget: decode tokens between compressions
    label: str = ""
    cluster: ClusterConfig | None = None  # routed instances, shared tiers, a fabric (kvmm.sim.ClusterConfig)
    prices: Prices | None = None  # the cost account's prices (kvmm.sim.Prices; None: the documented defaults)

    def __post_init__(self) -> None:
        if self.max_requests is not None:
            as_count(self.max_requests, "max_requests", minimum=1, maximum=MAX_INT64)
        if self.load is not None:
            as_positive_float(self.load, "load")
            if self.time_scale != 1.0:
                raise BadInputError("give load= or time_scale=, not both (load rescales the arrivals itself)")
        as_positive_float(self.time_scale, "time_scale")
        as_count(self.tp, "tp", minimum=1, maximum=MAX_INSTANCES)
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if getattr(self, name) is not None:
                as_count(getattr(self, name), name, minimum=1, maximum=MAX_INT64)
        as_count(self.long_prefill_token_threshold, "long_prefill_token_threshold", maximum=MAX_INT64)
        if self.chunked_prefill is not None and not isinstance(self.chunked_prefill, bool):
            raise BadInputError(f"chunked_prefill must be a bool or None, got {self.chunked_prefill!r}")
        as_fraction(self.gpu_memory_utilization, "gpu_memory_utilization")
        as_count(self.instances, "instances", minimum=1, maximum=MAX_INSTANCES)
        if self.gpu_kv_bytes is not None:
            as_count(self.gpu_kv_bytes, "gpu_kv_bytes", minimum=1, maximum=MAX_UNITS)
        resolve_serving(self)  # every serving field checked together (names, weights that fit, ...)
        if not isinstance(self.gpu_prefix_cache, bool):
            raise BadInputError(f"gpu_prefix_cache must be a bool, got {self.gpu_prefix_cache!r}")
        object.__setattr__(self, "tiers", as_tier_levels(self.tiers, "tiers"))
        if self.policy not in STAGING_NAMES:
            raise BadInputError(f"unknown staging policy {self.policy!r}; expected one of {list(STAGING_NAMES)}")
        if not isinstance(self.fast_tier, TierSpec):
            raise BadInputError(f"fast_tier must be a TierSpec (kvmm.tiers.preset(...)), got {type(self.fast_tier).__name__}")
        as_positive_float(self.stage_efficiency, "stage_efficiency")
        as_positive_float(self.margin_s, "margin_s", allow_zero=True)
        as_positive_float(self.poll_interval_s, "poll_interval_s")
        as_positive_float(self.notice_s, "notice_s", allow_zero=True)
        if self.notice_s and (self.pd is not None or self.cluster is not None):
            raise BadInputError("notice_s (advance notice of arrivals) is modelled for one engine only; "
                                "expected notice_s=0 with pd= or cluster=")
        if self.initial_rate is not None:
            as_positive_float(self.initial_rate, "initial_rate")
        as_fraction(self.high_priority_share, "high_priority_share", include_zero=True)
        as_count(self.priority_seed, "priority_seed", maximum=MAX_INT64)
        if not isinstance(self.recompute_fallback, bool):
            raise BadInputError(f"recompute_fallback must be a bool, got {self.recompute_fallback!r}")
        if self.token_budget is not None:
            as_count(self.token_budget, "token_budget", minimum=1, maximum=MAX_INT64)
        check_scorer(self.scorer)
        as_count(self.repack_interval, "repack_interval", minimum=1, maximum=MAX_INT64)
        if self.cluster is not None:
            if not isinstance(self.cluster, ClusterConfig):
                raise BadInputError(f"cluster must be a kvmm.cluster.ClusterConfig or None, got {type(self.cluster).__name__}")
            if self.instances != 1:
                raise BadInputError("give the number of instances once: ClusterConfig(instances=...) with cluster=, "
                                    f"not SimConfig(instances={self.instances})")
            if self.token_budget is not None:
                raise BadInputError("token_budget (decode-time compression) is not modelled in a cluster yet; "
                                    "expected token_budget=None with cluster=")
            if isinstance(self.pd, PDConfig):  # the router picks the prefill instance of each request
                if self.cluster.instances != self.pd.prefill_instances:
                    raise BadInputError(f"with pd=, the cluster routes to the {self.pd.prefill_instances} prefill "
                                        f"instances; expected ClusterConfig(instances={self.pd.prefill_instances}), "
                                        f"got {self.cluster.instances}")
                if self.cluster.shared_tiers:
                    raise BadInputError("PD mode models no lower tiers; expected no shared_tiers with pd=")
                if self.cluster.metrics_interval_s:
                    raise BadInputError("PD mode routes on exact loads (no metrics scrape is modelled there); "
                                        "expected metrics_interval_s=0 with pd=")
        if self.prices is not None:
            if not isinstance(self.prices, Prices):
                raise BadInputError(f"prices must be a kvmm.cluster.Prices or None, got {type(self.prices).__name__}")
        if self.pd is not None and not isinstance(self.pd, PDConfig):
            raise BadInputError(f"pd must be a PDConfig or None, got {type(self.pd).__name__}")
        if not isinstance(self.workload, (str, Workload, KVTrace)) and not hasattr(self.workload, "__fspath__"):
            raise BadInputError(f"workload must be a trace name, a path, a Workload or a KVTrace, got "
                                f"{type(self.workload).__name__}")

    def with_(self, **changes) -> SimConfig:
        return replace(self, **changes)


# ---------------------------------------------------------------------- policy checks
def check_scorer(scorer: object) -> None:
    """A registered scorer name or an object with ``observe`` and ``scores`` (the TokenScorer Protocol)."""
    check_name_or_protocol(scorer, "scorer", SCORER_NAMES, ("observe", "scores"), "TokenScorer")


