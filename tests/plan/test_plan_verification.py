"""Which points stage 2 simulates (kvmm.plan._planner.pick_for_verification): the ``verify``
cheapest estimated to meet the SLO, ``neighbours`` frontier points on each side of the estimated
SLO boundary, and dominated points filling a frontier thinner than ``verify`` (distinct estimates
first); and the ``simulated`` mapping that lets plans share their simulations."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.plan import SLO, plan, simulation_key
from kvmm.plan._planner import _checked, analytic_grid, pareto, pick_for_verification
from kvmm.sim import SimConfig


def _pick(cost, latency, bound, verify, neighbours):
    cost, latency = np.array(cost, dtype=float), np.array(latency, dtype=float)
    return pick_for_verification(cost, latency, latency <= bound, pareto(cost, latency), verify, neighbours)


def test_neighbours_on_both_sides_of_the_boundary():
    cost = [1, 2, 3, 4, 5, 6, 7, 8]
    latency = [10, 9, 8, 7, 6, 5, 4, 3]  # all on the frontier; 4.. meet a bound of 6
    assert _pick(cost, latency, 6, verify=2, neighbours=2) == [2, 3, 4, 5, 6, 7]
    assert _pick(cost, latency, 6, verify=2, neighbours=0) == [4, 5]
    assert _pick(cost, latency, 6, verify=3, neighbours=1) == [3, 4, 5, 6, 7]
    assert _pick(cost, latency, 3, verify=2, neighbours=2) == [5, 6, 7]  # nothing dearer than the last
    assert _pick(cost, latency, 10, verify=2, neighbours=2) == [0, 1, 2, 3]  # nothing cheaper than the first


def test_a_thin_frontier_is_filled_with_the_cheapest_dominated_points_that_meet():
    cost = [1, 2, 3, 3, 4, 5, 2.5]
    latency = [10, 5, 6, 7, 5.5, 9, 8]  # frontier: 0, 1; the rest dominated by 1
    # meeting latency <= 7: frontier point 1, then dominated 2 (3, 6), 3 (3, 7), 4 (4, 5.5); 6 misses
    assert _pick(cost, latency, 7, verify=3, neighbours=1) == [0, 1, 2, 3]
    assert _pick(cost, latency, 7, verify=9, neighbours=0) == [1, 2, 3, 4]  # all four that exist
    # nothing meets: the fastest frontier points, then the fastest dominated ones up to verify
    assert _pick(cost, latency, 1, verify=3, neighbours=0) == [0, 1, 4]
    assert _pick(cost, latency, 1, verify=1, neighbours=1) == [0, 1]


def test_fills_prefer_estimates_no_picked_point_has():
    cost = [1, 2, 3, 4, 5, 6, 7]
    latency = [10, 5, 5, 5, 5.5, 5, 5.5]  # frontier: 0, 1; 2, 3, 5 repeat 1's estimate, 6 repeats 4's
    assert _pick(cost, latency, 6, verify=2, neighbours=0) == [1, 4]  # not 2, the cheapest: it repeats 1
    assert _pick(cost, latency, 6, verify=3, neighbours=0) == [1, 2, 4]  # no distinct one left: repeats, cheapest first
    assert _pick(cost, latency, 6, verify=5, neighbours=0) == [1, 2, 3, 4, 5]
    assert _pick(cost, latency, 6, verify=9, neighbours=1) == [0, 1, 2, 3, 4, 5, 6]
    # another figure (a TPOT estimate, a hit share) makes equal TTFT estimates distinct
    cost_a, lat_a = np.array(cost, dtype=float), np.array(latency, dtype=float)
    other = np.array([0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1])
    front = pareto(cost_a, lat_a)
    rows = np.column_stack((lat_a, other))
    assert pick_for_verification(cost_a, lat_a, lat_a <= 6, front, 3, 0, rows) == [1, 2, 4]
    assert pick_for_verification(cost_a, lat_a, lat_a <= 6, front, 2, 0, rows) == [1, 2]
    assert pick_for_verification(cost_a, lat_a, lat_a <= 6, front, 4, 0, rows) == [1, 2, 3, 4]
    # nothing meets the bound: the fastest dominated points, distinct estimates first
    assert _pick(cost, latency, 1, verify=3, neighbours=0) == [0, 1, 4]  # 4 (5.5) before 2 (5, repeating 1)
    assert _pick(cost, latency, 1, verify=4, neighbours=0) == [0, 1, 2, 4]


def test_simulated_results_are_reused_across_plans():
    tiers = ["nvme:0-2TiB:points=6"]
    cache: dict = {}
    ticks = []
    slo = SLO(1e-3)  # nothing meets it: every candidate is simulated
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = plan("conversation", slo=slo, tiers=tiers, base=_base(), verify=2, neighbours=1, executor=pool,
                     simulated=cache)
        assert len(cache) == len(first.verified) == len({q.capacities for q in first.verified}) >= 2
        assert set(cache) == {simulation_key(q.config()) for q in first.verified}
        again = plan("conversation", slo=slo, tiers=tiers, base=_base(), verify=2, neighbours=1, executor=pool,
                     simulated=cache, progress=lambda stage, done, total: ticks.append((stage, done, total)))
        fresh = plan("conversation", slo=slo, tiers=tiers, base=_base(), verify=2, neighbours=1, executor=pool)
    n = len(first.verified)
    verify_ticks = [t for t in ticks if t[0] == "verify"]
    assert ("verify", n, n) in verify_ticks and all(done > 0 for _, done, _ in verify_ticks)  # nothing left to simulate
    assert [q.sim for q in again.verified] == [cache[simulation_key(q.config())] for q in again.verified]
    assert all(a.sim is b.sim for a, b in zip(again.verified, first.verified))  # the very objects, not re-run
    assert [q.sim_ttft_p95_s for q in fresh.verified] == [q.sim_ttft_p95_s for q in again.verified]
    assert len(cache) == n


def test_simulated_must_be_a_mapping():
    with pytest.raises(BadInputError, match="simulated must be a dict"):
        plan("conversation", slo=SLO(1.0), tiers=["nvme:0-2TiB:points=3"], base=_base(), simulated=[])


def _base() -> SimConfig:
    return SimConfig(workload="conversation", max_requests=400, load=0.8)


def _plan(tiers, slo, verify, neighbours):
    with ThreadPoolExecutor(max_workers=1) as pool:
        return plan("conversation", slo=SLO(slo), tiers=tiers, base=_base(), verify=verify, neighbours=neighbours,
                    executor=pool)


def test_plan_simulates_the_candidates_cheapest_first_and_stops_at_the_first_pass():
    tiers = ["nvme:0-2TiB:points=12"]
    probe = _plan(tiers, 1000.0, 1, 0)
    est = [p.est_ttft_p95_s for p in probe.frontier]
    assert len(est) >= 3, est
    bound = (est[0] + est[1]) / 2  # frontier points 1.. are estimated to meet it
    p = _plan(tiers, bound, 1, 1)
    f = next(i for i, q in enumerate(p.frontier) if q.meets_slo_est)  # the grid was refined: its own frontier
    candidates = p.frontier[max(f - 1, 0):f + 2]  # one cheaper neighbour, one to verify, one dearer neighbour
    assert [q.meets_slo_est for q in candidates] == [False, True, True]
    n = len(p.verified)
    assert [q.capacities for q in p.verified] == [q.capacities for q in candidates[:n]]  # cheapest first
    assert all(not q.meets_slo_sim for q in p.verified[:-1])  # it stops at the first that meets the SLO
    if p.chosen is not None:
        assert p.chosen is p.verified[-1]
        assert all(q.sim is None for q in candidates[n:])  # dearer than a passed one: never simulated
    assert all(q.on_frontier for q in p.verified)


def test_a_thin_frontier_is_filled_with_distinct_estimates():
    tiers = ["dram:0-512GiB:points=4", "nvme:0-4TiB:points=4"]
    _, cands, prices, base = _checked("conversation", SLO(1000.0), tiers, None, 1, None, 1, 0, _base(), None)
    grid = analytic_grid(base, cands, prices, 1)
    cost, lat = grid["usd_h"], grid["ttft"]
    front = pareto(cost, lat)
    assert len(front) < 4
    estimates = np.column_stack((lat, grid["tpot"], grid["hit"]))
    pick = pick_for_verification(cost, lat, lat <= 1000.0, front, 4, 1, estimates)
    assert len(pick) == 4
    order = np.lexsort((np.arange(grid["points"]), lat, cost))
    # the cheapest dominated points whose estimate (TTFT, TPOT, hit shares) no frontier point or earlier fill has
    key = lambda j: tuple(estimates[j])  # noqa: E731
    seen = {key(j) for j in front}
    expect_off = []
    for j in order.tolist():
        if j not in set(front.tolist()) and key(j) not in seen:
            seen.add(key(j))
            expect_off.append(j)
    assert len(expect_off) >= 4 - len(front)  # distinct ones exist here, so no repeats are taken
    assert sorted(j for j in pick if j not in set(front.tolist())) == sorted(expect_off[: 4 - len(front)])
    # the plan simulates those candidates cheapest first and stops at the first that meets the SLO
    p = _plan(tiers, 1000.0, 4, 1)
    cheapest = min(pick, key=lambda j: (cost[j], lat[j], j))
    assert len(p.verified) == 1 and p.chosen is p.verified[0]
    assert p.chosen.capacities == tuple(int(grid["caps"][i][grid["index"][cheapest, i]]) for i in range(len(cands)))
    assert any("not simulated" in r for r in p.reasons)
