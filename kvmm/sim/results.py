"""The metrics of a run: :class:`SimResult`, and their collection from the finished instances.

Results read the request table (per-request times), each instance's stats record and staging
controller, and the hierarchies' counters; never the event loop's internals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from kvmm.sim.cost import CostAccount
from kvmm.traces.trace import KVTrace

__all__ = ["SimResult", "collect", "latency_metrics", "staging_wait_metrics", "run_policies", "prompt_tokens"]


@dataclass(frozen=True)
class SimResult:
    """Metrics of one run (times in seconds, sizes in bytes)."""

    label: str
    policy: str
    model: str
    requests: int
    duration_s: float
    load: float  # target utilisation the arrivals were scaled to (nan: trace timestamps)
    output_tokens_per_s: float
    ttft_p50: float
    ttft_p95: float
    ttft_p99: float
    ttft_mean: float
    tpot_p50: float  # time per output token after the first (requests with >= 2 output tokens)
    tpot_p95: float
    ttft_p95_high_priority: float  # p95 TTFT of the high-priority class (0.0 when it is empty)
    high_priority_requests: int
    protected_byte_seconds: float
    protected_byte_seconds_per_request: float
    peak_protected_bytes: int
    fast_tier_bytes: int
    claims: int
    ready_in_time: int
    ready_late: int
    claims_cancelled: int  # claims released unused: the prefix was on the GPU by scheduling time
    claims_recomputed: int  # claims released unused: recomputing the hit was faster than waiting
    slow_hit_token_share: float  # share of prompt tokens read from a lower tier
    gpu_hit_token_share: float
    gpu_pool_blocks: int
    gpu_lookup_hits: int  # the pool's own counters (BlockAllocator.stats)
    gpu_lookup_queries: int
    tier_block_hits: tuple  # per lower tier: offered blocks it held
    tier_blocks_offered: tuple
    tier_evictions: tuple
    steps: int
    max_waiting: int
    max_running: int = 0  # largest decode batch seen
    tokens_evicted: int = 0  # token compression: tokens the scorer evicted
    kv_bytes_transferred: int = 0  # PD: prefill -> decode KV bytes over the links
    link_busy_share: float = 0.0  # PD: busy time of the busiest link / duration
    demoted_blocks: tuple = ()  # per lower tier: blocks written into it by write-back demotion
    instances: int = 1  # serving instances (a cluster's, or SimConfig.instances)
    requests_per_instance: tuple = ()  # cluster: requests the router sent to each instance
    load_imbalance: float = 1.0  # cluster: max / mean of requests per instance
    queue_imbalance: float = 1.0  # cluster: max / mean queue length, averaged over routing decisions
    index_entries: int = 0  # cluster: block keys in the global index at the end
    fabric_bytes: int = 0  # cluster: bytes read from shared tiers over the fabric
    # the cost account (kvmm.sim.cost; prices: SimConfig.prices or the documented defaults)
    gpu_hours: float = 0.0
    tier_gib_hours: tuple = ()  # capacity account: per priced tier (cost.tier_names), GiB x hours provisioned
    total_usd: float = 0.0
    usd_per_million_input_tokens: float = 0.0
    usd_per_million_output_tokens: float = 0.0
    tokens_per_s_per_usd: float = 0.0  # tokens/s per USD/h of spend
    cost: CostAccount | None = None  # the whole bill (kvmm.sim.cost)
    # (prefill, decode) GPU-busy seconds summed over instances (None: not tracked)
    busy_seconds: tuple[float, float] | None = None
    # the run's own policy objects (SimConfig deep-copies the ones it is given, so a run never
    # changes them): {"router": ..., "eviction": per instance, per lower level}; not a metric,
    # left out of as_dict and of comparisons
    policies: Any = field(default=None, compare=False, repr=False)
    # time requests spend waiting for staging (seconds): per claimed request that the scheduler
    # asked for (its first ``ledger.need``: it reached the head of the queue, within the step's
    # prefill window and batch room, and would have been scheduled had its KV been there), from
    # that moment to the moment its staged KV was ready (its copy completed; or its claim was
    # dropped: recomputed, or the GPU held the hit), 0 if it was ready before; mean and p95 over
    # those requests, total over all.  write-through-lru has no claims (its lower-tier reads are
    # in the step time): 0.
    staging_wait_s_mean: float = 0.0
    staging_wait_s_p95: float = 0.0
    staging_wait_s_total: float = 0.0
    tpot_mean: float = 0.0  # mean of the per-request TPOT (requests with >= 2 output tokens)
    # what the run served with (kvmm.sim.serving.Serving.describe): model, hardware, tp, latency
    # model, scheduler limits, chunked prefill, the GPU KV pool and whether it came from memory
    serving: dict[str, Any] | None = None
    # per lower tier: blocks read from it into the GPU for the prompts that used them (a claim's
    # blocks by source tier, when its step consumed it; write-through-lru: the hits it read)
    tier_read_blocks: tuple = ()
    # what the run did that its config does not say (kvmm.errors.RunWarning): idle instances,
    # prices that matched no tier, a router with nothing to choose
    warnings: tuple = ()

    def as_dict(self) -> dict:
        """The metrics (every field but ``policies``) as a plain dict."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "policies"}


