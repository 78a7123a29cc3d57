"""The eviction policies behind a ManagedTier on streams their own tests do not use: the same miss ratios as libCacheSim's
LRU / FIFO / LFU / ARC on unseen streams, entries of wildly different sizes with every policy,
and a refused put that must leave ARC's adaptation exactly as if it never happened."""

import numpy as np
import pytest

from kvmm.errors import CapacityExceededError
from kvmm.policies import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.testing.tiers import snapshot
from kvmm.tiers import ArenaTier, ManagedTier, SimulatedTier

POLICIES = {
    "lru": (LRUPolicy, "LRU"),
    "fifo": (FIFOPolicy, "FIFO"),
    "lfu": (LFUPolicy, "LFU"),
    "arc-capacity": (None, "ARC"),  # ARCPolicy(capacity=c)
    "arc-none": (ARCPolicy, "ARC"),
}


def _stream(seed):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 801) ** 0.9
    zipf = rng.choice(800, 4000, p=p / p.sum())
    loop = np.tile(np.arange(150), 27)[:4000] + 10_000
    return np.where(rng.random(4000) < 0.35, loop, zipf).astype(np.int64)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_managed_tier_miss_ratio_equals_libcachesim(name, tmp_path):
    lcs = pytest.importorskip("libcachesim")
    make, lcs_name = POLICIES[name]
    keys = _stream(1)
    records = np.zeros(keys.size, dtype=[("ts", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    records["ts"] = np.arange(keys.size)
    records["id"] = keys
    records["size"] = 1
    records["next"] = -1
    path = tmp_path / "trace.oracleGeneral.bin"
    records.tofile(path)
    for capacity in (7, 120):
        policy = ARCPolicy(capacity=capacity) if make is None else make()
        tier = ManagedTier(SimulatedTier(capacity), policy)
        misses = 0
        for key in keys.tolist():
            if tier.contains(key):
                tier.get(key)
            else:
                misses += 1
                tier.put_size(key, 1)
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        expected = getattr(lcs, lcs_name)(cache_size=capacity).process_trace(reader)[0]
        assert misses / keys.size == pytest.approx(expected, abs=1e-12), capacity
        tier.check()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_entries_of_very_different_sizes(name):
    make = POLICIES[name][0] or (lambda: ARCPolicy(capacity=5))
    rng = np.random.default_rng(sorted(POLICIES).index(name))
    sizes = [0, 1, 10, 100, 1000, 5000, 19_999, 20_000, 20_001]
    for backend in (ArenaTier(20_000), SimulatedTier(20_000)):
        tier = ManagedTier(backend, make())
        holds_bytes = isinstance(backend, ArenaTier)
        refused = 0
        for step in range(400):
            key, op = int(rng.integers(0, 40)), rng.random()
            if op < 0.55:
                size = int(rng.choice(sizes))
                protected = {int(k) for k in rng.integers(0, 40, int(rng.integers(0, 5)))}
                before = snapshot(tier, holds_bytes)
                try:
                    evicted = tier.put(key, np.full(size, step % 251, np.uint8), protected=protected)
                except CapacityExceededError:
                    refused += 1
                    assert size > 20_000 or protected
                    assert snapshot(tier, holds_bytes) == before
                    continue
                assert not set(evicted) & (protected | {key})
                assert tier.nbytes_of(key) == size and tier.used_bytes <= 20_000
            elif op < 0.85 and tier.contains(key):
                tier.get(key)
            elif tier.contains(key):
                tier.delete(key)
            tier.check()
        assert refused > 0 and tier.evictions > 0


def test_refused_put_leaves_arc_adaptation_untouched():
    """ARC adapts p on a ghost hit *before* choosing victims; a put that is then refused (all
    candidates protected) must not leave that adaptation behind for a later insert."""

    def run(refuse_first):
        tier = ManagedTier(SimulatedTier(4), ARCPolicy(capacity=4))
        for key in "xyuv":
            tier.put_size(key, 1)
        for key in "xyuv":
            tier.get(key)                   # all four in T2
        tier.delete("x")
        tier.delete("y")                    # B2 = x, y
        tier.put_size("a", 1)
        tier.put_size("t", 1)
        tier.delete("a")                    # B1 = a;  T1 = t;  T2 = u, v
        tier.put_size("w", 1)               # full again
        if refuse_first:
            before = (tier.policy.lists(), tier.policy.p)
            with pytest.raises(CapacityExceededError):
                tier.put_size("a", 1, protected={"t", "u", "v", "w"})
            assert (tier.policy.lists(), tier.policy.p) == before
        tier.delete("t")                    # B1 = a, t: the ghost ratio changed
        tier.put_size("a", 1)               # room now: a ghost hit without victims
        tier.check()
        return tier.policy.lists(), tier.policy.p

    assert run(True) == run(False)
    assert run(False)[1] == 1.0  # delta = max(|B2| / |B1|, 1) = max(2 / 2, 1)
