"""kvmm inside LMCache 0.5.6, per operation, against LMCache's own default in the same run
(lmcache venv only: .ci/run runs it there at smoke size; the main run's bench smoke skips it).

Two groups, each with kvmm and LMCache's default side by side:

* ``lmcache storage put+get``: ``batched_submit_put_task`` of N chunks, then ``get_blocking`` of
  each (the caller releases what it gets), into a fresh store that holds them all.  kvmm:
  ``KvmmStoragePlugin`` over an in-memory ``ArenaTier`` with LRU (loaded by LMCache's own
  launcher); baseline: LMCache's ``LocalCPUBackend`` with its LRU policy (``submit_put_task`` and
  ``get_blocking``), the engine's default CPU store.  The two do different work: LocalCPUBackend
  keeps the caller's MemoryObj (no copy) and hands the same object back; a storage plugin, as
  LMCache's interface has it, copies the bytes into its tier on put and returns a *new* MemoryObj
  from LMCache's allocator on each get (about half the plugin's time is that allocator's
  allocate/free), with a small header per chunk (the price of crash safety on mmap tiers).
* ``lmcache cache policy``: one ``LocalCPUBackend`` replaying the Mooncake conversation trace's
  requests (lookup with pins, touch, retrieve, store misses, evict through the cache policy) with
  ``cache_policy="kvmm_lru"`` against LMCache's own ``"LRU"``: the same evictions (the parity
  test asserts it), so the ratio is the cost of kvmm's policy hooks inside LMCache.
"""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache", reason="runs in the lmcache venv (.ci/run), where LMCache 0.5.6 is installed")

from kvmm.testing.engines.lmcache_replay import CHUNK_BYTES, chunk_key, cpu_backend, replay  # noqa: E402  (first: quiets LMCache's logs)

# isort: split
import kvmm.integrations.lmcache as kl  # noqa: E402
from bench.conftest import info, size  # noqa: E402
from kvmm.testing.engines.lmcache_plugin_helpers import launch, random_chunk  # noqa: E402
from kvmm.traces import load_mooncake  # noqa: E402

N_CHUNKS = size(512, 16)
N_REQUESTS = size(600, 40)
POLICY_CAPACITY = 400  # chunks: the largest request fits, the working set does not (evictions happen)


def put_get_kvmm():
    backend, plugin = launch({"tier": "arena", "capacity_bytes": 2 * N_CHUNKS * (CHUNK_BYTES + 256),
                              "eviction": "lru"}, cpu_chunks=N_CHUNKS + 1)
    objs = [random_chunk(backend, s) for s in range(N_CHUNKS)]
    return (plugin, [chunk_key(s) for s in range(N_CHUNKS)], objs), {}


def put_get_lmcache():
    backend = cpu_backend("LRU", 2 * N_CHUNKS + 1)
    objs = [random_chunk(backend, s) for s in range(N_CHUNKS)]
    return (backend, [chunk_key(s) for s in range(N_CHUNKS)], objs), {}


def run_plugin(plugin, keys, objs):
    plugin.batched_submit_put_task(keys, objs)
    for obj in objs:
        obj.ref_count_down()
    for key in keys:
        plugin.get_blocking(key).ref_count_down()
    return plugin


def run_backend(backend, keys, objs):
    for key, obj in zip(keys, objs):
        backend.submit_put_task(key, obj)
        obj.ref_count_down()
    for key in keys:
        backend.get_blocking(key).ref_count_down()
    return backend


def test_kvmm_plugin_put_get(benchmark):
    benchmark.group = "lmcache storage put+get"
    plugin = benchmark.pedantic(run_plugin, setup=put_get_kvmm, rounds=size(7, 1), iterations=1)
    info(benchmark, "kvmm", "KvmmStoragePlugin (ArenaTier, LRU)", 2 * N_CHUNKS, "chunk ops")
    assert len(plugin.tier) == N_CHUNKS  # every chunk stored, nothing evicted


def test_lmcache_local_cpu_put_get(benchmark):
    benchmark.group = "lmcache storage put+get"
    backend = benchmark.pedantic(run_backend, setup=put_get_lmcache, rounds=size(7, 1), iterations=1)
    info(benchmark, "baseline", "LMCache LocalCPUBackend (LRU)", 2 * N_CHUNKS, "chunk ops")
    assert len(backend.hot_cache) == N_CHUNKS


@pytest.fixture(scope="module")
def trace():
    kl.register_cache_policies()
    return load_mooncake("conversation")


def replay_with(policy: str, trace):
    def setup():
        return (cpu_backend(policy, POLICY_CAPACITY), trace, N_REQUESTS), {}
    return setup


def test_kvmm_lru_cache_policy(benchmark, trace):
    benchmark.group = "lmcache cache policy"
    out = benchmark.pedantic(replay, setup=replay_with("kvmm_lru", trace), rounds=size(5, 1), iterations=1)
    info(benchmark, "kvmm", "KvmmLRU as LMCache cache_policy", N_REQUESTS, "requests")
    evicted = sum(len(r[2]) for r in out)
    assert evicted > 0  # the capacity is below the working set at every size: evictions are timed too


def test_lmcache_lru_cache_policy(benchmark, trace):
    benchmark.group = "lmcache cache policy"
    out = benchmark.pedantic(replay, setup=replay_with("LRU", trace), rounds=size(5, 1), iterations=1)
    info(benchmark, "baseline", "LMCache LRUCachePolicy", N_REQUESTS, "requests")
    ours = replay(cpu_backend("kvmm_lru", POLICY_CAPACITY), trace, N_REQUESTS)
    assert [r[2] for r in out] == [r[2] for r in ours]  # the same evictions: a like-for-like timing
