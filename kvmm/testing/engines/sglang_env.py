"""Load SGLang 0.5.23's CPU-importable pieces and build what its HiCache code passes a storage
backend (sglang venv only).  Import this first in every SGLang test module.

SGLang's radix cache imports torchvision at module level (``sglang.srt.configs``); the PyPI
torchvision matching CPU torch 2.13 is CUDA-linked, so three stub modules stand in for it,
installed *after* transformers has cached that torchvision is absent (stubbed first,
transformers fails to import its processors).  See /work/shared/notes/sglang-lmcache-on-cpu.md.
"""

from __future__ import annotations

import logging
import sys
import types

import transformers.utils.import_utils as _tiu

_tiu.is_torchvision_available()  # cache "absent" before the stub exists
for _name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional"):
    if _name not in sys.modules:
        _module = sys.modules[_name] = types.ModuleType(_name)
        _module.__path__ = []
        _module.__getattr__ = (lambda a: (_ for _ in ()).throw(AttributeError(a)) if a.startswith("__")
                               else type(a, (), {}))

import torch  # noqa: E402
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

logging.getLogger("sglang").setLevel(logging.ERROR)

DYNAMIC = {"backend_name": "kvmm", "module_path": "kvmm.integrations.sglang", "class_name": "KvmmHiCacheStorage"}


def storage_config(extra: dict | None, **fields) -> HiCacheStorageConfig:
    """The config SGLang's HiCache controller builds for one TP rank (fields override)."""
    values = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                  enable_storage_metrics=False, is_page_first_layout=True, model_name="meta-llama/Llama-3.1-8B",
                  extra_config=extra)
    values.update(fields)
    return HiCacheStorageConfig(**values)


def create(settings: dict, host_pool=None, **fields):
    """A backend made by SGLang's own factory (``dynamic``) with ``settings`` in the extra config,
    the host pool registered as the controller does."""
    backend = StorageBackendFactory.create_backend("dynamic", storage_config({**DYNAMIC, **settings}, **fields),
                                                   host_pool)
    if host_pool is not None:
        backend.register_mem_pool_host(host_pool)
    return backend


class HostPool:
    """A CPU host KV pool with SGLang's own page code (``MHATokenToKVPoolHost``'s
    ``get_data_page``, ``get_dummy_flat_data_page``, ``set_from_flat_data_page``) over a buffer
    laid out as its ``init_kv_buffer`` lays it out: layer_first ``(2, layers, tokens, heads,
    dim)``, page_first ``(2, tokens, layers, heads, dim)``.  The rest of the real pool (device
    pointer tables, CUDA copy kernels) is not built on CPU."""

    get_data_page = MHATokenToKVPoolHost.get_data_page
    get_dummy_flat_data_page = MHATokenToKVPoolHost.get_dummy_flat_data_page
    set_from_flat_data_page = MHATokenToKVPoolHost.set_from_flat_data_page

    def __init__(self, layout: str, pages: int = 8, page_size: int = 4, layer_num: int = 3, head_num: int = 2,
                 head_dim: int = 8, dtype=torch.bfloat16, seed: int | None = 0) -> None:
        self.layout, self.page_size, self.layer_num = layout, page_size, layer_num
        self.head_num, self.head_dim, self.dtype = head_num, head_dim, dtype
        self.device, self.pin_memory, self.size = "cpu", False, pages * page_size
        dims = ((2, layer_num, self.size, head_num, head_dim) if layout == "layer_first"
                else (2, self.size, layer_num, head_num, head_dim))
        self.kv_buffer = torch.zeros(dims, dtype=dtype)
        if seed is not None:  # random bytes: every bit pattern of the dtype, NaNs included
            gen = torch.Generator().manual_seed(seed)
            raw = torch.randint(0, 256, (self.kv_buffer.nbytes,), dtype=torch.uint8, generator=gen)
            self.kv_buffer.view(-1).view(torch.uint8).copy_(raw)

    def page_bytes(self, page: int) -> bytes:
        return self.get_data_page(page * self.page_size, flat=True).contiguous().view(torch.uint8).numpy().tobytes()


class Controller:
    """The HiCache controller's storage paths (SGLang's own ``_generic_page_set``,
    ``_generic_page_get``, ``_page_set_zero_copy``, ``_page_get_zero_copy``) over one backend
    and host pool, without its threads and device pools."""

    def __init__(self, backend, host_pool) -> None:
        self.storage_backend, self.storage_host_pool, self.mem_pool_host = backend, host_pool, host_pool
        self.page_size = host_pool.page_size

    def host_indices(self, pages) -> torch.Tensor:
        return torch.cat([torch.arange(p * self.page_size, (p + 1) * self.page_size) for p in pages])

    def backup(self, keys, pages, zero_copy: bool = False) -> bool:
        fn = HiCacheController._page_set_zero_copy if zero_copy else HiCacheController._generic_page_set
        return fn(self, list(keys), self.host_indices(pages))

    def load(self, keys, pages, zero_copy: bool = False) -> int:
        fn = HiCacheController._page_get_zero_copy if zero_copy else HiCacheController._generic_page_get
        return fn(self, _Operation(), list(keys), self.host_indices(pages))


class _Operation:
    request_id = "test"

    @staticmethod
    def is_terminated() -> bool:
        return False
