"""Memory tiers: specs and presets, real data backends, the timing model.

* :class:`ArenaTier` - real bytes in RAM; :class:`KVArena` - paged slot storage (``copy_slots``).
* :class:`MmapTier` - log-structured segment files in a folder; survives a crash or restart.
* :class:`RedisTier` - a shared remote pool on a Redis server (needs the ``redis`` extra).
* :class:`SimulatedTier` - capacity and timing only, no bytes.
* :class:`ManagedTier` - any tier plus any eviction policy: evicts to make room on ``put``.
"""

from kvmm.tiers.arena import ArenaTier, KVArena
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.mmap_tier import MmapTier
from kvmm.tiers.redis_tier import RedisTier
from kvmm.tiers.simulated import SimulatedTier
from kvmm.tiers.spec import PRESETS, TierSpec, preset

__all__ = ["PRESETS", "TierSpec", "preset", "ArenaTier", "KVArena", "ManagedTier", "MmapTier", "RedisTier", "SimulatedTier"]
