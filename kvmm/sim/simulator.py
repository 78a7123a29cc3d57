"""``simulate(SimConfig) -> SimResult``: a trace replayed through a hierarchy composed from kvmm.

The engine (:mod:`kvmm.sim.engine`) schedules requests over a :class:`~kvmm.sim.hierarchy.Hierarchy`
(GPU ``BlockAllocator`` + ``ManagedTier`` lower tiers + admission policies) and stages lower-tier
hits through a ``StagingPolicy`` and the ``CommitmentLedger``; with ``pd=PDConfig(...)`` prefill
and decode run on separate instances joined by a link (:mod:`kvmm.sim.pd`).  Arrivals are rescaled to the target
``load`` (:mod:`kvmm.sim.load`).  Everything is deterministic: same config -> same result.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

import numpy as np

from kvmm.errors import BadInputError
from kvmm.policies.ledger import CommitmentLedger
from kvmm.sim.config import GiB, PDConfig, SimConfig, TierLevel
from kvmm.sim.engine import Engine, QueueGrowthWarning
from kvmm.sim.load import arrival_times
from kvmm.sim.models import model as resolve_model
from kvmm.sim.workload import Workload
from kvmm.traces.formats import load_trace
from kvmm.traces.mooncake import MooncakeTrace, resolve_trace_path
from kvmm.traces.trace import NO_REQUESTS

__all__ = ["SimConfig", "SimResult", "TierLevel", "PDConfig", "simulate", "GiB", "QueueGrowthWarning"]


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
    # the cost account (kvmm.cluster.cost; prices: SimConfig.prices or the documented defaults)
    gpu_hours: float = 0.0
    tier_gib_hours: tuple = ()  # capacity account: per priced tier (cost.tier_names), GiB x hours provisioned
    total_usd: float = 0.0
    usd_per_million_input_tokens: float = 0.0
    usd_per_million_output_tokens: float = 0.0
    tokens_per_s_per_usd: float = 0.0  # tokens/s per USD/h of spend
    cost: Any = None  # the whole kvmm.cluster.CostAccount
    busy_seconds: Any = None  # (prefill, decode) GPU-busy seconds summed over instances (None: not tracked)
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

    def as_dict(self) -> dict:
        """The metrics (every field but ``policies``) as a plain dict."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "policies"}


def _plain(value: Any) -> Any:
    return asdict(value) if hasattr(value, "__dataclass_fields__") else value


def simulate(config: SimConfig, *, progress: Callable[[int], None] | None = None,
             ledger_factory: Callable[..., Any] | None = None, engine_hook: Callable[[Any], None] | None = None) -> SimResult:
    """Run one simulation; ``progress(n)`` is called with the number of newly finished requests.

    ``ledger_factory(capacity_bytes, sources, **kw)`` replaces :class:`CommitmentLedger` (e.g. the
    plain-Python reference); ``engine_hook(engine)`` is called with each finished engine (tests
    inspect its hierarchy).  Warns once (:class:`QueueGrowthWarning`) when the queue grows without
    bound.  Runtime complexity: O(events x (queue + open claims) + blocks x tiers).
    """
    if not isinstance(config, SimConfig):
        raise BadInputError(f"simulate expects a SimConfig, got {type(config).__name__}")
    trace = resolve_trace(config.workload, config.max_requests)
    m = resolve_model(config.model)
    arrival = arrival_times(trace, m, config)
    factory = ledger_factory or CommitmentLedger
    if config.pd is not None:
        from kvmm.sim.pd import simulate_pd

        return priced(config, m, trace, simulate_pd(config, m, trace, arrival, progress))
    if config.cluster is not None:
        from kvmm.cluster.sim import simulate_cluster

        return priced(config, m, trace, simulate_cluster(config, m, trace, arrival, factory, progress, engine_hook))
    engines, end = [], 0.0
    for i in range(config.instances):  # requests dealt round-robin, one engine each
        if config.instances == 1:
            eng = Engine(config, m, trace, arrival, factory, progress)
        else:
            idx = np.arange(i, trace.num_requests, config.instances)
            eng = Engine(config, m, subset(trace, idx), arrival[idx], factory, progress)
        end = max(end, eng.run())
        eng.warn_if_unbounded()
        if engine_hook is not None:
            engine_hook(eng)
        engines.append(eng)
    return priced(config, m, trace, collect(config, m, engines, trace, arrival, end))


