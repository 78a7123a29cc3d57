"""KvmmHiCacheStorage's v2 calls (``register_mem_host_pool_v2``, ``batch_exists_v2``,
``batch_get_v2``, ``batch_set_v2``), which SGLang 0.5.23's HybridCacheController uses for a hybrid
model's sidecar pools (Mamba / SWA states, DSA indexer), against SGLang's own file backend
(HiCacheFile) driven the same way: the same answers, the same keys, the same bytes (sglang venv
only).  Until issue 33 the three calls raised NotImplementedError (HiCacheStorage's defaults)."""

from __future__ import annotations

import os

import pytest

from kvmm.testing.engines.sglang_env import HostPool, create, storage_config  # first: loads SGLang

# isort: split
import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from kvmm.errors import BadInputError, DTypeError  # noqa: E402

KEYS = [f"{i:02x}" * 8 for i in range(6)]  # page hashes
PAGE = 4  # tokens per page of every pool below


def pools(seed):
    """The KV pool and two sidecars of another geometry and dtype (8 pages each)."""
    return {PoolName.KV: HostPool("page_first", seed=seed),
            PoolName.MAMBA: HostPool("page_first", layer_num=1, head_num=1, head_dim=16, dtype=torch.float32,
                                     seed=None if seed is None else seed + 1),
            PoolName.INDEXER: HostPool("layer_first", layer_num=2, head_num=1, head_dim=4, dtype=torch.float16,
                                       seed=None if seed is None else seed + 2)}


def indices(pages):
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages]) if pages else torch.empty(0, dtype=torch.int64)


def transfer(name, keys, pages, policy=PoolHitPolicy.ALL_PAGES):
    return PoolTransfer(name=name, keys=list(keys), host_indices=indices(pages), hit_policy=policy)


def backends(tmp_path, host, **fields):
    """(kvmm over an MmapTier, SGLang's HiCacheFile), each with the pools registered as the
    controller registers them: the KV pool as the anchor, then every pool through v2."""
    ours = create({"tier": "mmap", "path": str(tmp_path / "kvmm"), "capacity_bytes": 1 << 24}, host[PoolName.KV],
                  **fields)
    (tmp_path / "file").mkdir()  # HiCacheFile leaves that to TP rank 0
    config = storage_config({"file_storage_path": str(tmp_path / "file")}, **fields)
    theirs = StorageBackendFactory.create_backend("file", config, host[PoolName.KV])
    theirs.register_mem_pool_host(host[PoolName.KV])
    for backend in (ours, theirs):
        for name, pool in host.items():
            backend.register_mem_host_pool_v2(pool, name)
        backend.on_host_pools_registered()
    return ours, theirs


def backup(backend):
    """KV pages 0-4 with the indexer of each (all pages) and the Mamba state of the last two."""
    return backend.batch_set_v2([transfer(PoolName.KV, KEYS[:5], range(5)),
                                 transfer(PoolName.INDEXER, KEYS[:5], range(5)),
                                 transfer(PoolName.MAMBA, KEYS[3:5], [6, 7], PoolHitPolicy.TRAILING_PAGES)])


def test_v2_calls_answer_as_sglangs_file_backend(tmp_path):
    host = pools(seed=3)
    ours, theirs = backends(tmp_path, host)
    assert backup(ours) == backup(theirs) == {PoolName.KV: [True] * 5, PoolName.INDEXER: [True] * 5,
                                              PoolName.MAMBA: [True, True]}
    for queried in ([PoolName.INDEXER], [PoolName.MAMBA], [PoolName.INDEXER, PoolName.MAMBA]):
        for n_keys in (3, 5, 6):
            query = [transfer(name, KEYS[n_keys - 2:n_keys] if name == PoolName.MAMBA else [], [],
                              PoolHitPolicy.TRAILING_PAGES if name == PoolName.MAMBA else PoolHitPolicy.ALL_PAGES)
                     for name in queried]
            a, b = ours.batch_exists_v2(KEYS[:n_keys], query), theirs.batch_exists_v2(KEYS[:n_keys], query)
            assert (a.kv_hit_pages, a.extra_pool_hit_pages, a.restorable_prefix_pages) == \
                   (b.kv_hit_pages, b.extra_pool_hit_pages, b.restorable_prefix_pages), (queried, n_keys)
    # pinned: the Mamba state exists for the prefixes ending at pages 4 and 5 only
    result = ours.batch_exists_v2(KEYS, [transfer(PoolName.MAMBA, KEYS[4:6], [], PoolHitPolicy.TRAILING_PAGES)])
    assert (result.kv_hit_pages, result.restorable_prefix_pages) == (5, [5])
    assert result.extra_pool_hit_pages == {PoolName.KV: 5, PoolName.MAMBA: 5}
    assert ours.batch_exists_v2(KEYS[:4], [transfer(PoolName.MAMBA, KEYS[2:4], [], PoolHitPolicy.TRAILING_PAGES)]
                                ).restorable_prefix_pages == []  # its state of page 3 alone is not a window of 2


