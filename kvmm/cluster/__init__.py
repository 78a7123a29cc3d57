"""kvmm.cluster: the control plane of many serving instances over shared KV tiers: the global
block index (fed by KV events), the routers that pick an instance per request and what they
read (a :class:`ClusterView`), and the fabric presets.  It never imports the simulator: the
cluster configuration, its driver and the cost account live in :mod:`kvmm.sim`.

Imports are lazy, so ``import kvmm.cluster`` compiles nothing; the first use of a name loads
its module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "BlockIndex": "kvmm.cluster.index",
    "apply_vllm_batch": "kvmm.cluster.events",
    "decode_vllm_batch": "kvmm.cluster.events",
    "RouteRequest": "kvmm.cluster.view",
    "ClusterView": "kvmm.cluster.view",
    "make_router": "kvmm.cluster.routers",
    "checked_route": "kvmm.cluster.routers",
    "ROUTERS": "kvmm.cluster.routers",
    "INDEX_ROUTERS": "kvmm.cluster.routers",
    "RoundRobinRouter": "kvmm.cluster.routers",
    "LeastLoadedRouter": "kvmm.cluster.routers",
    "SessionRouter": "kvmm.cluster.routers",
    "ApproxPrefixRouter": "kvmm.cluster.routers",
    "PrecisePrefixRouter": "kvmm.cluster.routers",
    "WeightedRouter": "kvmm.cluster.routers",
    "KvCostRouter": "kvmm.cluster.routers",
    "EventStream": "kvmm.cluster.event_stream",
    "EventFeed": "kvmm.cluster.event_stream",
    "FabricSpec": "kvmm.cluster.fabric",
    "FABRIC_PRESETS": "kvmm.cluster.fabric",
    "fabric_preset": "kvmm.cluster.fabric",
}

#: names that moved to kvmm.sim (the simulator's side of a cluster); still reachable here for one
#: release, with a DeprecationWarning that says where they live now
MOVED = {
    "ClusterConfig": "kvmm.sim.cluster_config",
    "Prices": "kvmm.sim.cost",
    "parse_prices": "kvmm.sim.cost",
    "cost_account": "kvmm.sim.cost",
    "CostAccount": "kvmm.sim.cost",
    "simulate_cluster": "kvmm.sim.engine.cluster",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.cluster.event_stream import EventFeed, EventStream
    from kvmm.cluster.events import apply_vllm_batch, decode_vllm_batch
    from kvmm.cluster.fabric import FABRIC_PRESETS, FabricSpec, fabric_preset
    from kvmm.cluster.index import BlockIndex
    from kvmm.cluster.routers import (
        INDEX_ROUTERS,
        ROUTERS,
        ApproxPrefixRouter,
        KvCostRouter,
        LeastLoadedRouter,
        PrecisePrefixRouter,
        RoundRobinRouter,
        SessionRouter,
        WeightedRouter,
        checked_route,
        make_router,
    )
    from kvmm.cluster.view import ClusterView, RouteRequest

_lazy_getattr, __dir__ = lazy_exports(__name__, _LAZY, globals())


def __getattr__(name: str) -> object:
    if name in MOVED:
        warnings.warn(f"kvmm.cluster.{name} moved to {MOVED[name]} (also exported by kvmm.sim); this alias goes in "
                      "the next release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(MOVED[name]), name)
    return _lazy_getattr(name)
