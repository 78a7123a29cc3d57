"""KvmmHiCacheStorage per operation against SGLang 0.5.23's own file backend (``HiCacheFile``,
what ``--hicache-storage-backend file`` loads), side by side in one run.

Each call is one HiCache batch as SGLang's controller issues it: ``PAGES`` pages of a page-first
host pool (16 tokens x 4 layers x 4 KV heads x 64 dims, bfloat16, K and V: 64 KiB a page), unit:
pages.  Groups:

* ``sglang-hicache: batch_set``: store pages none of which is stored (each round starts empty);
* ``sglang-hicache: batch_get``: read every page into preallocated host pages (all hits);
* ``sglang-hicache: batch_exists``: count the leading stored pages (all hits).

kvmm runs over ``MmapTier`` (on disk, like HiCacheFile; LRU-managed) and over ``ArenaTier`` (in
RAM); the baseline is HiCacheFile in a folder of the same disk.  SGLang has no in-memory store
with bytes (its ``shm`` backend stores nothing, ``sim`` keeps keys only), so the file backend is
SGLang's own default for this comparison.  What each side pays on ``batch_get``: HiCacheFile
reads each file straight into the host page, unchecked; kvmm takes the tier's copy (ArenaTier
hands out a private copy, MmapTier reads the record and checks its CRC, which is how a torn page
is never served) and then copies it into the host page.

Skips (with the reason) when SGLang is not installed: run it in the sglang venv that ``.ci/run``
builds (``.ci/venvs/sglang/bin/python -m pytest bench/test_bench_sglang_adapter.py``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from bench.conftest import info, size

PAGES = size(128, 8)  # STORAGE_BATCH_SIZE, SGLang's pages per storage call
ROUNDS = size(20, 2)
BACKENDS = {"kvmm-mmap": ("kvmm", "KvmmHiCacheStorage over MmapTier + LRU"),
            "kvmm-arena": ("kvmm", "KvmmHiCacheStorage over ArenaTier + LRU"),
            "hicache-file": ("baseline", "SGLang HiCacheFile")}


@pytest.fixture(scope="module")
def sglang():
    if importlib.util.find_spec("sglang") is None:  # checked first: the env module stubs torchvision
        pytest.skip("sglang not installed; SGLang's HiCache storage not timed")
    from kvmm.testing.engines import sglang_env

    return sglang_env


def make_backend(sglang, kind, tmp_path, pool):
    if kind == "hicache-file":
        from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

        config = sglang.storage_config({"file_storage_path": str(tmp_path / "hicache")})
        backend = StorageBackendFactory.create_backend("file", config, pool)
    else:
        tier = {"tier": "mmap", "path": str(tmp_path / "kvmm")} if kind == "kvmm-mmap" else {"tier": "arena"}
        backend = sglang.create({**tier, "capacity_bytes": 1 << 30, "eviction": "lru"}, pool)
    backend.register_mem_pool_host(pool)
    return backend


@pytest.mark.parametrize("kind", list(BACKENDS))
@pytest.mark.parametrize("op", ["batch_set", "batch_get", "batch_exists"])
def test_hicache_storage_op(benchmark, sglang, tmp_path, monkeypatch, op, kind):
    monkeypatch.delenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", raising=False)
    pool = sglang.HostPool("page_first", pages=PAGES, page_size=16, layer_num=4, head_num=4, head_dim=64, seed=0)
    backend = make_backend(sglang, kind, tmp_path, pool)
    keys = [f"{i:064x}" for i in range(PAGES)]  # SHA-256 hex, like SGLang's page hashes
    pages = [pool.get_data_page(i * pool.page_size, flat=True) for i in range(PAGES)]
    benchmark.group = f"sglang-hicache: {op}"
    role, label = BACKENDS[kind]
    info(benchmark, role, label, PAGES, "pages")
    if op == "batch_set":
        def empty():
            backend.clear()
            return (keys, pages), {}

        benchmark.pedantic(backend.batch_set, setup=empty, rounds=ROUNDS)
        assert backend.batch_exists(keys) == PAGES
    else:
        assert backend.batch_set(keys, pages)
        targets = [pool.get_dummy_flat_data_page() for _ in keys]
        if op == "batch_get":
            out = benchmark.pedantic(backend.batch_get, args=(keys, targets), rounds=ROUNDS, warmup_rounds=1)
            assert all(t is not None for t in out)
            assert torch.equal(out[-1].view(torch.uint8), pages[-1].contiguous().view(torch.uint8))
        else:
            assert benchmark.pedantic(backend.batch_exists, args=(keys,), rounds=ROUNDS * 10, warmup_rounds=1) == PAGES
    if hasattr(backend, "close"):
        backend.close()
