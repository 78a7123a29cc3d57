"""``plan()``'s two stages: the analytic grid (kvmm.plan._analytic) and its verification.

1. **Analytic**: every combination of the candidates' capacity points gets hit ratios, an
   estimated TTFT p95 (and TPOT) and an hourly price (the cost account's prices: GPUs, each
   instance's staging tier and private tiers, each shared tier once).  Points above ``budget``
   (USD per hour) are dropped; the rest are pruned to the Pareto frontier of hourly cost vs
   estimated TTFT p95 (no other point is both cheaper and faster).
2. **Verified**: the ``verify`` cheapest points the estimate says meet the SLO (frontier points
   first; when the frontier has fewer, the cheapest dominated points estimated to meet it fill
   up to ``verify``, preferring estimates (TTFT, TPOT, hit shares) no picked point has: a fill
   repeating one, such as a larger pool past the trace's reuse, tells nothing new and is taken
   only when no other remains), plus ``neighbours`` frontier points on each side of the estimated SLO
   boundary: the dearest ones cheaper than the first of them (estimated to miss: the estimate
   may be pessimistic) and the cheapest frontier points dearer than those picked (the estimate
   may be optimistic: if the picked ones miss in simulation, a dearer one may meet it).  They are
   simulated as they are (``PlanPoint.config()``) through :func:`kvmm.sim.sweep`.  The cheapest
   verified point whose *simulated* p95 meets the SLO is chosen; when none does, the verified
   point nearest to it is ``closest``.  When no point is estimated to meet the SLO, the
   ``verify + neighbours`` fastest frontier points are simulated (the fastest dominated points,
   distinct estimates first, filling up to ``verify`` on a thin frontier).  A ``simulated``
   mapping (config key -> SimResult) shared across calls skips configs simulated before.

Cost ranks points by USD per hour: the workload is fixed, so USD per million tokens follows the
hourly price up to the run's duration (reported for each point, estimated and simulated).
"""

from __future__ import annotations

import math
import time
from collections.abc import MutableMapping
from dataclasses import replace
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.plan.core import GIB, SLO, Plan, PlanPoint, TierCandidate

__all__ = ["run_plan", "analytic_grid"]


def run_plan(trace: Any, *, slo: Any, tiers: Any, prices: Any, instances: int, budget: Any, verify: int,
             neighbours: int, executor: Any, base: Any, progress: Any, simulated: Any = None) -> Plan:
    slo, cands, prices, base = _checked(trace, slo, tiers, prices, instances, budget, verify, neighbours, base, progress)
    if simulated is not None and not isinstance(simulated, MutableMapping):
        raise BadInputError(f"simulated must be a dict (config key -> SimResult) or None, got {type(simulated).__name__}")
    say = progress if progress is not None else (lambda stage, done, total: None)
    t0 = time.perf_counter()
    say("analytic", 0, 1)
    grid = analytic_grid(base, cands, prices, instances)
    usd_h, ttft = grid["usd_h"], grid["ttft"]
    keep = np.flatnonzero(usd_h <= budget) if budget is not None else np.arange(usd_h.shape[0])
    if keep.size == 0:
        raise BadInputError(f"no capacity combination costs at most the budget of {budget:g} USD/hour (the cheapest "
                            f"costs {usd_h.min():.4g} USD/hour); expected a larger budget or smaller minimum capacities")
    cost, lat = usd_h[keep], ttft[keep]
    meets = lat <= slo.ttft_p95_s  # as SLO.met_by: NaN never meets it
    if slo.tpot_p95_s is not None:
        meets &= grid["tpot"][keep] <= slo.tpot_p95_s
    front = pareto(cost, lat)
    points = {int(j): _point(grid, int(keep[j]), slo, base, cands, prices, instances) for j in front}
    frontier = [points[int(j)] for j in front]
    say("analytic", 1, 1)
    t1 = time.perf_counter()
    estimates = np.column_stack((lat, grid["tpot"][keep], grid["hit"][keep]))
    pick = pick_for_verification(cost, lat, meets, front, verify, neighbours, estimates)
    picked = [points[j] if j in points else
              replace(_point(grid, int(keep[j]), slo, base, cands, prices, instances), on_frontier=False) for j in pick]
    results = _simulate([p.config() for p in picked], executor, say, simulated)
    tokens = _tokens(grid["trace"])
    for p, r in zip(picked, results):
        p.sim = r
        p.sim_ttft_p95_s = float(r.ttft_p95)
        p.sim_tpot_p95_s = float(r.tpot_p95)
        p.sim_usd_per_m_tokens = float(r.total_usd / tokens * 1e6) if tokens else math.nan
        p.meets_slo_sim = slo.met_by(p.sim_ttft_p95_s, p.sim_tpot_p95_s)
    t2 = time.perf_counter()
    verified = sorted(picked, key=lambda p: (p.usd_per_hour, p.est_ttft_p95_s))
    chosen = next((p for p in verified if p.meets_slo_sim), None)
    closest = None if chosen is not None or not verified else min(verified, key=lambda p: _shortfall(p, slo))
    reasons = _reasons(slo, chosen, closest, verified, frontier, int(keep.size), grid["points"])
    return Plan(slo=slo, chosen=chosen, closest=closest, config=chosen.config() if chosen is not None else None,
                frontier=frontier, verified=verified, points_evaluated=grid["points"], reasons=reasons,
                timings_s={"analytic": t1 - t0, "verify": t2 - t1})


