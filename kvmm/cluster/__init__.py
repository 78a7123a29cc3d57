"""kvmm.cluster: many serving instances over shared KV tiers: the global block index, the
routers that pick an instance per request and what they read (a :class:`ClusterView`),
the fabric presets, the cost account, and the cluster configuration of the simulator.

Imports are lazy, so ``import kvmm.cluster`` compiles nothing; the first use of a name loads
its module.
"""

from __future__ import annotations

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
    "RoundRobinRouter": "kvmm.cluster.routers",
    "LeastLoadedRouter": "kvmm.cluster.routers",
    "SessionRouter": "kvmm.cluster.routers",
    "ApproxPrefixRouter": "kvmm.cluster.routers",
    "PrecisePrefixRouter": "kvmm.cluster.routers",
    "WeightedRouter": "kvmm.cluster.routers",
    "Prices": "kvmm.cluster.cost",
    "parse_prices": "kvmm.cluster.cost",
    "cost_account": "kvmm.cluster.cost",
    "CostAccount": "kvmm.cluster.cost",
    "FabricSpec": "kvmm.cluster.fabric",
    "FABRIC_PRESETS": "kvmm.cluster.fabric",
    "fabric_preset": "kvmm.cluster.fabric",
    "ClusterConfig": "kvmm.cluster.config",
    "simulate_cluster": "kvmm.cluster.sim",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
