"""Mooncake replay through the allocator: unlimited-capacity hit ratios and the reference model."""

import numpy as np
import pytest

from kvmm.reproduce.prefix_cache import replay
from kvmm.testing.models.block_allocator import NaiveBlockAllocator
from kvmm.traces import load_mooncake

# Published unlimited-capacity hit ratios (kvmm/traces/data/README.md).
UNLIMITED = {"conversation": 0.366, "synthetic": 0.640}


@pytest.fixture(scope="module", params=sorted(UNLIMITED))
def trace(request):
    return load_mooncake(request.param)


def test_unlimited_pool_matches_the_published_hit_ratio(trace):
    unique = int(np.unique(trace.block_ids).size)
    res = replay(trace.block_offsets, trace.block_ids, unique)
    assert res["refs"] == trace.block_ids.size
    assert round(res["hit_ratio"], 3) == UNLIMITED[trace.name]
    # With one block per unique key nothing is ever evicted: every repeat is a hit.
    assert res["evictions"] == 0
    assert res["hits"] == trace.block_ids.size - unique


def test_smaller_pools_hit_less_and_evict(trace):
    unique = int(np.unique(trace.block_ids).size)
    small = replay(trace.block_offsets, trace.block_ids, unique // 20)
    mid = replay(trace.block_offsets, trace.block_ids, unique // 4)
    assert small["hit_ratio"] < mid["hit_ratio"] < UNLIMITED[trace.name] + 0.0005
    assert small["evictions"] > mid["evictions"] > 0


def test_replay_agrees_with_the_plain_python_reference(trace):
    # First 400 requests through a tight pool: identical hits and evictions.
    n, pool = 400, 600
    got = replay(trace.block_offsets, trace.block_ids, pool, num_requests=n)
    want = replay(trace.block_offsets, trace.block_ids, pool, num_requests=n,
                  allocator=NaiveBlockAllocator(pool, 512))
    assert got == want
    assert got["evictions"] > 0
