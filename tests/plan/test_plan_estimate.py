"""The analytic TTFT and TPOT p95 estimates (kvmm.plan._analytic's step replay, on the run's step
clock: the default roofline model with chunked prefill) against the composed simulator on a
small trace: a single instance with private tiers and a round-robin cluster with a shared pool,
every point of the grid within 20 % on both latencies.

Measured (400 requests, load 0.8, every point of these grids): TTFT within 0.6 %, TPOT within
7.5 % (the estimate is low: it counts GPU prefix hits as an LRU of the pool's size, and the pool
also holds the running requests' blocks).  On the whole conversation trace at load 0.7 (nvme,
DRAM or a shared Layer 3.5 pool; 1 and 8 instances): TTFT within 6 % except private nvme
across 8 instances (-12 %: staging from nvme queues behind its own channel, which the estimate
stretches only by 1 / (1 - rho)), TPOT within 5 %.  See docs/plan.md."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kvmm.plan import SLO
from kvmm.plan._planner import _checked, _point, analytic_grid
from kvmm.sim import SimConfig, sweep

CASES = {
    "one instance": (1, ["dram:0-512GiB:points=4", "nvme:0-4TiB:points=4"]),
    "four instances, shared pool": (4, ["dram:0-512GiB:points=4", "layer3.5:0-8TiB:shared:points=4"]),
}
TOLERANCE = 0.2


@pytest.mark.parametrize("case", sorted(CASES))
def test_estimates_are_within_a_fifth_of_the_simulation(case):
    instances, tiers = CASES[case]
    base = SimConfig(workload="conversation", max_requests=400, load=0.8)
    _, cands, prices, base = _checked("conversation", SLO(1000.0), tiers, None, instances, None, 1, 0, base, None)
    grid = analytic_grid(base, cands, prices, instances)
    assert grid["serving"].latency_name == "roofline" and grid["clock"].chunked  # the default clock
    points = [_point(grid, j, SLO(1000.0), base, cands, prices, instances) for j in range(grid["points"])]
    with ThreadPoolExecutor(max_workers=1) as pool:
        results = sweep([p.config() for p in points], pool)
    for p, r in zip(points, results):
        assert r.tpot_p95 > 0
        assert p.est_ttft_p95_s == pytest.approx(r.ttft_p95, rel=TOLERANCE), p.capacities
        assert p.est_tpot_p95_s == pytest.approx(r.tpot_p95, rel=TOLERANCE), p.capacities
    # the capacities move both estimates the way the simulation moves
    a, b = min(zip(points, results), key=lambda x: x[0].usd_per_hour), max(zip(points, results), key=lambda x: x[1].ttft_p95)
    fast = min(zip(points, results), key=lambda x: x[1].ttft_p95)
    assert fast[1].ttft_p95 < b[1].ttft_p95 and fast[0].est_ttft_p95_s < b[0].est_ttft_p95_s
    assert a[0].est_ttft_p95_s >= fast[0].est_ttft_p95_s