def priced(cfg: SimConfig, m: Any, trace: MooncakeTrace, result: SimResult) -> SimResult:
    """``result`` with its cost account (:func:`kvmm.cluster.cost.cost_account`): every GPU for
    the run's duration; each instance's protected staging tier and private lower tiers, and each
    shared tier once, priced as provisioned (their full capacity, for the whole run); the bill
    split between input and output tokens by the GPU-busy time of prefill and decode."""
    from dataclasses import replace

    from kvmm.cluster.cost import cost_account

    gpus = cfg.pd.instances if cfg.pd is not None else result.instances
    shared = cfg.cluster.shared_tiers if cfg.cluster is not None else ()
    tiers = [(cfg.fast_tier, gpus)] + [(lv.spec, gpus) for lv in cfg.tiers] + [(lv.spec, 1) for lv in shared]
    tiers = _distinct_names(tiers, cfg.prices)
    busy = result.busy_seconds if result.busy_seconds is not None else (None, None)
    account = cost_account(duration_s=result.duration_s, gpus=gpus, tiers=tiers,
                           input_tokens=int(np.maximum(trace.input_length, 1).sum()),
                           output_tokens=int(np.maximum(trace.output_length, 1).sum()),
                           protected_byte_seconds=result.protected_byte_seconds, prices=cfg.prices,
                           gpu_usd_per_hour=m.gpu_usd_per_hour, prefill_gpu_seconds=busy[0], decode_gpu_seconds=busy[1])
    return replace(result, gpu_hours=account.gpu_hours, tier_gib_hours=account.tier_gib_hours,
                   total_usd=account.total_usd, usd_per_million_input_tokens=account.usd_per_million_input_tokens,
                   usd_per_million_output_tokens=account.usd_per_million_output_tokens,
                   tokens_per_s_per_usd=account.tokens_per_s_per_usd, cost=account)


def _distinct_names(tiers: list, prices: Any) -> list:
    """Tiers of one name priced apart (a private and a shared "dram"): later ones get ``#2``, ...
    with the price the name would have had (an override in ``prices`` included)."""
    from dataclasses import replace

    from kvmm.cluster.cost import Prices

    prices = prices or Prices()
    seen: dict[str, int] = {}
    out = []
    for spec, count in tiers:
        k = seen[spec.name] = seen.get(spec.name, 0) + 1
        if k > 1:
            per_gib, per_hour = prices.tier_prices(spec)
            spec = replace(spec, name=f"{spec.name}#{k}", usd_per_gib_hour=per_gib, usd_per_hour=per_hour)
        out.append((spec, count))
    return out


