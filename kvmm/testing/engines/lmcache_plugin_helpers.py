"""Build the kvmm plugin the way LMCache does (its storage_plugin_launcher) and compare chunks."""

from __future__ import annotations

import collections

import torch
from lmcache.v1.storage_backend import storage_plugin_launcher

from kvmm.testing.engines.lmcache_replay import CHUNK_SHAPE, chunk_key, cpu_backend, engine_config

PLUGIN = {"module_path": "kvmm.integrations.lmcache", "class_name": "KvmmStoragePlugin"}


def launch(settings: dict, cpu_chunks: int = 16, name: str = "kvmm"):
    """(LocalCPUBackend, plugin or None) from LMCache's launcher with ``settings`` for the plugin."""
    config = engine_config("LRU", {name: {**PLUGIN, **settings}})
    backend = cpu_backend("LRU", cpu_chunks)
    backend.config = config
    plugins: collections.OrderedDict = collections.OrderedDict()
    storage_plugin_launcher(config, None, None, backend, "cpu", plugins)
    return backend, plugins.get(name)


def random_chunk(backend, seed: int, dtype=torch.float16):
    """A chunk from ``backend``'s allocator filled with bytes that depend on ``seed`` only."""
    obj = backend.allocate(CHUNK_SHAPE, dtype, busy_loop=False)
    gen = torch.Generator().manual_seed(seed)
    obj.tensor.reshape(-1).view(torch.uint8).copy_(torch.randint(0, 256, (obj.tensor.nbytes,), dtype=torch.uint8,
                                                                  generator=gen))
    return obj


def expected_bytes(seed: int, nbytes: int = 4096) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).numpy().tobytes()


def chunk_bytes(obj) -> bytes:
    return obj.tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def put_chunks(backend, plugin, seeds, dtype=torch.float16) -> None:
    keys = [chunk_key(s, dtype) for s in seeds]
    objs = [random_chunk(backend, s, dtype) for s in seeds]
    plugin.batched_submit_put_task(keys, objs)
    for obj in objs:
        obj.ref_count_down()  # the storage manager's rule: the plugin kept no reference


def read_back(plugin, seed: int, dtype=torch.float16):
    """(bytes, shape, dtype, format) of the chunk served for ``seed``, or None."""
    obj = plugin.get_blocking(chunk_key(seed, dtype))
    if obj is None:
        return None
    out = chunk_bytes(obj), tuple(obj.tensor.shape), obj.tensor.dtype, obj.get_memory_format()
    obj.ref_count_down()
    return out


def snapshot(plugin) -> dict:
    """Every tier key -> stored bytes (to check that a failed call changed nothing)."""
    tier = plugin.tier
    return {k: tier.get(k).tobytes() for k in sorted(tier.keys())}
