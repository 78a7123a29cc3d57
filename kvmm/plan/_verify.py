"""Stage 2 of the planner: which points to simulate, in which order, and what the simulations say.

* :func:`frontier_indices`: the points no other point beats on cost and every bounded latency
  (estimated TTFT p95, and TPOT p95 when the SLO bounds it): a point dearer and slower on TTFT
  but faster on TPOT stays a candidate when TPOT is bounded.
* :func:`pick_for_verification`: the candidates (see kvmm.plan._planner's docstring).
* :func:`verify_cheapest_first`: simulates them cheapest first, in waves of as many as the
  executor runs at once, and stops at the first wave with a point that meets the SLO in
  simulation: no point dearer than a passed one is simulated after it (a wave's points dearer
  than its cheapest passing one were run beside it and are dropped).  A candidate is skipped
  when a simulated point that missed the SLO is at most as dear and estimated at least as fast on
  every bounded latency (it cannot be the answer if the estimate ranks right); one that is
  slower on TTFT but faster on TPOT is simulated when TPOT is bounded.
* :func:`closest_point`: when nothing meets the SLO, the cheapest of the simulated points whose
  shortfall is within :data:`NEAR` of the smallest.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np

from kvmm.plan.core import simulation_key
from kvmm.sim._sweep import sweep

__all__ = ["pareto", "frontier_indices", "pick_for_verification", "verify_cheapest_first", "closest_point",
           "shortfall", "NEAR", "simulate_configs", "workers_of"]

#: shortfalls within this relative margin of the smallest are "near-equal" (the closest point is
#: the cheapest of them)
NEAR = 0.01


def pareto(cost: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the cost-vs-latency Pareto frontier, cheapest first: each is strictly faster
    than every cheaper-or-equal point (ties in cost keep the fastest).  O(G log G)."""
    order = np.lexsort((latency, cost))
    best = np.minimum.accumulate(latency[order])
    keep = np.ones(order.shape[0], dtype=bool)
    keep[1:] = latency[order][1:] < best[:-1]
    return order[keep]


def frontier_indices(cost: np.ndarray, ttft: np.ndarray, tpot: np.ndarray | None = None) -> np.ndarray:
    """The frontier the planner picks from, cheapest first: :func:`pareto` on (cost, TTFT) when
    ``tpot`` is None; else the points no other point matches or beats on cost, TTFT and TPOT at
    once (of identical points the first in (cost, TTFT, TPOT, index) order).  O(G log G) plus the
    staircase's updates."""
    if tpot is None:
        return pareto(cost, ttft)
    order = np.lexsort((np.arange(cost.shape[0]), tpot, ttft, cost))
    stair_t: list = []  # the kept points' TTFTs, ascending, with their TPOTs descending
    stair_p: list = []
    keep = []
    for j in order.tolist():
        t, p = float(ttft[j]), float(tpot[j])
        i = bisect.bisect_right(stair_t, t)
        if i and stair_p[i - 1] <= p:  # a point at most as dear is at most as slow on both
            continue
        keep.append(j)
        k = i
        while k < len(stair_t) and stair_p[k] >= p:  # the new point beats these on both (from here on)
            k += 1
        del stair_t[i:k], stair_p[i:k]
        stair_t.insert(i, t)
        stair_p.insert(i, p)
    return np.asarray(keep, dtype=np.int64)


def pick_for_verification(cost: np.ndarray, latency: np.ndarray, meets: np.ndarray, front: np.ndarray, verify: int,
                          neighbours: int, estimates: np.ndarray | None = None) -> list[int]:
    """Indices (into ``cost``, ``latency``, ``meets``: the points within the budget) of the points
    to simulate, cheapest first (see kvmm.plan._planner's docstring); ``front`` is their frontier,
    cheapest first.  Dominated points filling a thin frontier are taken, in preference order,
    with an estimate that no point already picked has: ``estimates`` is a (G, k) array of what
    the analytic stage says of each point (the planner: TTFT, TPOT and the hit share per tier),
    ``latency`` alone when None; points repeating a picked row (e.g. a larger pool past the
    trace's reuse: the same hits, the same estimate) only when no distinct one remains.
    Deterministic: ties in cost go to the faster point, then the lower index.  Runtime complexity: O(G log G)."""
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