def collect(cfg: SimConfig, m, engines: list, trace: MooncakeTrace, arrival: np.ndarray, end: float) -> SimResult:
    """The metrics of finished engines (several instances are pooled)."""
    # each engine's own requests (a cluster's engines hold every request's columns, and serve some)
    mine = [slice(None) if len(e.arrival_ids) == e.n else np.asarray(e.arrival_ids, dtype=np.int64) for e in engines]
    arr = np.concatenate([e.arrival[s] for e, s in zip(engines, mine)])
    first = np.concatenate([e.first_token[s] for e, s in zip(engines, mine)])
    fin = np.concatenate([e.finish[s] for e, s in zip(engines, mine)])
    out_len = np.concatenate([e.output_len[s] for e, s in zip(engines, mine)])
    high = np.concatenate([e.priority_class[s] for e, s in zip(engines, mine)]) == 0
    n = trace.num_requests
    prompt = float(np.maximum(trace.input_length, 1).sum())
    span = end - float(arrival.min()) if n else 0.0
    wt = [e for e in engines if e.write_through]
    if wt:
        bs = sum(e.fast_lru.byte_seconds for e in wt)
        peak = max(e.fast_lru.peak for e in wt)
    else:
        bs = sum(float(e.ledger.released_byte_seconds) for e in engines)
        peak = max(int(e.ledger.peak_protected_bytes) for e in engines)
    stats = [e.hier.pool.stats for e in engines]
    tiers = len(engines[0].levels)
    # a shared level is one tier object in every engine's hierarchy: count its evictions once
    tier_objects = [{id(e.hier.tiers[i]): e.hier.tiers[i] for e in engines} for i in range(tiers)]
    label = cfg.label or f"{m.name}/{cfg.policy}"
    return SimResult(
        label=label, policy=cfg.policy, model=m.name, requests=n, **latency_metrics(cfg, arr, first, fin, out_len, span),
        ttft_p95_high_priority=float(np.percentile((first - arr)[high], 95)) if high.any() else 0.0,
        high_priority_requests=int(high.sum()),
        protected_byte_seconds=bs, protected_byte_seconds_per_request=bs / n,
        peak_protected_bytes=int(peak), fast_tier_bytes=int(cfg.fast_tier.capacity_bytes),
        claims=sum(e.claims_made for e in engines),
        ready_in_time=sum(int(e.ledger.stats["ready_in_time"]) for e in engines),
        ready_late=sum(int(e.ledger.stats["ready_late"]) for e in engines),
        claims_cancelled=sum(e.claims_cancelled for e in engines),
        claims_recomputed=sum(e.claims_recomputed for e in engines),
        slow_hit_token_share=sum(e.slow_hit_tokens for e in engines) / prompt,
        gpu_hit_token_share=sum(e.gpu_hit_tokens for e in engines) / prompt,
        gpu_pool_blocks=int(engines[0].hier.num_blocks),
        gpu_lookup_hits=sum(int(s["hits"]) for s in stats), gpu_lookup_queries=sum(int(s["queries"]) for s in stats),
        tier_block_hits=tuple(int(sum(e.hier.tier_hits[i] for e in engines)) for i in range(tiers)),
        tier_blocks_offered=tuple(int(sum(e.hier.tier_offered[i] for e in engines)) for i in range(tiers)),
        tier_evictions=tuple(int(sum(t.evictions for t in tier_objects[i].values())) for i in range(tiers)),
        demoted_blocks=tuple(int(sum(e.hier.demoted[i] for e in engines)) for i in range(tiers)),
        instances=len(engines), requests_per_instance=tuple(len(e.arrival_ids) for e in engines),
        steps=sum(e.steps for e in engines), max_waiting=max(e.max_waiting for e in engines),
        max_running=max(e.max_running for e in engines),
        tokens_evicted=sum(e.compressor.tokens_evicted for e in engines if e.compressor is not None),
        policies=run_policies(engines),
        busy_seconds=(sum(e.prefill_busy_s for e in engines), sum(e.decode_busy_s for e in engines)),
        **staging_wait_metrics(np.concatenate([staging_waits(e)[s] for e, s in zip(engines, mine)])))


def staging_waits(engine) -> np.ndarray:
    """Per request of ``engine``: seconds from its first ``need`` to its staged KV being ready
    (0 when ready before; nan when it never waited on a claim).  See ``SimResult.staging_wait_s_*``."""
    return np.maximum(engine.kv_ready_at - engine.need_at, 0.0)


def staging_wait_metrics(waits: np.ndarray) -> dict:
    """The ``staging_wait_s_*`` fields from per-request waits (nan: no claim asked for)."""
    w = waits[~np.isnan(waits)]
    if not w.size:
        return {}
    return dict(staging_wait_s_mean=float(w.mean()), staging_wait_s_p95=float(np.percentile(w, 95)),
                staging_wait_s_total=float(w.sum()))