def test_v2_pages_round_trip_byte_exact_as_in_the_file_backend(tmp_path):
    host = pools(seed=7)
    ours, theirs = backends(tmp_path, host)
    backup(ours), backup(theirs)
    loads = [transfer(PoolName.KV, KEYS[:5], range(5)), transfer(PoolName.INDEXER, KEYS[:5], range(5)),
             transfer(PoolName.MAMBA, KEYS[3:5], [6, 7]), transfer(PoolName.MAMBA, KEYS[5:6], [5])]
    targets = {}
    for side, backend in (("kvmm", ours), ("file", theirs)):
        targets[side] = pools(seed=None)
        for name, pool in targets[side].items():
            backend.register_mem_host_pool_v2(pool, name)  # a reload into other host memory
        assert backend.batch_get_v2(loads[:3]) == {PoolName.KV: [True] * 5, PoolName.INDEXER: [True] * 5,
                                                   PoolName.MAMBA: [True, True]}
        assert backend.batch_get_v2(loads[3:]) == {PoolName.MAMBA: [False]}  # never stored
    for name, pages in ((PoolName.KV, range(5)), (PoolName.INDEXER, range(5)), (PoolName.MAMBA, [6, 7])):
        for page in pages:
            assert targets["kvmm"][name].page_bytes(page) == host[name].page_bytes(page)
            assert targets["file"][name].page_bytes(page) == host[name].page_bytes(page)


@pytest.mark.parametrize("mla", [False, True])
def test_v2_keys_are_the_file_backends_names(tmp_path, mla):
    """One tier key per file HiCacheFile writes: ``key`` or ``key.<pool>``, then the rank's suffix,
    the TP-sharded one for Mamba state even where MLA KV is shared by the TP ranks."""
    host = pools(seed=1)
    ours, theirs = backends(tmp_path, host, tp_rank=1, tp_size=2, is_mla_model=mla)
    assert backup(ours) == backup(theirs)
    files = {name.removesuffix(".bin") for name in os.listdir(tmp_path / "file") if name.endswith(".bin")}
    assert set(ours.tier.keys()) == files and len(files) == 12
    assert (f"{KEYS[4]}.mamba_meta-llama-Llama-3.1-8B_1_2" in files) and (
        f"{KEYS[0]}_meta-llama-Llama-3.1-8B{'' if mla else '_1_2'}" in files)
    assert ours.clear() == 12 and list(ours.tier.keys()) == []


def test_a_transfer_whose_indices_do_not_fit_moves_nothing_as_in_the_file_backend(tmp_path):
    host = pools(seed=2)
    ours, theirs = backends(tmp_path, host)
    short = [transfer(PoolName.KV, KEYS[:2], [0]), transfer(PoolName.INDEXER, KEYS[:1], [0])]
    assert ours.batch_set_v2(short) == theirs.batch_set_v2(short) == {PoolName.KV: [False, False],
                                                                      PoolName.INDEXER: [True]}
    assert list(ours.tier.keys()) == [f"{KEYS[0]}.indexer_meta-llama-Llama-3.1-8B_0_1"]


def test_bad_v2_input_is_refused_before_anything_moves(tmp_path):
    host = pools(seed=4)
    ours, _ = backends(tmp_path, host)
    blocks = PoolTransfer(name=PoolName.MAMBA, keys=KEYS[:2], hit_policy=PoolHitPolicy.BLOCK_GROUPS)
    with pytest.raises(BadInputError, match="hit policy .*block_groups.* expected all_pages or trailing_pages"):
        ours.batch_exists_v2(KEYS, [blocks])
    unknown = transfer(PoolName.SWA, KEYS[:1], [0])
    with pytest.raises(BadInputError, match="no host pool .*swa.* registered"):
        ours.batch_set_v2([transfer(PoolName.KV, KEYS[:1], [0]), unknown])
    with pytest.raises(DTypeError, match="page hashes"):
        ours.batch_set_v2([transfer(PoolName.KV, KEYS[:1], [0]), transfer(PoolName.MAMBA, [7], [1])])
    assert list(ours.tier.keys()) == []
    with pytest.raises(BadInputError, match="lacks get_data_page"):
        ours.register_mem_host_pool_v2(object(), PoolName.SWA)
    assert PoolName.SWA not in ours.registered_pools
