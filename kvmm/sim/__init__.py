"""kvmm.sim: a serving simulator composed from kvmm's own structures (TempoKV staging), on a
physical clock (:mod:`kvmm.sim.latency`: roofline step times, chunked prefill, KV from memory).

``simulate(SimConfig(...)) -> SimResult``; ``sweep(configs, executor=None)`` runs many on any
``concurrent.futures.Executor``.  The hierarchy is a ``BlockAllocator`` GPU pool plus
``ManagedTier`` lower tiers (:class:`TierLevel`: spec + eviction + admission, by name or object);
see docs/compose.md.  Imports are lazy so ``import kvmm.sim`` compiles nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "SimConfig": "kvmm.sim.config",
    "TierLevel": "kvmm.sim.levels",
    "PDConfig": "kvmm.sim.config",
    "GiB": "kvmm.sim.config",
    "SimResult": "kvmm.sim.results",
    "simulate": "kvmm.sim.simulator",
    "QueueGrowthWarning": "kvmm.sim.engine.instance",
    "ClusterConfig": "kvmm.sim.cluster_config",
    "PooledStore": "kvmm.sim.cluster_config",
    "Prices": "kvmm.sim.cost",
    "parse_prices": "kvmm.sim.cost",
    "cost_account": "kvmm.sim.cost",
    "CostAccount": "kvmm.sim.cost",
    "Serving": "kvmm.sim.serving",
    "resolve_serving": "kvmm.sim.serving",
    "ModelArch": "kvmm.sim.latency",
    "Hardware": "kvmm.sim.latency",
    "HARDWARE": "kvmm.sim.latency",
    "LatencyModel": "kvmm.sim.latency",
    "Roofline": "kvmm.sim.latency",
    "ConstantRate": "kvmm.sim.latency",
    "Fitted": "kvmm.sim.latency",
    "fit_latency": "kvmm.sim.latency",
    "sweep": "kvmm.sim._sweep",
    "ModelSpec": "kvmm.sim.models",
    "MODELS": "kvmm.sim.models",
    "Workload": "kvmm.sim.workload",
    "offered_seconds": "kvmm.sim.load",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.sim._sweep import sweep
    from kvmm.sim.cluster_config import ClusterConfig, PooledStore
    from kvmm.sim.config import GiB, PDConfig, SimConfig
    from kvmm.sim.cost import CostAccount, Prices, cost_account, parse_prices
    from kvmm.sim.engine.instance import QueueGrowthWarning
    from kvmm.sim.latency import (
        HARDWARE,
        ConstantRate,
        Fitted,
        Hardware,
        LatencyModel,
        ModelArch,
        Roofline,
        fit_latency,
    )
    from kvmm.sim.levels import TierLevel
    from kvmm.sim.load import offered_seconds
    from kvmm.sim.models import MODELS, ModelSpec
    from kvmm.sim.results import SimResult
    from kvmm.sim.serving import Serving, resolve_serving
    from kvmm.sim.simulator import simulate
    from kvmm.sim.workload import Workload

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
