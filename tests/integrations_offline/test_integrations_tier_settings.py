"""The engine adapters' shared tier rule (kvmm.integrations._tier_settings): every online order
by name over every tier kind it can build without a server; bad settings are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.integrations._tier_settings import build_tier, online_orders
from kvmm.policies import EVICTION_POLICIES
from kvmm.tiers import ArenaTier, ManagedTier, MmapTier

WHAT = "kvmm plugin setting"


def test_online_orders_are_the_registry_less_the_offline_ones():
    assert set(online_orders()) == set(EVICTION_POLICIES) - {"belady"}
    assert {"lru", "fifo", "lfu", "arc", "clock", "s3fifo", "sieve"} <= set(online_orders())


@pytest.mark.parametrize("order", online_orders())
def test_every_online_order_manages_an_arena_by_name(order):
    tier = build_tier({"tier": "arena", "capacity_bytes": 4096, "eviction": order.upper()}, what=WHAT,
                      redis_prefix="p")
    assert isinstance(tier, ManagedTier) and isinstance(tier.backend, ArenaTier)
    assert type(tier.policy) is EVICTION_POLICIES[order]
    for key in range(40):  # 40 x 200 bytes into 4 KiB: the order evicts
        tier.put(key, np.zeros(200, np.uint8))
        tier.check()
    assert tier.evictions > 0


def test_none_is_the_bare_tier_and_mmap_needs_its_folder(tmp_path):
    assert isinstance(build_tier({"tier": "mmap", "path": str(tmp_path), "capacity_bytes": 1 << 16,
                                  "eviction": "none"}, what=WHAT, redis_prefix="p"), MmapTier)


@pytest.mark.parametrize("settings, match", [
    ({"tier": "tape"}, "kvmm plugin setting tier='tape'; expected one of"),
    ({"tier": "arena", "capacity_bytes": 64, "eviction": "belady"}, "eviction='belady'; expected one of"),
    ({"tier": "arena", "capacity_bytes": 64, "eviction": "mru"}, "eviction='mru'"),
    ({"tier": "arena", "capacity_bytes": "lots"}, "capacity_bytes='lots'; expected a whole number"),
    ({"tier": "arena"}, "tier=arena needs capacity_bytes"),
    ({"tier": "mmap"}, "tier=mmap needs path"),
    ({"tier": "mmap", "path": "x", "sync": "yes"}, "sync='yes'; expected true or false"),
])
def test_bad_settings_are_named(settings, match):
    with pytest.raises(BadInputError, match=match):
        build_tier(settings, what=WHAT, redis_prefix="p")
