"""kvmm.cluster: many serving instances over shared KV tiers (block index, routers, fabric, cost).

Imports are lazy so ``import kvmm.cluster`` compiles nothing.
"""

from __future__ import annotations

from kvmm._lazy import lazy_exports

_LAZY = {
    "Prices": "kvmm.cluster.cost",
    "parse_prices": "kvmm.cluster.cost",
    "cost_account": "kvmm.cluster.cost",
    "CostAccount": "kvmm.cluster.cost",
    "FabricSpec": "kvmm.cluster.fabric",
    "FABRIC_PRESETS": "kvmm.cluster.fabric",
    "fabric_preset": "kvmm.cluster.fabric",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
