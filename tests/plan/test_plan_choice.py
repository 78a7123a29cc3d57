"""plan() end to end on a small trace: the chosen point meets the SLO in its own simulation and
no cheaper verified point does; with no point meeting it the answer is chosen=None, closest set."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kvmm.plan import SLO, Plan, plan
from kvmm.sim import SimConfig, simulate

TIERS = ("dram:0-512GiB:points=4", "nvme:0-4TiB:points=4")


def _base() -> SimConfig:
    return SimConfig(workload="conversation", max_requests=400, load=0.8)


def _plan(slo: float, **kw) -> Plan:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return plan("conversation", slo=SLO(slo), tiers=list(TIERS), base=_base(), verify=4, neighbours=2,
                    executor=pool, **kw)


@pytest.fixture(scope="module")
def loose() -> Plan:
    return _plan(1000.0)


def test_loose_slo_picks_the_cheapest_frontier_point(loose):
    assert loose.points_evaluated == 16
    assert loose.chosen is loose.verified[0] and loose.chosen.meets_slo_sim
    assert loose.chosen is loose.frontier[0]  # everything meets it: the cheapest point wins
    costs = [p.usd_per_hour for p in loose.frontier]
    assert costs == sorted(costs)
    ttfts = [p.est_ttft_p95_s for p in loose.frontier]
    assert all(a > b for a, b in zip(ttfts, ttfts[1:]))  # a frontier: dearer means faster
    assert set(loose.timings_s) == {"analytic", "verify"}
    assert len(loose.errors()) == len(loose.verified)


@pytest.fixture(scope="module")
def tight() -> Plan:
    return _plan(1e-3)  # nothing meets it: every candidate is simulated


def test_chosen_meets_the_slo_and_no_cheaper_verified_point_does(tight):
    sims = sorted({p.sim_ttft_p95_s for p in tight.verified})
    assert len(sims) >= 2, sims
    slo = (sims[0] + sims[1]) / 2  # met by some simulated points, not by all
    p = _plan(slo)
    assert p.chosen is not None and p.closest is None
    assert p.chosen.sim_ttft_p95_s <= slo and p.chosen.meets_slo_sim
    for q in p.verified:
        if q.usd_per_hour < p.chosen.usd_per_hour:
            assert q.sim_ttft_p95_s > slo and q.meets_slo_sim is False
        assert q.usd_per_hour <= p.chosen.usd_per_hour  # nothing dearer than the chosen one is simulated
    again = simulate(p.config)  # the plan's config replays as it is
    assert again.ttft_p95 == p.chosen.sim_ttft_p95_s
    assert p.config == p.chosen.config()


def test_no_configuration_meets_the_slo_is_an_answer(tight):
    p = tight
    assert p.chosen is None and p.config is None
    assert p.closest is not None and p.closest in p.verified
    best = min(q.sim_ttft_p95_s for q in p.verified)
    assert p.closest.sim_ttft_p95_s <= best * 1.01  # among the nearest ...
    near = [q for q in p.verified if q.sim_ttft_p95_s <= best * 1.01]
    assert all(q.usd_per_hour >= p.closest.usd_per_hour for q in near)  # ... the cheapest
    assert any("No simulated configuration meets" in r for r in p.reasons)


def test_budget_drops_dearer_points(loose):
    cap = loose.frontier[0].usd_per_hour * 1.000001
    p = _plan(1000.0, budget=cap)
    assert all(q.usd_per_hour <= cap for q in p.frontier)
    assert len(p.frontier) == 1


def test_hourly_price_is_the_simulators_cost_account(loose):
    for p in loose.verified:
        r = p.sim
        assert r.total_usd / (r.duration_s / 3600.0) == pytest.approx(p.usd_per_hour, rel=1e-9)
        assert sum(p.tier_usd_per_hour.values()) == pytest.approx(p.usd_per_hour, rel=1e-12)
        assert p.sim_usd_per_m_tokens == pytest.approx(
            r.total_usd / (r.cost.input_tokens + r.cost.output_tokens) * 1e6, rel=1e-12)
