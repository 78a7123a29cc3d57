"""Tier put/get bandwidth against a plain numpy copy; eviction policies against plain Python.

Groups:
  tier-put-<size> / tier-get-<size>: ArenaTier, MmapTier and (when redis-server is installed)
      RedisTier moving one entry per call; baseline: ``np.copyto`` of the same bytes (the floor
      any in-memory tier pays).  Unit: MiB.
  eviction-<policy>: replaying a Zipf trace through the policy (ManagedTier's calling
      convention); baseline: the list-based reference simulator in kvmm/testing/models/eviction.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import size
from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.testing.models.eviction import drive, simulate_arc, simulate_fifo, simulate_lfu, simulate_lru
from kvmm.testing.redis_server import RedisServer
from kvmm.testing.tiers import close_tier
from kvmm.tiers import ArenaTier, MmapTier, RedisTier

MiB = 1 << 20
ENTRY_SIZES = {"1MiB": size(MiB, 64 << 10), "64KiB": size(64 << 10, 4 << 10)}
KEYS = 16  # entries rotate over this many keys (puts overwrite, gets hit)
ROUNDS = size(60, 2)


@pytest.fixture(scope="module")
def redis_url():
    server = RedisServer()  # skips (with the reason) when redis-server is not installed
    yield server.url
    server.stop()


def make_tier(kind, tmp_path, request):
    capacity = 64 * MiB
    if kind == "arena":
        return ArenaTier(capacity)
    if kind == "mmap":
        return MmapTier(tmp_path / "mmap", capacity, segment_bytes=8 * MiB)
    return RedisTier(capacity, url=request.getfixturevalue("redis_url"), prefix="bench")


def entries(nbytes):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, nbytes, dtype=np.uint8).view(np.float16) for _ in range(KEYS)]


@pytest.mark.parametrize("label", list(ENTRY_SIZES))
@pytest.mark.parametrize("kind", ["arena", "mmap", "redis", "numpy"])
@pytest.mark.parametrize("op", ["put", "get"])
def test_tier_bandwidth(benchmark, tmp_path, request, op, kind, label):
    nbytes = ENTRY_SIZES[label]
    values = entries(nbytes)
    benchmark.group = f"tier-{op}-{label}"
    benchmark.extra_info.update(items=nbytes / MiB, unit="MiB")
    if kind == "numpy":
        dst = [np.empty_like(v) for v in values]
        state = {"i": 0}

        def step():
            i = state["i"] = (state["i"] + 1) % KEYS
            np.copyto(dst[i], values[i])

        benchmark.extra_info.update(role="baseline", label="numpy copy")
        benchmark.pedantic(step, rounds=ROUNDS * KEYS, warmup_rounds=KEYS)
        return
    tier = make_tier(kind, tmp_path, request)
    try:
        for i, v in enumerate(values):
            tier.put(i, v)
        state = {"i": 0}

        def put():
            i = state["i"] = (state["i"] + 1) % KEYS
            tier.put(i, values[i])

        def get():
            i = state["i"] = (state["i"] + 1) % KEYS
            return tier.get(i)

        benchmark.extra_info.update(role="kvmm", label=f"{type(tier).__name__}.{op}")
        benchmark.pedantic(put if op == "put" else get, rounds=ROUNDS * KEYS, warmup_rounds=KEYS)
        np.testing.assert_array_equal(tier.get(3), values[3])
    finally:
        close_tier(tier)


POLICIES = {
    "lru": (LRUPolicy, simulate_lru),
    "fifo": (FIFOPolicy, simulate_fifo),
    "lfu": (LFUPolicy, simulate_lfu),
    "arc": (lambda c: ARCPolicy(capacity=c), lambda trace, c: simulate_arc(trace, c)[0]),
}
TRACE_LEN = size(40_000, 2_000)
CACHE = size(500, 50)


def zipf_trace(n, universe, seed=1):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.zipf(1.2, n) % universe]


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("impl", ["kvmm", "reference"])
def test_eviction_policy_throughput(benchmark, name, impl):
    trace = zipf_trace(TRACE_LEN, 20 * CACHE)
    make, reference = POLICIES[name]
    benchmark.group = f"eviction-{name}"
    benchmark.extra_info.update(items=len(trace), unit="refs")
    if impl == "kvmm":
        benchmark.extra_info.update(role="kvmm", label=f"{name.upper()} policy")
        out = benchmark.pedantic(lambda: drive(make(CACHE) if name == "arc" else make(), trace, CACHE),
                                 rounds=size(3, 1))
    else:
        benchmark.extra_info.update(role="baseline", label="plain-Python list reference")
        out = benchmark.pedantic(lambda: reference(trace, CACHE), rounds=size(3, 1))
    assert len(out) == len(trace) and sum(o[0] == "hit" for o in out) > 0
    if impl == "kvmm":
        assert out == reference(trace, CACHE)  # the timed policy makes the reference's decisions
