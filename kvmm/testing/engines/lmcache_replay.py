"""Drive LMCache 0.5.6's real LocalCPUBackend (and the kvmm plugin) with a trace's requests.

Each request, in trace order, as LMCache's storage manager handles a request that runs alone:
look its chunks up (``batched_contains(pin=True)``: the hit prefix, pinned), ``touch_cache``
(the hits count for the cache policy, suffix first), retrieve the hits, store the misses
(``allocate`` evicts through the cache policy while the hits stay pinned, then
``submit_put_task``), release the retrieved objects and the pins.  ``allocate`` runs with
``busy_loop=False``, so a request whose misses cannot fit stores what fits instead of waiting.
"""

from __future__ import annotations

import os

os.environ.setdefault("LMCACHE_LOG_LEVEL", "ERROR")  # LMCache logs a warning per eviction

import torch  # noqa: E402
from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator  # noqa: E402
from lmcache.v1.pin_monitor import PinMonitor  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

CHUNK_SHAPE = torch.Size([2, 1, 16, 64])  # KV_2LTD: (kv, layers, tokens, hidden), float16
CHUNK_BYTES = 4096


def chunk_key(block: int, dtype=torch.float16) -> CacheEngineKey:
    return CacheEngineKey("mooncake", 1, 0, int(block), dtype)


def request_keys(trace, index: int) -> list[CacheEngineKey]:
    return [chunk_key(b) for b in dict.fromkeys(int(b) for b in trace.blocks_of(index))]


def engine_config(cache_policy: str = "LRU", plugins: dict | None = None) -> LMCacheEngineConfig:
    """LMCache's config, with ``plugins``: name -> {setting: value} under extra_config."""
    extra = {f"storage_plugin.{name}.{k}": v for name, settings in (plugins or {}).items() for k, v in settings.items()}
    config = LMCacheEngineConfig.from_defaults(chunk_size=16, local_cpu=True, max_local_cpu_size=1,
                                               cache_policy=cache_policy, storage_plugins=list(plugins or {}),
                                               extra_config=extra or None)
    PinMonitor.GetOrCreate(config)  # contains(pin=True) needs it (else AssertionError: config is required)
    return config


def cpu_backend(cache_policy: str, capacity_chunks: int) -> LocalCPUBackend:
    """A LocalCPUBackend whose allocator holds ``capacity_chunks`` chunks, recording evictions
    (the keys ``allocate`` removes, in order) in ``backend.evicted``."""
    backend = LocalCPUBackend(engine_config(cache_policy), metadata=None, dst_device="cpu",
                              memory_allocator=TensorMemoryAllocator(torch.empty(capacity_chunks * CHUNK_BYTES,
                                                                                 dtype=torch.uint8)))
    backend.evicted = []
    remove = backend.batched_remove

    def recording_remove(keys, force=True):
        if not force:  # allocate's evictions
            backend.evicted.extend(keys)
        return remove(keys, force=force)

    backend.batched_remove = recording_remove
    return backend


def new_chunk(backend, fill: float = 0.0, busy_loop: bool = False):
    obj = backend.allocate(CHUNK_SHAPE, torch.float16, busy_loop=busy_loop)
    if obj is not None:
        obj.tensor.fill_(fill)
    return obj


def run_request(backend: LocalCPUBackend, keys: list[CacheEngineKey]) -> tuple[int, list, list]:
    """One request: (hit chunks, stored keys, evicted keys in order)."""
    evicted_before = len(backend.evicted)
    hits = backend.batched_contains(keys, pin=True)
    backend.touch_cache()
    loaded = [backend.get_blocking(k) for k in keys[:hits]]
    stored = []
    for key in keys[hits:]:
        if backend.contains(key):
            continue
        obj = new_chunk(backend)
        if obj is None:  # every resident chunk is pinned: nothing more fits
            break
        backend.submit_put_task(key, obj)
        obj.ref_count_down()
        stored.append(key.chunk_hash)
    for obj in loaded:
        obj.ref_count_down()
    for key in keys[:hits]:
        backend.unpin(key)
    return hits, stored, [k.chunk_hash for k in backend.evicted[evicted_before:]]


def replay(backend: LocalCPUBackend, trace, n_requests: int, *, check=None) -> list[tuple]:
    out = []
    for i in range(n_requests):
        out.append(run_request(backend, request_keys(trace, i)))
        if check is not None:
            check()
    return out