# ---------------------------------------------------------------------- stage 1
def analytic_grid(base: Any, cands: tuple, prices: Any, instances: int) -> dict:
    """Stage 1 over every combination: a dict of arrays (``hit (G, T)``, ``ttft``, ``tpot``,
    ``usd_h``, ``usd_m``, ``index (G, T)``) plus what built it (``model``, ``trace``, ``caps``).
    Runtime complexity: one stack-distance pass over the trace + O(u0 u1 requests + G T)."""
    from kvmm.plan._analytic import block_stream, build_model
    from kvmm.plan._clock import replay_clock
    from kvmm.plan._configs import point_config
    from kvmm.plan._kernels import grid_kernel
    from kvmm.sim.serving import resolve_serving
    from kvmm.sim.simulator import resolve_trace

    # the simulator reads private levels before shared ones: evaluate in that order, report in the given one
    order = sorted(range(len(cands)), key=lambda i: cands[i].shared)
    if order != list(range(len(cands))):
        grid = analytic_grid(base, tuple(cands[i] for i in order), prices, instances)
        back = np.argsort(order)
        grid["hit"], grid["index"] = grid["hit"][:, back], grid["index"][:, back]
        grid["caps"] = [grid["caps"][i] for i in back]
        grid["blocks"] = [grid["blocks"][i] for i in back]
        return grid
    trace = resolve_trace(base.workload, base.max_requests)
    # what the points serve with (the tiers do not change it): the model, clock, scheduler and pool
    bare = point_config(base, cands, [0] * len(cands), instances)
    serving = resolve_serving(bare)
    clock = replay_clock(serving, trace)
    block_bytes = int(trace.block_tokens) * serving.kv_bytes_per_token
    caps = [np.asarray(c.capacities(), dtype=np.int64) for c in cands]
    blocks = [c // block_bytes for c in caps]
    types = [1 if (c.shared and instances > 1) else 0 for c in cands]
    gpu_blocks = serving.gpu_kv_bytes // block_bytes if base.gpu_prefix_cache else None
    grids = []
    for t in (0, 1):
        pts = [np.zeros(1, dtype=np.int64)] + [b for b, ty in zip(blocks, types) if ty == t]
        if t == 0 and gpu_blocks is not None:
            pts.append(np.array([gpu_blocks], dtype=np.int64))
        grids.append(np.unique(np.concatenate(pts)))
    # arrivals are rescaled for the instances the points run on (kvmm.sim.load)
    stream = block_stream(trace, serving, bare)
    model_ = build_model(stream, instances, grids, gpu_blocks, clock=clock, kv_bytes_per_token=serving.kv_bytes_per_token,
                         fast_read_bw=base.fast_tier.read_bandwidth, fast_latency=base.fast_tier.latency_s,
                         pool_blocks=serving.gpu_kv_bytes // block_bytes)
    npoints = np.array([c.shape[0] for c in caps], dtype=np.int64)
    width = int(npoints.max())
    cap_bin = np.zeros((len(cands), width), dtype=np.int64)
    usd = np.zeros((len(cands), width))
    for i, (b, ty) in enumerate(zip(blocks, types)):
        cap_bin[i, : b.shape[0]] = np.searchsorted(grids[ty], b)
        usd[i, : b.shape[0]] = tier_usd_per_hour(cands[i], caps[i], prices, instances)
    spb, lat = staging_costs(base, cands)
    st = model_.pair
    ch = [np.asarray(c, dtype=np.float64) for c in model_.hist1]
    base_usd_h = instances * (serving.gpus * gpu_price(prices, serving)
                              + _spec_usd_h(base.fast_tier, base.fast_tier.capacity_bytes, prices))
    hit, ttft, tpot, usd_h, usd_m, index = grid_kernel(
        npoints, cap_bin, np.asarray(types, dtype=np.int64), usd, spb, lat, ch[0], ch[1], model_.rect[0],
        model_.rect[1], model_.gpu_bin, model_.total_refs, st["ttft95"], st["mean_w"], st["staged_mean"],
        st["staged95"], st["end_s"], st["tpot"], model_.lam, stream.span_s, base_usd_h, float(_tokens(trace)))
    return {"hit": hit, "ttft": ttft, "tpot": tpot, "usd_h": usd_h, "usd_m": usd_m, "index": index,
            "caps": caps, "trace": trace, "serving": serving, "clock": clock, "points": int(usd_h.shape[0]),
            "blocks": blocks, "grid_model": model_, "stream": stream}


def tier_usd_per_hour(cand: TierCandidate, caps: np.ndarray, prices: Any, instances: int) -> np.ndarray:
    """Hourly price of the candidate at each capacity (x instances when private; 0 bytes: absent,
    free) with the cost account's prices (:meth:`Prices.tier_prices`).  O(points)."""
    from kvmm.tiers.spec import preset

    per_gib, per_hour = prices.tier_prices(preset(cand.kind))
    count = 1 if cand.shared else instances
    caps = np.asarray(caps, dtype=np.float64)
    return count * (caps / GIB * per_gib + np.where(caps > 0, per_hour, 0.0))


def gpu_price(prices: Any, serving: Any) -> float:
    """USD per hour of one GPU: the price list's, else the serving setup's (its hardware's)."""
    return prices.gpu_usd_per_hour if prices.gpu_usd_per_hour is not None else serving.gpu_usd_per_hour


def _spec_usd_h(spec: Any, capacity: int, prices: Any) -> float:
    per_gib, per_hour = prices.tier_prices(spec)
    return capacity / GIB * per_gib + per_hour


def staging_costs(base: Any, cands: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per staged byte and latency of each candidate as the engine stages from it:
    ``stage_efficiency x`` read bandwidth capped by the fast tier's write bandwidth; a shared
    level through the cluster's fabric link (kvmm.sim.engine.cluster)."""
    from kvmm.sim.cluster_config import ClusterConfig
    from kvmm.tiers.spec import preset

    fabric = base.cluster.fabric if base.cluster is not None else ClusterConfig().fabric
    spb, lat = np.zeros(len(cands)), np.zeros(len(cands))
    for i, c in enumerate(cands):
        spec = preset(c.kind)
        bw, latency = spec.read_bandwidth, spec.latency_s
        if c.shared and fabric is not None:
            bw, latency = min(bw, fabric.link_bandwidth), latency + fabric.latency_s
        spb[i] = 1.0 / min(bw * base.stage_efficiency, base.fast_tier.write_bandwidth)
        lat[i] = latency
    return spb, lat


def pareto(cost: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the cost-vs-latency Pareto frontier, cheapest first: each is strictly faster
    than every cheaper-or-equal point (ties in cost keep the fastest).  O(G log G)."""
    order = np.lexsort((latency, cost))
    best = np.minimum.accumulate(latency[order])
    keep = np.ones(order.shape[0], dtype=bool)
    keep[1:] = latency[order][1:] < best[:-1]
    return order[keep]


def _point(grid: dict, j: int, slo: SLO, base: Any, cands: tuple, prices: Any, instances: int) -> PlanPoint:
    """The PlanPoint of combination ``j``, priced with :func:`kvmm.sim.cost.cost_account`."""
    from kvmm.sim.cost import cost_account
    from kvmm.tiers.spec import preset

    caps = tuple(int(grid["caps"][i][grid["index"][j, i]]) for i in range(len(cands)))
    serving = grid["serving"]
    pairs = [(base.fast_tier, instances)]
    pairs += [(preset(c.kind).with_capacity(cap), 1 if c.shared else instances) for c, cap in zip(cands, caps) if cap > 0]
    account = cost_account(duration_s=3600.0, gpus=instances * serving.gpus, tiers=pairs, input_tokens=0,
                           output_tokens=0, prices=prices, gpu_usd_per_hour=serving.gpu_usd_per_hour)
    gib = {c.kind: (1 if c.shared else instances) * cap / GIB for c, cap in zip(cands, caps)}
    usd = {"gpu": account.gpu_usd, **{n: u for n, u in zip(account.tier_names, account.tier_usd)}}
    for c in cands:
        usd.setdefault(c.kind, 0.0)
    ttft, tpot = float(grid["ttft"][j]), float(grid["tpot"][j])
    return PlanPoint(capacities=caps, hit_ratio=tuple(float(h) for h in grid["hit"][j]), est_ttft_p95_s=ttft,
                     est_tpot_p95_s=tpot, usd_per_hour=account.total_usd, usd_per_m_tokens=float(grid["usd_m"][j]),
                     tier_gib=gib, tier_usd_per_hour=usd, meets_slo_est=slo.met_by(ttft, tpot), candidates=cands,
                     base=base, instances=instances)


# ---------------------------------------------------------------------- stage 2
def pick_for_verification(cost: np.ndarray, latency: np.ndarray, meets: np.ndarray, front: np.ndarray, verify: int,
                          neighbours: int, estimates: np.ndarray | None = None) -> list[int]:
    """Indices (into ``cost``, ``latency``, ``meets``: the points within the budget) of the points
    to simulate, cheapest first (see the module docstring); ``front`` is their frontier,
    cheapest first.  Dominated points filling a thin frontier are taken, in preference order,
    with an estimate that no point already picked has: ``estimates`` is a (G, k) array of what
    the analytic stage says of each point (the planner: TTFT, TPOT and the hit share per tier),
    ``latency`` alone when None; points repeating a picked row (e.g. a larger pool past the
    trace's reuse: the same hits, the same estimate) only when no distinct one remains.  Deterministic: ties in cost go to the faster point, then the
    lower index.  Runtime complexity: O(G log G)."""
    front = [int(j) for j in front]
    on_front = set(front)

    def estimate(j: int) -> tuple:
        return (float(latency[j]),) if estimates is None else tuple(float(x) for x in estimates[j])
    order = [int(j) for j in np.lexsort((np.arange(cost.shape[0]), latency, cost))]  # cheapest first
    if meets.any():
        chosen = [j for j in front if meets[j]][:verify]
        chosen += _fills([j for j in order if meets[j] and j not in on_front], verify - len(chosen), chosen, estimate)
        first = min(cost[j] for j in chosen)
        last = max(front.index(j) for j in chosen if j in on_front) if any(j in on_front for j in chosen) else -1
        cheaper = [j for j in front if cost[j] < first][-neighbours:] if neighbours else []
        dearer = [j for j in front[last + 1:] if cost[j] >= first and j not in chosen][:neighbours]
        chosen += cheaper + dearer
    else:  # nothing is estimated to meet it: the fastest points, to find the closest
        chosen = front[-(verify + neighbours):]
        fastest = [int(j) for j in np.lexsort((np.arange(cost.shape[0]), cost, latency))]
        chosen += _fills([j for j in fastest if j not in on_front], verify - len(chosen), chosen, estimate)
    return sorted(set(chosen), key=lambda j: (cost[j], latency[j], j))


def _fills(candidates: list, n: int, picked: list, estimate: Any) -> list:
    """Up to ``n`` of ``candidates`` (in their preference order): first those whose estimate
    no point picked so far (``picked``, then the fills) has, then, only when too few remain,
    the others in order.  O(len(candidates))."""
    if n <= 0:
        return []
    seen = {estimate(j) for j in picked}
    distinct, repeats = [], []
    for j in candidates:
        key = estimate(j)
        if key in seen:
            repeats.append(j)
        else:
            seen.add(key)
            distinct.append(j)
            if len(distinct) == n:
                break
    return (distinct + repeats)[:n]


def _simulate(configs: list, executor: Any, say: Any, simulated: Any = None) -> list:
    """The SimResult of every config, in order: those in ``simulated`` (keyed by
    :func:`~kvmm.plan.core.simulation_key`) reused, the others swept (each distinct config
    once) and added to it."""
    from kvmm.plan.core import simulation_key
    from kvmm.sim import sweep

    keys = [simulation_key(c) for c in configs] if simulated is not None else list(range(len(configs)))
    known = {k: simulated[k] for k in keys if k in simulated} if simulated is not None else {}
    todo: dict = {}
    for k, c in zip(keys, configs):
        if k not in known:
            todo.setdefault(k, c)
    done = [len(configs) - len(todo)]
    say("verify", done[0], len(configs))

    def tick(n: int) -> None:
        done[0] += n
        say("verify", done[0], len(configs))
    fresh = dict(zip(todo, sweep(list(todo.values()), executor, progress=tick)))
    if simulated is not None:
        simulated.update(fresh)
    known.update(fresh)
    return [known[k] for k in keys]


def _tokens(trace: Any) -> int:
    return int(np.maximum(trace.input_length, 1).sum() + np.maximum(trace.output_length, 1).sum())


def _shortfall(p: PlanPoint, slo: SLO) -> float:
    """How far a point misses the SLO: the worst ratio of simulated latency to its bound."""
    worst = p.sim_ttft_p95_s / slo.ttft_p95_s
    if slo.tpot_p95_s is not None:
        worst = max(worst, p.sim_tpot_p95_s / slo.tpot_p95_s)
    return worst


def _reasons(slo: SLO, chosen: Any, closest: Any, verified: list, frontier: list, kept: int, total: int) -> list:
    bound = f"TTFT p95 <= {slo.ttft_p95_s:g} s" + (f" and TPOT p95 <= {slo.tpot_p95_s:g} s" if slo.tpot_p95_s else "")
    out = [f"{total} capacity combinations estimated ({kept} within the budget); {len(frontier)} on the cost-vs-TTFT "
           f"frontier; {len(verified)} simulated" + (f" ({off} of them off the frontier: it has too few estimated to meet the "
           f"SLO)." if (off := sum(not p.on_frontier for p in verified)) else ".")]
    if chosen is not None:
        out.append(f"Chosen: {chosen.describe()} at {chosen.usd_per_hour:.4g} USD/hour: the cheapest simulated "
                   f"configuration that meets {bound} (simulated TTFT p95 {chosen.sim_ttft_p95_s:.3g} s, "
                   f"estimated {chosen.est_ttft_p95_s:.3g} s).")
        cheaper = [p for p in verified if p.usd_per_hour < chosen.usd_per_hour]
        if cheaper:
            out.append(f"{len(cheaper)} cheaper simulated configuration(s) miss it (best: simulated TTFT p95 "
                       f"{min(p.sim_ttft_p95_s for p in cheaper):.3g} s).")
    else:
        out.append(f"No simulated configuration meets {bound}.")
        if closest is not None:
            out.append(f"Closest: {closest.describe()} at {closest.usd_per_hour:.4g} USD/hour, simulated TTFT p95 "
                       f"{closest.sim_ttft_p95_s:.3g} s.")
    if not any(p.meets_slo_est for p in frontier):
        out.append("No combination is estimated to meet the SLO; the fastest frontier points were simulated.")
    return out


# ---------------------------------------------------------------------- input checks
def _checked(trace, slo, tiers, prices, instances, budget, verify, neighbours, base, progress):
    from kvmm.sim.cost import Prices, parse_prices
    from kvmm.sim.config import SimConfig
    from kvmm.tiers.spec import preset

    if isinstance(slo, (int, float)) and not isinstance(slo, bool):
        slo = SLO(float(slo))
    if not isinstance(slo, SLO):
        raise BadInputError(f"slo must be an SLO (e.g. SLO(ttft_p95_s=2.0)), got {type(slo).__name__}")
    if isinstance(tiers, (str, TierCandidate)):
        tiers = [tiers]
    try:
        cands = tuple(t if isinstance(t, TierCandidate) else TierCandidate.parse(t) for t in tiers)
    except TypeError:
        raise BadInputError(f"tiers must be a list of TierCandidate (or 'dram:0-4TiB' texts), got {type(tiers).__name__}") from None
    if not cands:
        raise BadInputError("no tier candidates; expected at least one, e.g. TierCandidate.parse('dram:0-4TiB')")
    kinds = [c.kind for c in cands]
    if len(set(kinds)) != len(kinds):
        raise BadInputError(f"tier kinds must be distinct, got {kinds}")
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise BadInputError(f"instances must be an integer >= 1, got {instances!r}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                               or not math.isfinite(budget) or budget <= 0):
        raise BadInputError(f"budget must be a finite number of USD per hour > 0 or None, got {budget!r}")
    for name, value, low in (("verify", verify, 1), ("neighbours", neighbours, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadInputError(f"{name} must be an integer >= {low}, got {value!r}")
    if progress is not None and not callable(progress):
        raise BadInputError("progress must be a callable(stage, done, total) or None")
    if prices is None:
        prices = base.prices if isinstance(base, SimConfig) and base.prices is not None else Prices()
    elif isinstance(prices, str):
        prices = parse_prices(prices)
    elif not isinstance(prices, Prices):
        raise BadInputError(f"prices must be a kvmm.cluster.Prices, a price text or None, got {type(prices).__name__}")
    for c in cands:
        if prices.tier_prices(preset(c.kind)) == (0.0, 0.0):
            raise BadInputError(f"no price for tier {c.kind!r} (its preset has none); expected one in prices, "
                                f"e.g. --price {c.kind}=0.004/GiBh")
    if base is None:
        base = SimConfig(workload=trace)
    elif not isinstance(base, SimConfig):
        raise BadInputError(f"base must be a SimConfig or None, got {type(base).__name__}")
    else:
        base = replace(base, workload=trace)
    if base.pd is not None:
        raise BadInputError("the planner sizes colocated instances; expected base.pd=None")
    if base.prices != prices and not (base.prices is None and prices == Prices()):
        base = replace(base, prices=prices)  # the simulations price with the planner's prices
    return slo, cands, prices, base
