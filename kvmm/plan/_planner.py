"""``plan()``'s two stages: the analytic grid (kvmm.plan._analytic) and its verification.

1. **Analytic**: every combination of the candidates' capacity points gets hit ratios, an
   estimated TTFT p95 (and TPOT) and an hourly price (the cost account's prices: GPUs, each
   instance's staging tier and private tiers, each shared tier once).  Points above ``budget``
   (USD per hour) are dropped; the rest are pruned to the Pareto frontier of hourly cost vs
   estimated TTFT p95 (no other point is both cheaper and faster).
   The capacity points are log-spaced (:meth:`TierCandidate.capacities`); then the grid is
   **refined** around the cheapest point estimated to meet the SLO: each tier gets
   ``REFINE_POINTS`` more capacities evenly spaced between that point's capacity and its grid
   neighbours (below it; above it too when another tier holds a capacity it may trade for), and
   stage 1 runs again on the refined grid, up to ``REFINE_ROUNDS`` times or until the cheapest
   point stops moving, so a cheaper feasible point between two grid points is found.  With a
   TPOT bound the frontier is over cost, TTFT and TPOT (a point slower on TTFT but faster on TPOT
   stays: :func:`kvmm.plan._verify.frontier_indices`).
2. **Verified**: the candidates are the ``verify`` cheapest points the estimate says meet the SLO
   (frontier points first; when the frontier has fewer, the cheapest dominated points estimated
   to meet it fill up to ``verify``, preferring estimates (TTFT, TPOT, hit shares) no picked
   point has: a fill repeating one, such as a larger pool past the trace's reuse, tells nothing
   new and is taken only when no other remains), plus ``neighbours`` frontier points on each side
   of the estimated SLO boundary: the dearest ones cheaper than the first of them (estimated to
   miss: the estimate may be pessimistic) and the cheapest frontier points dearer than those
   picked (the estimate may be optimistic).  When no point is estimated to meet the SLO, the
   ``verify + neighbours`` fastest frontier points are the candidates (the fastest dominated
   points, distinct estimates first, filling up to ``verify`` on a thin frontier).  They are
   simulated as they are (``PlanPoint.config()``) through :func:`kvmm.sim.sweep`, **cheapest
   first, stopping at the first that meets the SLO** (in waves of as many as the executor runs at
   once; a candidate that a cheaper simulated miss matches or beats on every bounded estimated
   latency is skipped: :func:`kvmm.plan._verify.verify_cheapest_first`).  The cheapest verified
   point whose *simulated* latencies meet the SLO is chosen; when none does, ``closest`` is the
   cheapest verified point whose shortfall is within 1 % of the smallest
   (:func:`kvmm.plan._verify.closest_point`).  A ``simulated`` mapping (config key -> SimResult)
   shared across calls skips configs simulated before.

Cost ranks points by USD per hour: the workload is fixed, so USD per million tokens follows the
hourly price up to the run's duration (reported for each point, estimated and simulated).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import MutableMapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import MAX_INSTANCES, short_repr
from kvmm.errors import BadInputError
from kvmm.plan._analytic import block_stream, build_model, stack_distances
from kvmm.plan._clock import replay_clock
from kvmm.plan._configs import point_config
from kvmm.plan._kernels import grid_kernel
from kvmm.plan._verify import (  # noqa: F401 (pareto: tests and bench import it from here)
    closest_point,
    frontier_indices,
    pareto,
    pick_for_verification,
    simulate_configs,
    verify_cheapest_first,
    workers_of,
)
from kvmm.plan.core import GIB, SLO, Plan, PlanPoint, TierCandidate, finite_number
from kvmm.plan.writers import seconds_text
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.sim.config import SimConfig
from kvmm.sim.cost import Prices, cost_account, parse_prices
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace
from kvmm.tiers.spec import preset
from kvmm.traces.mooncake import BUNDLED_TRACES

__all__ = ["run_plan", "analytic_grid", "refine_capacities", "REFINE_ROUNDS", "REFINE_POINTS"]

#: refinement rounds around the cheapest point estimated to meet the SLO (at most)
REFINE_ROUNDS = 4
#: capacities added per tier on each side of that point's capacity, per round
REFINE_POINTS = 3


def run_plan(trace: Any, *, slo: Any, tiers: Any, prices: Any, instances: int, budget: Any, verify: int,
             neighbours: int, executor: Any, base: Any, progress: Any, simulated: Any = None) -> Plan:
    slo, cands, prices, base = _checked(trace, slo, tiers, prices, instances, budget, verify, neighbours, base, progress)
    if simulated is not None and not isinstance(simulated, MutableMapping):
        raise BadInputError(f"simulated must be a dict (config key -> SimResult) or None, got {type(simulated).__name__}")
    say = progress if progress is not None else (lambda stage, done, total: None)
    t0 = time.perf_counter()
    say("analytic", 0, 1)
    cache: dict = {}
    caps = [c.capacities() for c in cands]
    grid = analytic_grid(base, cands, prices, instances, capacities=caps, cache=cache)
    for _ in range(REFINE_ROUNDS):
        target = _cheapest_meeting(grid, slo, budget)
        finer = refine_capacities(caps, grid, target, grid["block_bytes"]) if target is not None else caps
        if finer == caps:
            break
        caps = finer
        grid = analytic_grid(base, cands, prices, instances, capacities=caps, cache=cache)
    usd_h, ttft = grid["usd_h"], grid["ttft"]
    keep = np.flatnonzero(usd_h <= budget) if budget is not None else np.arange(usd_h.shape[0])
    if keep.size == 0:
        raise BadInputError(f"no capacity combination costs at most the budget of {budget:g} USD/hour (the cheapest "
                            f"costs {usd_h.min():.4g} USD/hour); expected a larger budget or smaller minimum capacities")
    cost, lat = usd_h[keep], ttft[keep]
    meets = lat <= slo.ttft_p95_s  # as SLO.met_by: NaN never meets it
    if slo.tpot_p95_s is not None:
        meets &= grid["tpot"][keep] <= slo.tpot_p95_s
    front = frontier_indices(cost, lat, grid["tpot"][keep] if slo.tpot_p95_s is not None else None)
    points = {int(j): _point(grid, int(keep[j]), slo, base, cands, prices, instances) for j in front}
    frontier = [points[int(j)] for j in front]
    say("analytic", 1, 1)
    t1 = time.perf_counter()
    estimates = np.column_stack((lat, grid["tpot"][keep], grid["hit"][keep]))
    pick = pick_for_verification(cost, lat, meets, front, verify, neighbours, estimates)
    picked = [points[j] if j in points else
              replace(_point(grid, int(keep[j]), slo, base, cands, prices, instances), on_frontier=False) for j in pick]
    verified, skipped = _verify(picked, slo, executor, say, simulated)
    tokens = _tokens(grid["trace"])
    for p in verified:
        p.sim_usd_per_m_tokens = float(p.sim.total_usd / tokens * 1e6) if tokens else math.nan
    t2 = time.perf_counter()
    chosen = next((p for p in verified if p.meets_slo_sim), None)
    closest = None if chosen is not None else closest_point(verified, slo)
    reasons = _reasons(slo, chosen, closest, verified, frontier, int(keep.size), grid["points"], skipped=skipped,
                       refined=sum(len(c) for c in caps) - sum(len(c.capacities()) for c in cands))
    return Plan(slo=slo, chosen=chosen, closest=closest, config=chosen.config() if chosen is not None else None,
                frontier=frontier, verified=verified, points_evaluated=grid["points"], reasons=reasons,
                timings_s={"analytic": t1 - t0, "verify": t2 - t1})


def _verify(picked: list, slo: SLO, executor: Any, say: Any, simulated: Any) -> tuple[list, int]:
    """Stage 2 (:func:`kvmm.plan._verify.verify_cheapest_first`) on ``executor``; with none, one
    process pool for the whole stage (its workers load the simulator's kernels once)."""
    own = None
    if executor is None and len(picked) > 1 and (os.cpu_count() or 1) > 1:
        executor = own = ProcessPoolExecutor(max_workers=min(len(picked), os.cpu_count() or 1))
    done = [0]

    def run(points: list) -> list:
        results = simulate_configs([p.config() for p in points], executor, say, simulated, done[0], len(picked))
        done[0] += len(points)
        return results
    try:
        verified, skipped = verify_cheapest_first(picked, slo, run, workers_of(executor))
    finally:
        if own is not None:
            own.shutdown()
    say("verify", len(picked), len(picked))
    return verified, skipped


def _cheapest_meeting(grid: dict, slo: SLO, budget: Any) -> int | None:
    """The grid index of the cheapest point within ``budget`` estimated to meet ``slo`` (ties:
    the faster), or None."""
    ok = grid["ttft"] <= slo.ttft_p95_s
    if slo.tpot_p95_s is not None:
        ok &= grid["tpot"] <= slo.tpot_p95_s
    if budget is not None:
        ok &= grid["usd_h"] <= budget
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    return int(idx[np.lexsort((grid["ttft"][idx], grid["usd_h"][idx]))[0]])


def refine_capacities(caps: list, grid: dict, target: int, block_bytes: int, points: int = REFINE_POINTS) -> list:
    """``caps`` (per tier, ascending capacity tuples) with ``points`` capacities added evenly
    between grid point ``target``'s capacity of each tier and the tier's next lower capacity, and
    between it and the next higher one when another tier holds more than its minimum there (a
    cheaper point may trade one tier for another).  Intervals under ``points + 1`` blocks are
    left as they are.  Runtime complexity: O(tiers x (points + capacities))."""
    at = [int(grid["index"][target, i]) for i in range(len(caps))]
    out = []
    for i, tier in enumerate(caps):
        k = at[i]
        sides = [(tier[k - 1], tier[k])] if k > 0 else []
        if k + 1 < len(tier) and any(at[j] > 0 for j in range(len(caps)) if j != i):
            sides.append((tier[k], tier[k + 1]))
        added = set(tier)
        for lo, hi in sides:
            if hi - lo >= (points + 1) * block_bytes:
                added.update(lo + (hi - lo) * j // (points + 1) for j in range(1, points + 1))
        out.append(tuple(sorted(added)))
    return out


# ---------------------------------------------------------------------- stage 1
def analytic_grid(base: Any, cands: tuple, prices: Any, instances: int, *, capacities: Any = None,
                  cache: dict | None = None) -> dict:
    """Stage 1 over every combination: a dict of arrays (``hit (G, T)``, ``ttft``, ``tpot``,
    ``usd_h``, ``usd_m``, ``index (G, T)``) plus what built it (``serving``, ``clock``,
    ``trace``, ``caps``, ``block_bytes``).  ``capacities``: per candidate, the capacities to
    combine (default: each candidate's :meth:`~kvmm.plan.TierCandidate.capacities`).  ``cache``:
    a dict kept between calls on the same base, candidates and instances (the trace, the serving
    setup, the block stream and its stack distances are computed once).  Runtime complexity:
    one stack-distance pass over the trace (none with a filled cache) + O(u0 u1 replay steps + G T)."""
    if capacities is None:
        capacities = [c.capacities() for c in cands]
    # the simulator reads private levels before shared ones: evaluate in that order, report in the given one
    order = sorted(range(len(cands)), key=lambda i: cands[i].shared)
    if order != list(range(len(cands))):
        grid = analytic_grid(base, tuple(cands[i] for i in order), prices, instances,
                             capacities=[capacities[i] for i in order], cache=cache)
        back = np.argsort(order)
        grid["hit"], grid["index"] = grid["hit"][:, back], grid["index"][:, back]
        grid["caps"] = [grid["caps"][i] for i in back]
        grid["blocks"] = [grid["blocks"][i] for i in back]
        return grid
    cache = {} if cache is None else cache
    if "stream" not in cache:
        trace = resolve_trace(base.workload, base.max_requests)
        # what the points serve with (the tiers do not change it): the model, clock, scheduler and pool
        bare = point_config(base, cands, [0] * len(cands), instances)
        serving = resolve_serving(bare)
        # arrivals are rescaled for the instances the points run on (kvmm.sim.load)
        stream = block_stream(trace, serving, bare)
        cache.update(trace=trace, serving=serving, clock=replay_clock(serving, trace), stream=stream,
                     distances=stack_distances(stream, instances))
    trace, serving, clock, stream = cache["trace"], cache["serving"], cache["clock"], cache["stream"]
    block_bytes = int(trace.block_tokens) * serving.kv_bytes_per_token
    caps = [np.asarray(c, dtype=np.int64) for c in capacities]
    blocks = [c // block_bytes for c in caps]
    types = [1 if (c.shared and instances > 1) else 0 for c in cands]
    gpu_blocks = serving.gpu_kv_bytes // block_bytes if base.gpu_prefix_cache else None
    grids = []
    for t in (0, 1):
        pts = [np.zeros(1, dtype=np.int64)] + [b for b, ty in zip(blocks, types) if ty == t]
        if t == 0 and gpu_blocks is not None:
            pts.append(np.array([gpu_blocks], dtype=np.int64))
        grids.append(np.unique(np.concatenate(pts)))
    model_ = build_model(stream, instances, grids, gpu_blocks, clock=clock, kv_bytes_per_token=serving.kv_bytes_per_token,
                         fast_read_bw=base.fast_tier.read_bandwidth, fast_latency=base.fast_tier.latency_s,
                         pool_blocks=serving.gpu_kv_bytes // block_bytes, distances=cache["distances"])
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
            "blocks": blocks, "grid_model": model_, "stream": stream, "block_bytes": block_bytes}


def tier_usd_per_hour(cand: TierCandidate, caps: np.ndarray, prices: Any, instances: int) -> np.ndarray:
    """Hourly price of the candidate at each capacity (x instances when private; 0 bytes: absent,
    free) with the cost account's prices (:meth:`Prices.tier_prices`).  O(points)."""
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


def _point(grid: dict, j: int, slo: SLO, base: Any, cands: tuple, prices: Any, instances: int) -> PlanPoint:
    """The PlanPoint of combination ``j``, priced with :func:`kvmm.sim.cost.cost_account`."""
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


def _tokens(trace: Any) -> int:
    return int(np.maximum(trace.input_length, 1).sum() + np.maximum(trace.output_length, 1).sum())


def _reasons(slo: SLO, chosen: Any, closest: Any, verified: list, frontier: list, kept: int, total: int, *,
             skipped: int = 0, refined: int = 0) -> list:
    """The plan's reasons, one sentence each.  A latency is printed so that it never reads as
    meeting a bound it misses (:func:`seconds_text`)."""
    t_bound, p_bound = slo.ttft_p95_s, slo.tpot_p95_s
    bound = f"TTFT p95 <= {t_bound:g} s" + (f" and TPOT p95 <= {p_bound:g} s" if p_bound else "")
    front = "cost-vs-TTFT-and-TPOT" if p_bound else "cost-vs-TTFT"
    out = [f"{total} capacity combinations estimated ({kept} within the budget"
           + (f"; the grid refined with {refined} capacities around the cheapest point estimated to meet the SLO"
              if refined else "") + f"); {len(frontier)} on the {front} frontier; {len(verified)} simulated"
           + (f" ({off} of them off the frontier: it has too few estimated to meet the SLO)"
              if (off := sum(not p.on_frontier for p in verified)) else "")
           + (f", cheapest first: {skipped} candidate(s) not simulated (dearer than one that met the SLO, or estimated "
              "no faster than a cheaper one that missed it)" if skipped else "") + "."]

    def latencies(p: Any) -> str:
        text = f"simulated TTFT p95 {seconds_text(p.sim_ttft_p95_s, t_bound)} s"
        if p_bound:
            text += f", TPOT p95 {seconds_text(p.sim_tpot_p95_s, p_bound)} s"
        return text
    if chosen is not None:
        out.append(f"Chosen: {chosen.describe()} at {chosen.usd_per_hour:.4g} USD/hour: the cheapest simulated "
                   f"configuration that meets {bound} ({latencies(chosen)}, estimated "
                   f"{seconds_text(chosen.est_ttft_p95_s, t_bound)} s).")
        cheaper = [p for p in verified if p.usd_per_hour < chosen.usd_per_hour]
        if cheaper:
            best = min(cheaper, key=lambda p: p.sim_ttft_p95_s)
            out.append(f"{len(cheaper)} cheaper simulated configuration(s) miss it (best: {latencies(best)}).")
    else:
        out.append(f"No simulated configuration meets {bound}.")
        if closest is not None:
            out.append(f"Closest: {closest.describe()} at {closest.usd_per_hour:.4g} USD/hour, {latencies(closest)} "
                       "(the cheapest of the simulated points nearest the SLO).")
    if not any(p.meets_slo_est for p in frontier):
        out.append("No combination is estimated to meet the SLO; the fastest frontier points were simulated.")
    line = overload_line(verified)
    if line:
        out.append(line)
    return out


def overload_line(verified: list) -> str | None:
    """One sentence when the plan's runs are overloaded: a simulated run whose queue grew as the
    simulator's :class:`~kvmm.sim.engine.QueueGrowthWarning` says (a tenth of an instance's
    requests, at least 50, waiting at once; the worst run is named).  None otherwise.
    O(verified points)."""
    worst = None
    for p in verified:
        r = p.sim
        if r is None:
            continue
        per = max(r.requests // max(r.instances, 1), 1)
        if per >= 200 and r.max_waiting > max(50, per // 10) and (worst is None or r.max_waiting > worst[0]):
            worst = (r.max_waiting, per, p)
    if worst is not None:
        waiting, per, p = worst
        return (f"Overloaded: in the simulation of {p.describe()} the queue reached {waiting:,} waiting requests of "
                f"{per:,} per instance, so TTFT measures the backlog, not the hierarchy (lower the load or add "
                "instances).")
    return None


# ---------------------------------------------------------------------- input checks
def _resolved(trace: Any) -> Any:
    """A trace file given by a relative path, as an absolute one (so the written config.json
    replays from any folder); bundled names, absolute paths and trace objects as they are."""
    if isinstance(trace, str) and trace in BUNDLED_TRACES:
        return trace
    if isinstance(trace, (str, os.PathLike)) and Path(trace).is_file():
        return str(Path(trace).resolve())
    return trace


def _checked(trace, slo, tiers, prices, instances, budget, verify, neighbours, base, progress):
    if isinstance(slo, (int, float)) and not isinstance(slo, bool):
        slo = SLO(slo)  # SLO checks the number (an int beyond float range included)
    if not isinstance(slo, SLO):
        raise BadInputError(f"slo must be an SLO (e.g. SLO(ttft_p95_s=2.0)), got {type(slo).__name__}")
    if isinstance(tiers, (str, TierCandidate)):
        tiers = [tiers]
    try:
        cands = tuple(t if isinstance(t, TierCandidate) else TierCandidate.parse(t) for t in tiers)
    except TypeError:
        raise BadInputError(f"tiers must be a list of TierCandidate (or 'dram:0-4TiB' texts), got "
                            f"{type(tiers).__name__}") from None
    if not cands:
        raise BadInputError("no tier candidates; expected at least one, e.g. TierCandidate.parse('dram:0-4TiB')")
    kinds = [c.kind for c in cands]
    if len(set(kinds)) != len(kinds):
        raise BadInputError(f"tier kinds must be distinct, got {kinds}")
    if isinstance(instances, bool) or not isinstance(instances, int) or not 1 <= instances <= MAX_INSTANCES:
        raise BadInputError(f"instances must be an integer in [1, {MAX_INSTANCES}], got {short_repr(instances)}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                               or not finite_number(budget) or budget <= 0):
        raise BadInputError(f"budget must be a finite number of USD per hour > 0 or None, got {short_repr(budget)}")
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
    trace = _resolved(trace)
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
