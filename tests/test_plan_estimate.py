"""The analytic TTFT and TPOT p95 estimates against the composed simulator on a small trace
(kvmm.plan._analytic's step replay): a single instance with private tiers and a round-robin
cluster with a shared pool, every verified point within 20 % on both latencies (measured on the
whole conversation trace: within 3 % TTFT, 8 % TPOT)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kvmm.plan import SLO, plan
from kvmm.sim import SimConfig

CASES = {
    "one instance": (1, ["dram:0-512GiB:points=4", "nvme:0-4TiB:points=4"]),
    "four instances, shared pool": (4, ["dram:0-512GiB:points=4", "layer3.5:0-8TiB:shared:points=4"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_estimates_are_within_a_fifth_of_the_simulation(case):
    instances, tiers = CASES[case]
    with ThreadPoolExecutor(max_workers=1) as pool:
        p = plan("conversation", slo=SLO(1000.0), tiers=tiers, instances=instances, verify=4, neighbours=2,
                 base=SimConfig(workload="conversation", max_requests=400, load=0.8), executor=pool)
    assert len(p.verified) >= 2
    for q in p.verified:
        assert q.sim_tpot_p95_s > 0
        assert q.est_ttft_p95_s == pytest.approx(q.sim_ttft_p95_s, rel=0.2), q.capacities
        assert q.est_tpot_p95_s == pytest.approx(q.sim_tpot_p95_s, rel=0.2), q.capacities
    # the capacities move both estimates the way the simulation moves
    a, b = p.verified[0], p.verified[-1]
    assert (a.est_ttft_p95_s > b.est_ttft_p95_s) == (a.sim_ttft_p95_s > b.sim_ttft_p95_s)
