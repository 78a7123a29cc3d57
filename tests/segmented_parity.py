"""Shared drivers of the SLRU and W-TinyLFU parity tests: libCacheSim one ``Request`` at a time,
kvmm's policy through ManagedTier over a SimulatedTier, and the Mooncake block streams."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.tiers import ManagedTier, SimulatedTier
from kvmm.traces import load_mooncake


def libcachesim_hits(cls_name, keys, capacity, sizes, **params):
    lcs = pytest.importorskip("libcachesim")
    # a small hash table (2^16 buckets, libCacheSim's default 2^24 allocates 128 MiB per cache)
    cache = getattr(lcs, cls_name)(cache_size=capacity, hashpower=16, **params)
    return [bool(cache.get(lcs.Request(obj_size=int(s), obj_id=int(k), clock_time=i)))
            for i, (k, s) in enumerate(zip(keys, sizes))]


def managed_tier_hits(policy, keys, capacity, sizes):
    """Drive ManagedTier as libCacheSim's ``get``: a hit is an access; a miss stores the key
    when the policy admits its size (libCacheSim's ``can_insert``)."""
    tier = ManagedTier(SimulatedTier(capacity), policy)
    hits = []
    for key, size in zip(keys, sizes):
        if tier.contains(key):
            tier.get(key)
            hits.append(True)
        else:
            hits.append(False)
            if size <= capacity and policy.admits(size):
                tier.put_size(key, size)
        assert tier.used_bytes <= capacity
    tier.check()
    return hits


def mooncake_block_streams(limit=600):
    out = {}
    for name in ("conversation", "synthetic"):
        trace = load_mooncake(name)
        out[name] = np.concatenate([trace.blocks_of(i) for i in range(min(limit, trace.num_requests))]).astype(np.int64)
    return out


def zipf_sized_stream(capacity, n=6000, universe=900, max_size=300, seed=None):
    """Byte-sized Zipf references, a few keys larger than the cache (never cached)."""
    rng = np.random.default_rng(capacity if seed is None else seed)
    keys = rng.zipf(1.2, n) % universe
    size_of = rng.integers(1, max_size, universe)
    size_of[:5] = capacity + 1
    return keys, size_of[keys]