def verify_cheapest_first(points: list, slo: Any, run: Callable[[list], list], workers: int) -> tuple[list, int]:
    """Simulate ``points`` (PlanPoints) cheapest first (see the module docstring): ``run(points)``
    returns their SimResults; each simulated point gets ``sim``, its simulated latencies and
    ``meets_slo_sim``.  Returns ``(verified points cheapest first, candidates not simulated)``.
    Runtime complexity: O(P^2) comparisons plus the simulations."""
    order = sorted(points, key=lambda p: (p.usd_per_hour, p.est_ttft_p95_s))
    verified: list = []
    missed: list = []
    i = 0
    while i < len(order):
        wave = []
        while i < len(order) and len(wave) < max(1, workers):
            p = order[i]
            i += 1
            if not any(_beats(f, p, slo) for f in missed):
                wave.append(p)
        if not wave:
            break
        passed = False
        for p, r in zip(wave, run(wave)):
            if passed:
                continue  # dearer than a point of its wave that met the SLO: not the answer
            p.sim = r
            p.sim_ttft_p95_s = float(r.ttft_p95)
            p.sim_tpot_p95_s = float(r.tpot_p95)
            p.meets_slo_sim = slo.met_by(p.sim_ttft_p95_s, p.sim_tpot_p95_s)
            verified.append(p)
            passed = p.meets_slo_sim
            if not passed:
                missed.append(p)
        if passed:
            break
    return verified, len(order) - len(verified)


def _beats(f: Any, p: Any, slo: Any) -> bool:
    """Is ``f`` at most as dear as ``p`` and estimated at least as fast on every bounded latency?"""
    if f.usd_per_hour > p.usd_per_hour or f.est_ttft_p95_s > p.est_ttft_p95_s:
        return False
    return slo.tpot_p95_s is None or (f.est_tpot_p95_s is not None and p.est_tpot_p95_s is not None
                                      and f.est_tpot_p95_s <= p.est_tpot_p95_s)


def shortfall(p: Any, slo: Any) -> float:
    """How far a simulated point misses the SLO: the worst ratio of simulated latency to its bound."""
    worst = p.sim_ttft_p95_s / slo.ttft_p95_s
    if slo.tpot_p95_s is not None:
        worst = max(worst, p.sim_tpot_p95_s / slo.tpot_p95_s)
    return worst


def closest_point(verified: list, slo: Any) -> Any:
    """The closest of the simulated points when none meets the SLO: the cheapest of those whose
    :func:`shortfall` is within :data:`NEAR` (relative) of the smallest (ties: the faster).
    None when ``verified`` is empty.  O(len(verified))."""
    if not verified:
        return None
    best = min(shortfall(p, slo) for p in verified)
    near = [p for p in verified if shortfall(p, slo) <= best * (1.0 + NEAR)]
    return min(near, key=lambda p: (p.usd_per_hour, shortfall(p, slo)))


def workers_of(executor: Any) -> int:
    """How many simulations ``executor`` runs at once: a pool's ``_max_workers``, a Dask client's
    threads, else 1."""
    n = getattr(executor, "_max_workers", None)
    if isinstance(n, int) and n >= 1:
        return n
    nthreads = getattr(executor, "nthreads", None)
    if callable(nthreads):
        try:
            return max(1, int(sum(nthreads().values())))
        except Exception:  # noqa: BLE001 - any client that cannot say runs one at a time
            return 1
    return 1


def simulate_configs(configs: list, executor: Any, say: Any, simulated: Any = None, done_before: int = 0,
                     total: int | None = None) -> list:
    """The SimResult of every config, in order: those in ``simulated`` (keyed by
    :func:`~kvmm.plan.core.simulation_key`) reused, the others swept (each distinct config
    once) and added to it.  ``say("verify", done, total)`` counts from ``done_before``."""
    total = len(configs) if total is None else total
    keys = [simulation_key(c) for c in configs] if simulated is not None else list(range(len(configs)))
    known = {k: simulated[k] for k in keys if k in simulated} if simulated is not None else {}
    todo: dict = {}
    for k, c in zip(keys, configs):
        if k not in known:
            todo.setdefault(k, c)
    done = [done_before + len(configs) - len(todo)]
    say("verify", done[0], total)

    def tick(n: int) -> None:
        done[0] += n
        say("verify", done[0], total)
    fresh = dict(zip(todo, sweep(list(todo.values()), executor, progress=tick)))
    if simulated is not None:
        simulated.update(fresh)
    known.update(fresh)
    return [known[k] for k in keys]
