"""kvmm.plan: size a KV-cache hierarchy for a trace, an SLO and a price list.

``plan(trace, slo=SLO(2.0), tiers=[TierCandidate.parse("dram:0-4TiB"), ...]) -> Plan``: an
analytic pass (one stack-distance pass; the hit ratios of an inclusive LRU hierarchy at every
capacity combination, a queueing estimate of TTFT p95, the cost account) prunes the grid to the
cost-vs-latency Pareto frontier, and the cheapest candidates are verified with the composed
simulator (:func:`kvmm.sim.sweep`).  See docs/plan.md.  Imports are lazy, so ``import kvmm.plan``
compiles nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "plan": "kvmm.plan.core",
    "Plan": "kvmm.plan.core",
    "PlanPoint": "kvmm.plan.core",
    "TierCandidate": "kvmm.plan.core",
    "SLO": "kvmm.plan.core",
    "simulation_key": "kvmm.plan.core",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.plan.core import SLO, Plan, PlanPoint, TierCandidate, plan, simulation_key

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