def _plain(value: Any) -> Any:
    return asdict(value) if hasattr(value, "__dataclass_fields__") else value


def prompt_tokens(trace: KVTrace) -> float:
    """The trace's prompt tokens (each request at least one): the base of the hit-token shares."""
    return float(np.maximum(trace.input_length, 1).sum())


def collect(cfg, serving, instances: list, tables: list, arrival: np.ndarray, end: float, prompt_tokens: float) -> SimResult:
    """The metrics of finished instances (several are pooled).  ``tables``: the request table of
    each instance (one shared table, repeated, in a cluster); ``prompt_tokens``: the run's."""
    mine = [slice(None) if len(i.arrival_ids) == t.n else np.asarray(i.arrival_ids, dtype=np.int64)
            for i, t in zip(instances, tables)]
    arr = np.concatenate([t.arrival[s] for t, s in zip(tables, mine)])
    first = np.concatenate([t.first_token[s] for t, s in zip(tables, mine)])
    fin = np.concatenate([t.finish[s] for t, s in zip(tables, mine)])
    out_len = np.concatenate([t.output_len[s] for t, s in zip(tables, mine)])
    high = np.concatenate([t.priority_class[s] for t, s in zip(tables, mine)]) == 0
    n = int(arr.shape[0])
    span = end - float(arrival.min()) if n else 0.0
    staging = [i.staging for i in instances]
    bs = sum(s.protected_byte_seconds for s in staging)
    peak = max(s.peak_protected_bytes for s in staging)
    stats = [i.stats for i in instances]
    pools = [i.hier.pool.stats for i in instances]
    tiers = len(instances[0].levels)
    # a shared level is one tier object in every instance's hierarchy: count its evictions once
    tier_objects = [{id(i.hier.tiers[k]): i.hier.tiers[k] for i in instances} for k in range(tiers)]
    label = cfg.label or f"{serving.name}/{cfg.policy}"
    return SimResult(
        label=label, policy=cfg.policy, model=serving.name, requests=n,
        **latency_metrics(cfg, arr, first, fin, out_len, span),
        ttft_p95_high_priority=float(np.percentile((first - arr)[high], 95)) if high.any() else 0.0,
        high_priority_requests=int(high.sum()),
        protected_byte_seconds=bs, protected_byte_seconds_per_request=bs / n,
        peak_protected_bytes=int(peak), fast_tier_bytes=int(cfg.fast_tier.capacity_bytes),
        claims=sum(s.claims_made for s in staging),
        ready_in_time=sum(s.ready_in_time for s in staging),
        ready_late=sum(s.ready_late for s in staging),
        claims_cancelled=sum(s.claims_cancelled for s in staging),
        claims_recomputed=sum(s.claims_recomputed for s in staging),
        slow_hit_token_share=sum(s.slow_hit_tokens for s in stats) / prompt_tokens,
        gpu_hit_token_share=sum(s.gpu_hit_tokens for s in stats) / prompt_tokens,
        gpu_pool_blocks=int(instances[0].hier.num_blocks),
        gpu_lookup_hits=sum(int(p["hits"]) for p in pools), gpu_lookup_queries=sum(int(p["queries"]) for p in pools),
        tier_block_hits=tuple(int(sum(i.hier.tier_hits[k] for i in instances)) for k in range(tiers)),
        tier_blocks_offered=tuple(int(sum(i.hier.tier_offered[k] for i in instances)) for k in range(tiers)),
        tier_evictions=tuple(int(sum(t.evictions for t in tier_objects[k].values())) for k in range(tiers)),
        demoted_blocks=tuple(int(sum(i.hier.demoted[k] for i in instances)) for k in range(tiers)),
        instances=len(instances), requests_per_instance=tuple(len(i.arrival_ids) for i in instances),
        steps=sum(s.steps for s in stats), max_waiting=max(s.max_waiting for s in stats),
        max_running=max(s.max_running for s in stats),
        tokens_evicted=sum(i.compressor.tokens_evicted for i in instances if i.compressor is not None),
        policies=run_policies(instances),
        busy_seconds=(sum(s.prefill_busy_s for s in stats), sum(s.decode_busy_s for s in stats)),
        serving=serving.describe(),
        tier_read_blocks=tuple(int(sum(i.staging.read_blocks[k] for i in instances)) for k in range(tiers)),
        **staging_wait_metrics(np.concatenate([t.staging_waits()[s] for t, s in zip(tables, mine)])))


