"""kvmm.cluster: many serving instances, the routers that pick one per request, and what
they read (a :class:`ClusterView` of queue lengths, running requests, KV utilisation and the
global block index).  Imports are lazy so ``import kvmm.cluster`` compiles nothing.
"""

from __future__ import annotations

from kvmm._lazy import lazy_exports

_LAZY = {
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
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