def run_policies(engines: list) -> dict:
    """The policy objects a run used (its own copies: SimConfig deep-copies what it is given),
    per instance: ``eviction`` and ``admission`` per lower level (a shared level's one object
    appears in every instance's tuple), ``scorer`` (``None`` without token compression)."""
    return {"eviction": tuple(tuple(t.policy for t in e.hier.tiers) for e in engines),
            "admission": tuple(tuple(e.hier.admission) for e in engines),
            "scorer": tuple(e.compressor.scorer if e.compressor is not None else None for e in engines)}


def latency_metrics(cfg: SimConfig, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, out_len: np.ndarray,
                    span: float) -> dict:
    """The :class:`SimResult` fields every serving mode reports alike: span, load, output rate,
    TTFT and TPOT percentiles (per request: arrival, first token and finish times, output tokens)."""
    ttft = first - arrival
    multi = out_len > 1
    tpot = (finish[multi] - first[multi]) / (out_len[multi] - 1)
    return dict(
        duration_s=span, load=float(cfg.load) if cfg.load is not None else float("nan"),
        output_tokens_per_s=float(out_len.sum()) / span if span > 0 else 0.0,
        ttft_p50=float(np.percentile(ttft, 50)), ttft_p95=float(np.percentile(ttft, 95)),
        ttft_p99=float(np.percentile(ttft, 99)), ttft_mean=float(ttft.mean()),
        tpot_p50=float(np.percentile(tpot, 50)) if tpot.size else 0.0,
        tpot_p95=float(np.percentile(tpot, 95)) if tpot.size else 0.0)


def resolve_trace(workload: Any, max_requests: int | None) -> MooncakeTrace:
    """The workload as a trace (first ``max_requests`` requests)."""
    if isinstance(workload, Workload):
        trace = workload.trace()
    elif isinstance(workload, MooncakeTrace):
        trace = workload
    else:  # a bundled name or a file of any format load_trace reads; it says clearly when it is neither
        trace = _load_cached(workload)
    if trace.num_requests == 0:
        raise BadInputError(NO_REQUESTS)  # as `kvmm mrc` says it
    if max_requests is not None:
        trace = trace.head(max_requests)  # views of the first requests' arrays, no copy
    return trace


def _load_cached(workload: Any) -> MooncakeTrace:
    """``load_trace(workload)``, parsed once per process: sweeps and repeated runs replay the same
    file many times, and parsing it (~70 ms for the 12k-request conversation trace) would cost
    as much as a tenth of a replay.  The cached trace's arrays are read-only, so no run can
    change what the next one reads; a file changed on disk (size or mtime) is parsed again."""
    try:
        path, _ = resolve_trace_path(workload)
        stat = path.stat()
    except (BadInputError, OSError):
        return load_trace(workload)  # which says clearly what is wrong with it
    key = (str(workload), str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    trace = _TRACE_CACHE.pop(key, None)
    if trace is None:
        trace = load_trace(workload)
        for name in ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids"):
            getattr(trace, name).setflags(write=False)
    _TRACE_CACHE[key] = trace  # most recently used last
    while len(_TRACE_CACHE) > _TRACE_CACHE_SIZE:
        _TRACE_CACHE.popitem(last=False)
    return trace


_TRACE_CACHE: OrderedDict = OrderedDict()
_TRACE_CACHE_SIZE = 4


def subset(trace: MooncakeTrace, idx: np.ndarray) -> MooncakeTrace:
    """The requests ``idx`` of ``trace`` (in that order) as a trace of their own."""
    lengths = np.diff(trace.block_offsets)[idx]
    offsets = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = trace.block_offsets[idx]
    take = (np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))) if idx.size else np.zeros(0, np.int64)
    return MooncakeTrace(
        name=f"{trace.name}[subset]", timestamp_ms=trace.timestamp_ms[idx], input_length=trace.input_length[idx],
        output_length=trace.output_length[idx], block_offsets=offsets, block_ids=trace.block_ids[take],
        bad_lines=trace.bad_lines, block_tokens=int(trace.block_tokens))
