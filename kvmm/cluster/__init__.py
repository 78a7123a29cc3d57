"""kvmm.cluster: many instances over shared KV tiers: the global block index (and, later, routers
and the cost account; see DESIGN.md).

Imports are lazy, so ``import kvmm.cluster`` compiles nothing; the first use of a name loads
its module.
"""

from __future__ import annotations

from kvmm._lazy import lazy_exports

_LAZY = {
    "BlockIndex": "kvmm.cluster.index",
    "apply_vllm_batch": "kvmm.cluster.events",
    "decode_vllm_batch": "kvmm.cluster.events",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
