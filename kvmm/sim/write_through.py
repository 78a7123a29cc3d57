"""The ``write-through-lru`` baseline's fast tier: no staging control.

What an unmodified LMCache-style deployment does: the protected fast tier is an LRU cache
(``ManagedTier`` + ``LRUPolicy`` over a ``SimulatedTier``) written through with every prefilled
block; lower-tier hits are read on the critical path and inserted there.  Its protected
byte-time is its occupancy x time.
"""

from __future__ import annotations

import numpy as np

from kvmm.policies.eviction import LRUPolicy
from kvmm.sim.config import SimConfig
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.simulated import SimulatedTier

__all__ = ["WriteThroughLRU"]


class WriteThroughLRU:
    """The fast LRU tier of one engine and its occupancy accounting (byte-seconds, peak).

    Runtime complexity: O(blocks) policy events per call.
    """

    def __init__(self, cfg: SimConfig, block_bytes: int) -> None:
        self.cfg = cfg
        self.block_bytes = block_bytes
        self.tier = ManagedTier(SimulatedTier(cfg.fast_tier.capacity_bytes, spec=cfg.fast_tier), LRUPolicy())
        self.byte_seconds = 0.0
        self.clock = 0.0
        self.peak = 0

    def load_seconds(self, hits: list[np.ndarray], now: float) -> float:
        """Seconds to bring each admitted request's lower-tier hit blocks (``hits``, one id array
        per request) to the GPU: from this tier when it holds them, else from the slowest lower
        tier on the critical path (then cached here)."""
        fast = self.cfg.fast_tier
        slow = self.cfg.tiers[-1].spec if self.cfg.tiers else fast
        secs = 0.0
        for keys in hits:
            sb = keys.shape[0]
            in_fast = int(np.count_nonzero(self.tier.contains_many(keys)))
            slow_bytes = (sb - in_fast) * self.block_bytes
            secs += fast.latency_s + sb * self.block_bytes / fast.read_bandwidth
            if slow_bytes:
                secs += slow.latency_s + slow_bytes / (slow.read_bandwidth * self.cfg.stage_efficiency)
            self.write(keys, now)
        return secs

    def write(self, keys: np.ndarray, now: float) -> None:
        """Write ``keys`` through (held ones accessed, new ones inserted, LRU victims evicted)."""
        self.tick(now)
        self.tier.access_or_put_size_many(keys, self.block_bytes, np.ones(len(keys), dtype=bool))
        self.peak = max(self.peak, self.tier.used_bytes)

    def tick(self, now: float) -> None:
        """Account the occupancy up to ``now``."""
        self.byte_seconds += self.tier.used_bytes * max(now - self.clock, 0.0)
        self.clock = max(now, self.clock)
