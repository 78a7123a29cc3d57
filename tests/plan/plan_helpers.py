"""Hand-built plans for the writer and CLI tests (no analytic pass, no simulation)."""

from __future__ import annotations

from kvmm.plan import SLO, Plan, PlanPoint, TierCandidate
from kvmm.sim.config import SimConfig

GiB = 2**30
TiB = 2**40
INSTANCES = 2
CANDIDATES = (TierCandidate.parse("dram:0-4TiB:points=3"), TierCandidate.parse("layer3.5:0-64TiB:shared:points=3"))
BASE = SimConfig(workload="conversation", max_requests=40)


def point(caps, hits, est, usd, sim=None, *, slo=2.0):
    """A point of the two candidates above; ``sim``: its simulated p95 TTFT (None: not verified)."""
    p = PlanPoint(capacities=caps, hit_ratio=hits, est_ttft_p95_s=est, est_tpot_p95_s=None, usd_per_hour=usd,
                  usd_per_m_tokens=usd / 10, tier_gib={"dram": caps[0] * INSTANCES / GiB, "layer3.5": caps[1] / GiB},
                  tier_usd_per_hour={"gpu": 7.0, "dram": usd - 8.0, "layer3.5": 1.0}, meets_slo_est=est <= slo,
                  candidates=CANDIDATES, base=BASE, instances=INSTANCES)
    if sim is not None:
        p.sim_ttft_p95_s, p.sim_usd_per_m_tokens, p.meets_slo_sim = sim, usd / 9, sim <= slo
    return p


def met_plan() -> Plan:
    """Three frontier points; the two dearer ones verified; the dearest meets the 2 s SLO in simulation."""
    a = point((0, 0), (0.0, 0.0), 5.0, 8.0)
    b = point((2 * TiB, 0), (0.4, 0.0), 1.8, 10.0, sim=2.5)
    c = point((2 * TiB, 32 * TiB), (0.4, 0.2), 1.2, 12.0, sim=1.5)
    return Plan(slo=SLO(2.0), chosen=c, closest=None, config=c.config(), frontier=[a, b, c], verified=[b, c],
                points_evaluated=9, reasons=["the cheapest verified point meeting the SLO in simulation",
                                             "dram 2 TiB alone misses it (2.5 s simulated)"],
                timings_s={"analytic": 0.25, "verify": 3.0})


def missed_plan() -> Plan:
    """Nothing meets a 1 s SLO; the closest verified point is the dearest."""
    b = point((2 * TiB, 0), (0.4, 0.0), 1.8, 10.0, sim=2.5, slo=1.0)
    c = point((2 * TiB, 32 * TiB), (0.4, 0.2), 1.2, 12.0, sim=1.5, slo=1.0)
    return Plan(slo=SLO(1.0), chosen=None, closest=c, config=None, frontier=[b, c], verified=[b, c],
                points_evaluated=9, reasons=["no verified point meets p95 TTFT <= 1 s; the closest is 1.5 s"])