def staging_wait_metrics(waits: np.ndarray) -> dict:
    """The ``staging_wait_s_*`` fields from per-request waits (nan: no claim asked for)."""
    w = waits[~np.isnan(waits)]
    if not w.size:
        return {}
    return dict(staging_wait_s_mean=float(w.mean()), staging_wait_s_p95=float(np.percentile(w, 95)),
                staging_wait_s_total=float(w.sum()))


def run_policies(instances: list) -> dict:
    """The policy objects a run used (its own copies: SimConfig deep-copies what it is given),
    per instance: ``eviction`` and ``admission`` per lower level (a shared level's one object
    appears in every instance's tuple), ``scorer`` (``None`` without token compression)."""
    return {"eviction": tuple(tuple(t.policy for t in i.hier.tiers) for i in instances),
            "admission": tuple(tuple(i.hier.admission) for i in instances),
            "scorer": tuple(i.compressor.scorer if i.compressor is not None else None for i in instances)}


def latency_metrics(cfg, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, out_len: np.ndarray,
                    span: float) -> dict:
    """The :class:`SimResult` fields every serving mode reports alike: span, load, output rate,
    TTFT and TPOT percentiles and means (per request: arrival, first token and finish times,
    output tokens)."""
    ttft = first - arrival
    multi = out_len > 1
    tpot = (finish[multi] - first[multi]) / (out_len[multi] - 1)
    return dict(
        duration_s=span, load=float(cfg.load) if cfg.load is not None else float("nan"),
        output_tokens_per_s=float(out_len.sum()) / span if span > 0 else 0.0,
        ttft_p50=float(np.percentile(ttft, 50)), ttft_p95=float(np.percentile(ttft, 95)),
        ttft_p99=float(np.percentile(ttft, 99)), ttft_mean=float(ttft.mean()),
        tpot_p50=float(np.percentile(tpot, 50)) if tpot.size else 0.0,
        tpot_p95=float(np.percentile(tpot, 95)) if tpot.size else 0.0,
        tpot_mean=float(tpot.mean()) if tpot.size else 0.0)
