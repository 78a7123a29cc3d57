"""The tiers and policies every contract test runs over.

Adding a tier or a policy to the lists below gives it the whole contract suite
(tests/test_contract_policy_tier.py), cachetools ``CacheTestMixin`` style.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.tiers import ArenaTier, MmapTier, RedisTier, SimulatedTier

#: (id, zero-argument factory) of every eviction policy.
POLICIES: list[tuple[str, Callable[[], Any]]] = [
    ("lru", LRUPolicy),
    ("fifo", FIFOPolicy),
    ("lfu", LFUPolicy),
    ("arc", ARCPolicy),
    ("arc-c3", lambda: ARCPolicy(capacity=3)),
    ("arc-ghost-limit", lambda: ARCPolicy(ghost_limit=150)),
]


@dataclass
class TierKind:
    """How to build one kind of tier for a test: ``make(capacity, ctx)`` -> tier."""

    name: str
    make: Callable[[int, Any], Any]
    holds_bytes: bool = True  # get returns the stored values (SimulatedTier returns placeholders)
    needs_redis: bool = False


def _mmap(capacity: int, ctx: Any) -> MmapTier:
    ctx.counter += 1
    return MmapTier(ctx.tmp_path / f"mmap{ctx.counter}", capacity, segment_bytes=2048)


def _redis(capacity: int, ctx: Any) -> RedisTier:
    ctx.counter += 1
    return RedisTier(capacity, url=ctx.redis_url, prefix=f"{ctx.prefix}-{ctx.counter}")


#: Every tier kind.
TIERS: list[TierKind] = [
    TierKind("arena", lambda capacity, ctx: ArenaTier(capacity)),
    TierKind("mmap", _mmap),
    TierKind("simulated", lambda capacity, ctx: SimulatedTier(capacity), holds_bytes=False),
    TierKind("redis", _redis, needs_redis=True),
]


class TierContext:
    """Per-test resources the factories need; closes every tier it built at teardown."""

    def __init__(self, tmp_path, redis_url: str | None, prefix: str) -> None:
        self.tmp_path = tmp_path
        self.redis_url = redis_url
        self.prefix = prefix
        self.counter = 0
        self.built: list[Any] = []

    def build(self, kind: TierKind, capacity: int) -> Any:
        tier = kind.make(capacity, self)
        self.built.append(tier)
        return tier

    def close(self) -> None:
        for tier in self.built:
            if isinstance(tier, RedisTier):
                try:
                    tier.drop_pool()
                finally:
                    tier.close()
            elif isinstance(tier, MmapTier):
                tier.close()


def snapshot(tier: Any, holds_bytes: bool) -> dict:
    """Everything observable about a tier's contents (reads the backend, not via a policy)."""
    backend = getattr(tier, "backend", tier)
    keys = sorted(backend.keys(), key=repr)
    out = {"keys": keys, "used": backend.used_bytes,
           "sizes": {repr(k): backend.nbytes_of(k) for k in keys}}
    if holds_bytes:
        values = {}
        for k in keys:
            v = backend.get(k)
            values[repr(k)] = (v.dtype.str, v.shape, v.tobytes())
        out["values"] = values
    if hasattr(tier, "policy"):
        out["policy"] = list(tier.policy.keys())
    return out


def value(nbytes: int, seed: int = 0) -> np.ndarray:
    """A uint8 value of ``nbytes`` bytes with recognisable content."""
    return ((np.arange(nbytes, dtype=np.int64) * 7 + seed) % 251).astype(np.uint8)
