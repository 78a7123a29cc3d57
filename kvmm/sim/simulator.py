"""``simulate(SimConfig) -> SimResult``: a trace replayed through a hierarchy composed from kvmm.

An instance (:mod:`kvmm.sim.engine`) schedules requests over a :class:`~kvmm.sim.hierarchy.Hierarchy`
(GPU ``BlockAllocator`` + ``ManagedTier`` lower tiers + admission policies) and stages lower-tier
hits through a ``StagingPolicy`` and the ``CommitmentLedger``; with ``pd=PDConfig(...)`` prefill
and decode run on separate instances joined by a link (:mod:`kvmm.sim.engine.pd`).  Arrivals are rescaled to the target
``load`` (:mod:`kvmm.sim.load`).  Everything is deterministic: same config -> same result.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from kvmm.errors import BadInputError, RunWarning
from kvmm.policies.staging.ledger import CommitmentLedger
from kvmm.sim.config import GiB, PDConfig, SimConfig, TierLevel
from kvmm.sim.cost import Prices, cost_account
from kvmm.sim.engine.cluster import simulate_cluster
from kvmm.sim.engine.instance import Instance, QueueGrowthWarning
from kvmm.sim.engine.pd import simulate_pd
from kvmm.sim.engine.requests import RequestTable
from kvmm.sim.load import arrival_times
from kvmm.sim.results import SimResult, collect, latency_metrics, prompt_tokens, staging_wait_metrics  # noqa: F401 (re-exported)
from kvmm.sim.serving import resolve_serving
from kvmm.sim.workload import Workload
from kvmm.traces.formats import load_trace
from kvmm.traces.mooncake import resolve_trace_path
from kvmm.traces.trace import NO_REQUESTS, KVTrace

__all__ = ["SimConfig", "SimResult", "TierLevel", "PDConfig", "simulate", "GiB", "QueueGrowthWarning"]


def simulate(config: SimConfig, *, progress: Callable[[int], None] | None = None,
             ledger_factory: Callable[..., Any] | None = None, engine_hook: Callable[[Any], None] | None = None) -> SimResult:
    """Run one simulation; ``progress(n)`` is called with the number of newly finished requests.

    ``ledger_factory(capacity_bytes, sources, **kw)`` replaces :class:`CommitmentLedger` (e.g. the
    plain-Python reference); ``engine_hook(instance)`` is called with each finished instance
    (:class:`~kvmm.sim.engine.Instance`; tests inspect its hierarchy).  Warns once
    (:class:`QueueGrowthWarning`) when the queue grows without bound.  Runtime complexity:
    O(events x (queue + open claims) + blocks x tiers).
    """
    if not isinstance(config, SimConfig):
        raise BadInputError(f"simulate expects a SimConfig, got {type(config).__name__}")
    trace = resolve_trace(config.workload, config.max_requests)
    serving = resolve_serving(config)
    arrival = arrival_times(trace, serving, config)
    factory = ledger_factory or CommitmentLedger
    if config.pd is not None:
        result = simulate_pd(config, serving, trace, arrival, progress)
    elif config.cluster is not None:
        result = simulate_cluster(config, serving, trace, arrival, factory, progress, engine_hook)
    else:
        result = _simulate_dealt(config, serving, trace, arrival, factory, progress, engine_hook)
    return warned(config, priced(config, serving, trace, result))


def _simulate_dealt(config: SimConfig, serving: Any, trace: KVTrace, arrival: np.ndarray, factory: Callable,
                    progress: Callable | None, engine_hook: Callable | None) -> SimResult:
    """``config.instances`` independent instances, the requests dealt round-robin, one instance each."""
    instances, tables, end = [], [], 0.0
    for i in range(config.instances):
        if config.instances == 1:
            table = RequestTable(trace, arrival, priority_share=config.high_priority_share,
                                 priority_seed=config.priority_seed)
        else:
            idx = np.arange(i, trace.num_requests, config.instances)
            table = RequestTable(subset(trace, idx), arrival[idx], priority_share=config.high_priority_share,
                                 priority_seed=config.priority_seed)
        inst = Instance(config, serving, table, factory, progress, index=i)
        end = max(end, inst.run())
        inst.warn_if_unbounded()
        if engine_hook is not None:
            engine_hook(inst)
        instances.append(inst)
        tables.append(table)
    return collect(config, serving, instances, tables, arrival, end, prompt_tokens(trace))


def warned(cfg: SimConfig, result: SimResult) -> SimResult:
    """``result`` with :func:`run_warnings` in ``warnings``, each also emitted once as a
    :class:`~kvmm.errors.RunWarning` (stderr on the command line)."""
    lines = run_warnings(cfg, result)
    for line in lines:
        warnings.warn(line, RunWarning, stacklevel=3)
    return replace(result, warnings=tuple(lines)) if lines else result


def run_warnings(cfg: SimConfig, result: SimResult) -> list[str]:
    """What the run did that its config does not say: instances that got no request, prices
    that matched no tier, a router with one instance to choose from."""
    lines = []
    per = result.requests_per_instance
    idle = [i for i, n in enumerate(per) if n == 0]
    if len(per) > 1 and idle:
        name = _router_name(cfg.cluster.router) if cfg.cluster is not None else "round-robin"
        lines.append(f"{len(idle)} of {len(per)} instances got no request ({_ids(idle)}): the router ({name}) "
                     "sent every request elsewhere; a load-aware router or a load weight spreads them")
    unused = getattr(result.cost, "unused_prices", ())
    if unused:
        names = getattr(result.cost, "tier_names", ())
        lines.append(f"price for {', '.join(unused)} matches no tier of this run (its tiers: "
                     f"{', '.join(names) or 'none'}); it was not used")
    if cfg.cluster is not None and cfg.cluster.instances == 1 and cfg.pd is None:
        name = _router_name(cfg.cluster.router)
        if name != "round-robin":
            lines.append(f"router {name} routes among 1 instance: it has nothing to choose (give instances=N)")
    return lines


def _router_name(router: Any) -> str:
    return router if isinstance(router, str) else type(router).__name__


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (f", ... ({len(ids)} in all)" if len(ids) > 8 else "")


def priced(cfg: SimConfig, serving: Any, trace: KVTrace, result: SimResult) -> SimResult:
    """``result`` with its cost account (:func:`kvmm.sim.cost.cost_account`): every GPU (``tp``
    per instance) for the run's duration; each instance's protected staging tier and private lower tiers, and each
    shared tier once, priced as provisioned (their full capacity, for the whole run); the bill
    split between input and output tokens by the GPU-busy time of prefill and decode."""
    instances = cfg.pd.instances if cfg.pd is not None else result.instances
    gpus = instances * serving.gpus
    shared = cfg.cluster.shared_tiers if cfg.cluster is not None else ()
    # a staging tier and the private tiers per instance (not per GPU: tp GPUs share one host)
    tiers = [(cfg.fast_tier, instances)] + [(lv.spec, instances) for lv in cfg.tiers] + [(lv.spec, 1) for lv in shared]
    tiers = _distinct_names(tiers, cfg.prices)
    busy = result.busy_seconds if result.busy_seconds is not None else (None, None)
    account = cost_account(duration_s=result.duration_s, gpus=gpus, tiers=tiers,
                           input_tokens=int(np.maximum(trace.input_length, 1).sum()),
                           output_tokens=int(np.maximum(trace.output_length, 1).sum()),
                           protected_byte_seconds=result.protected_byte_seconds, prices=cfg.prices,
                           gpu_usd_per_hour=serving.gpu_usd_per_hour, prefill_gpu_seconds=busy[0], decode_gpu_seconds=busy[1])
    return replace(result, gpu_hours=account.gpu_hours, tier_gib_hours=account.tier_gib_hours,
                   total_usd=account.total_usd, usd_per_million_input_tokens=account.usd_per_million_input_tokens,
                   usd_per_million_output_tokens=account.usd_per_million_output_tokens,
                   tokens_per_s_per_usd=account.tokens_per_s_per_usd, cost=account)


def _distinct_names(tiers: list, prices: Any) -> list:
    """Tiers of one name priced apart (a private and a shared "dram"): later ones get ``#2``, ...
    with the price the name would have had (an override in ``prices`` included)."""
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


def resolve_trace(workload: Any, max_requests: int | None) -> KVTrace:
    """The workload as a trace (first ``max_requests`` requests)."""
    if isinstance(workload, Workload):
        trace = workload.trace()
    elif isinstance(workload, KVTrace):
        trace = workload
    else:  # a bundled name or a file of any format load_trace reads; it says clearly when it is neither
        trace = _load_cached(workload)
    if trace.num_requests == 0:
        raise BadInputError(NO_REQUESTS)  # as `kvmm mrc` says it
    if max_requests is not None:
        trace = trace.head(max_requests)  # views of the first requests' arrays, no copy
    return trace


def _load_cached(workload: Any) -> KVTrace:
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


def subset(trace: KVTrace, idx: np.ndarray) -> KVTrace:
    """The requests ``idx`` of ``trace`` (in that order) as a trace of their own."""
    lengths = np.diff(trace.block_offsets)[idx]
    offsets = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = trace.block_offsets[idx]
    take = (np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))) if idx.size else np.zeros(0, np.int64)
    return KVTrace(
        name=f"{trace.name}[subset]", timestamp_ms=trace.timestamp_ms[idx], input_length=trace.input_length[idx],
        output_length=trace.output_length[idx], block_offsets=offsets, block_ids=trace.block_ids[take],
        bad_lines=trace.bad_lines, block_tokens=int(trace.block_tokens))
