"""KvmmHiCacheStorage loaded by SGLang 0.5.23's StorageBackendFactory over kvmm tiers, driven by
SGLang's own HiCache controller page paths and host-pool page code (sglang venv only)."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvmm.testing.engines.sglang_env import Controller, HostPool, create, storage_config  # first: loads SGLang

# isort: split
import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: E402

import kvmm.integrations.sglang as ks  # noqa: E402
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError, ShapeError  # noqa: E402
from kvmm.policies import LRUPolicy  # noqa: E402
from kvmm.testing.redis_server import *  # noqa: E402,F401,F403 - the redis_url fixture
from kvmm.tiers import ArenaTier, ManagedTier, MmapTier  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEYS = [f"page{i:03d}" for i in range(8)]
PAGE_VALUE = 768 + 49  # one page of HostPool(): 768 bytes, plus this backend's 49-byte header (pinned below)


def mmap_settings(path, **extra):
    return {"tier": "mmap", "path": str(path), "capacity_bytes": 1 << 22, **extra}


def snapshot(backend) -> dict:
    """Every tier key -> stored bytes (to check that a failed call changed nothing)."""
    return {k: backend.tier.get(k).tobytes() for k in sorted(backend.tier.keys())}


def test_sglang_version_is_the_pinned_one():
    assert importlib.metadata.version("sglang") == "0.5.23"


def test_factory_loads_the_backend_over_a_managed_mmap_tier(tmp_path):
    backend = create(mmap_settings(tmp_path, eviction="lfu"))
    assert isinstance(backend, ks.KvmmHiCacheStorage) and isinstance(backend, HiCacheStorage)
    assert isinstance(backend.tier, ManagedTier) and isinstance(backend.tier.backend, MmapTier)
    assert type(backend.tier.policy).__name__ == "LFUPolicy"
    assert backend.key_suffix == "_meta-llama-Llama-3.1-8B_0_1"  # HiCacheFile's scoping of the same rank
    backend.close()


@pytest.mark.parametrize("zero_copy", [False, True], ids=["generic", "interface_v1"])
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_controller_pages_round_trip_byte_exact(tmp_path, layout, zero_copy):
    source, target = HostPool(layout, seed=1), HostPool(layout, seed=None)
    backend = create(mmap_settings(tmp_path, interface_v1=int(zero_copy)), source)
    writer = Controller(backend, source)
    assert writer.backup(KEYS[:5], [0, 1, 2, 3, 4], zero_copy)
    assert backend.batch_exists(KEYS[:3] + ["missing"] + KEYS[3:5]) == 3  # leading hits only
    assert backend.exists(KEYS[4]) and not backend.exists(KEYS[5])
    backend.register_mem_pool_host(target)
    reader = Controller(backend, target)
    assert reader.load(KEYS[:5], [7, 6, 5, 4, 3], zero_copy) == 5  # into other host slots
    for src, dst in zip([0, 1, 2, 3, 4], [7, 6, 5, 4, 3]):
        assert target.page_bytes(dst) == source.page_bytes(src)
    assert reader.load([KEYS[0], "missing", KEYS[1]], [0, 1, 2], zero_copy) == 1  # stops at the first miss
    page = backend.get(KEYS[2])  # no target: a new tensor of the stored dtype and shape
    assert page.dtype == torch.bfloat16 and page.shape == (768 // 2,)
    assert page.view(torch.uint8).numpy().tobytes() == source.page_bytes(2)
    used = backend.tier.used_bytes
    assert backend.set(KEYS[0], torch.zeros(384, dtype=torch.bfloat16))  # stored already: True, not rewritten
    assert backend.tier.used_bytes == used and backend.get(KEYS[0]).view(torch.uint8).numpy().tobytes() == source.page_bytes(0)
    backend.close()


def test_mmap_pages_survive_close_and_reopen(tmp_path):
    source = HostPool("page_first", seed=2)
    backend = create(mmap_settings(tmp_path), source)
    assert Controller(backend, source).backup(KEYS, range(8))
    backend.close()
    target = HostPool("page_first", seed=None)
    backend = create(mmap_settings(tmp_path), target)  # a restarted server, same folder
    assert backend.batch_exists(KEYS) == 8 and len(backend.tier) == 8  # the policy knows the reopened pages
    assert Controller(backend, target).load(KEYS, range(8)) == 8
    assert all(target.page_bytes(p) == source.page_bytes(p) for p in range(8))
    backend.close()


WRITER = textwrap.dedent("""
    import importlib.util, sys, types
    sys.path.insert(0, {root!r})
    path = list(importlib.util.find_spec("sglang").submodule_search_locations)
    pkg = sys.modules["sglang"] = types.ModuleType("sglang"); pkg.__path__ = path  # the factory needs no more
    import torch
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    config = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True, model_name="m",
        extra_config={settings!r})
    backend = StorageBackendFactory.create_backend("dynamic", config, None)
    i = 0
    while True:
        gen = torch.Generator().manual_seed(i)
        backend.set(f"page{{i}}", torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=gen))
        print(i, flush=True)
        i += 1
""")


def expected_page(i: int) -> bytes:
    gen = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=gen).numpy().tobytes()


def test_kill_9_of_a_writer_serves_nothing_torn(tmp_path):
    from kvmm.testing.engines.sglang_env import DYNAMIC

    settings = {**DYNAMIC, **mmap_settings(tmp_path, capacity_bytes=1 << 30)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), settings=settings)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    done = [int(proc.stdout.readline()) for _ in range(200)]  # 200 sets completed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    backend = create(mmap_settings(tmp_path, capacity_bytes=1 << 30), model_name="m")
    stored = sorted(int(k.removeprefix("page").split("_")[0]) for k in backend.tier.keys())
    # every reported set survived, and the writer got no further than one past what it printed
    assert set(done) <= set(stored) and stored == list(range(len(stored))) and len(stored) >= 200
    for i in stored:  # nothing torn is served: every page present is byte-exact
        assert backend.get(f"page{i}").numpy().tobytes() == expected_page(i)
    backend.close()


def test_redis_tier_shared_by_two_nodes(redis_url, redis_prefix):
    settings = {"tier": "redis", "url": redis_url, "prefix": redis_prefix, "capacity_bytes": 1 << 20}
    pool_a, pool_b = HostPool("page_first", seed=3), HostPool("page_first", seed=None)
    node_a, node_b = create(settings, pool_a), create(settings, pool_b)
    assert Controller(node_a, pool_a).backup(KEYS[:4], range(4))
    assert node_b.batch_exists(KEYS) == 4  # node b sees node a's pages
    assert Controller(node_b, pool_b).load(KEYS[:4], range(4)) == 4
    assert all(pool_b.page_bytes(p) == pool_a.page_bytes(p) for p in range(4))
    other_rank = create(settings, HostPool("page_first"), tp_rank=1, tp_size=2)
    assert other_rank.batch_exists(KEYS) == 0  # another TP shard never reads this one's pages
    assert other_rank.clear() == 0 and node_b.clear() == 4 and node_a.batch_exists(KEYS) == 0
    node_a.tier.backend.drop_pool()
    for node in (node_a, node_b, other_rank):
        node.close()


def test_mla_pages_are_shared_by_every_tp_rank(tmp_path):
    settings = {"tier": "arena", "capacity_bytes": 1 << 20}
    rank0 = create(settings, is_mla_model=True, tp_rank=0, tp_size=2)
    rank1 = ks.KvmmHiCacheStorage(storage_config({}, is_mla_model=True, tp_rank=1, tp_size=2), tier=rank0.tier)
    assert rank0.set("p", torch.arange(8, dtype=torch.float16)) and rank1.exists("p")
    assert rank0.key_suffix == rank1.key_suffix == "_meta-llama-Llama-3.1-8B"


@pytest.mark.parametrize("make_call, error, match", [
    (lambda b, p: b.batch_set([KEYS[5], 17], [p.get_data_page(0), p.get_data_page(4)]), DTypeError, "str"),
    (lambda b, p: b.batch_set([KEYS[5], KEYS[6]], [p.get_data_page(0), p.get_data_page(4).float()]),
     DTypeError, "dtype"),
    (lambda b, p: b.batch_set([KEYS[5], KEYS[6]], [p.get_data_page(0), p.get_data_page(4)[:-1]]), ShapeError, "bytes"),
    (lambda b, p: b.batch_set([KEYS[5], KEYS[6]], [p.get_data_page(0)]), ShapeError, "one tensor per key"),
    (lambda b, p: b.set(KEYS[5], p.get_data_page(0).view(torch.int16).numpy()), DTypeError, "torch.Tensor"),
    (lambda b, p: b.get(KEYS[0], torch.zeros(384, dtype=torch.float16)), DTypeError, "dtype"),
    (lambda b, p: b.get(KEYS[0], torch.zeros(100, dtype=torch.bfloat16)), ShapeError, "host pool's page"),
    (lambda b, p: b.batch_exists([KEYS[0], b"raw"]), DTypeError, "str"),
    (lambda b, p: b.batch_set_v1(KEYS[5:7], torch.arange(5)), ShapeError, "host indices"),
])
def test_bad_input_raises_and_leaves_the_tier_unchanged(tmp_path, make_call, error, match):
    pool = HostPool("layer_first", seed=4)
    backend = create(mmap_settings(tmp_path, eviction="lru"), pool)
    assert Controller(backend, pool).backup(KEYS[:2], [0, 1])
    before, order = snapshot(backend), backend.tier.policy.keys()
    with pytest.raises(error, match=match):
        make_call(backend, pool)
    assert snapshot(backend) == before and backend.tier.policy.keys() == order
    backend.close()


@pytest.mark.parametrize("on_full", ["fail", "raise"])
def test_a_full_tier_that_cannot_evict_changes_nothing(tmp_path, on_full):
    pool = HostPool("page_first", seed=5)
    backend = create(mmap_settings(tmp_path, capacity_bytes=2 * PAGE_VALUE, eviction="none", on_full=on_full), pool)
    assert Controller(backend, pool).backup(KEYS[:2], [0, 1])
    before = snapshot(backend)
    if on_full == "raise":
        with pytest.raises(CapacityExceededError):
            Controller(backend, pool).backup(KEYS[2:3], [2])
    else:  # SGLang's documented result for a page not stored: False (its backup thread logs it)
        assert not Controller(backend, pool).backup(KEYS[2:3], [2]) and backend.refused == 1
    assert snapshot(backend) == before
    backend.close()


def test_one_page_takes_page_value_bytes_and_lru_evicts_the_oldest(tmp_path):
    pool = HostPool("page_first", seed=6)
    backend = create(mmap_settings(tmp_path, capacity_bytes=3 * PAGE_VALUE, eviction="lru"), pool)
    controller = Controller(backend, pool)
    assert controller.backup(KEYS[:1], [0]) and backend.tier.used_bytes == PAGE_VALUE
    assert controller.backup(KEYS[1:3], [1, 2])
    assert backend.set(KEYS[0], pool.get_data_page(0))  # a re-set is a use: page000 becomes the newest
    assert controller.backup(KEYS[3:4], [3])
    assert [backend.exists(k) for k in KEYS[:4]] == [True, False, True, True]
    backend.close()


def test_arena_tier_with_arc_and_an_admission_policy():
    pool = HostPool("page_first", seed=7)
    backend = create({"tier": "arena", "capacity_bytes": 3 * PAGE_VALUE, "eviction": "arc",
                      "admission": "StoreThreshold", "admission_args": {"k": 2}}, pool)
    assert type(backend.tier.policy).__name__ == "ARCPolicy" and type(backend.admission).__name__ == "StoreThreshold"
    controller = Controller(backend, pool)
    assert not controller.backup(KEYS[:6], range(6))  # first offer of each page: declined
    assert backend.admission_skipped == 1 and backend.batch_exists(KEYS) == 0
    assert controller.backup(KEYS[:6], range(6))  # offered twice: written, ARC keeps three
    assert len(backend.tier.keys()) == 3 and backend.get(KEYS[5]).view(torch.uint8).numpy().tobytes() == pool.page_bytes(5)


@pytest.mark.parametrize("settings, match", [
    ({"tier": "tape"}, "tier='tape'"),
    ({"tier": "mmap"}, "needs path"),
    ({"tier": "arena"}, "needs capacity_bytes"),
    ({"tier": "arena", "capacity_bytes": "lots"}, "capacity_bytes='lots'"),
    ({"tier": "arena", "capacity_bytes": 4096, "eviction": "random"}, "eviction='random'"),
    ({"tier": "arena", "capacity_bytes": 4096, "colour": "red"}, "unknown kvmm HiCache storage setting 'colour'"),
    ({"tier": "arena", "capacity_bytes": 4096, "on_full": "shrug"}, "on_full='shrug'"),
    ({"tier": "arena", "capacity_bytes": 4096, "admission": "Nope"}, "admission 'Nope': cannot load 'Nope'"),
])
def test_bad_settings_are_named(settings, match):
    with pytest.raises(BadInputError, match=match):  # SGLang's factory logs and re-raises
        create(settings)


def test_python_construction_over_any_tier():
    tier = ManagedTier(ArenaTier(1 << 16), LRUPolicy())
    backend = ks.KvmmHiCacheStorage(storage_config(None), tier=tier)
    value = torch.randn(4, 16, dtype=torch.float32)
    assert backend.batch_set(["a", "b"], [value, value * 2])
    got = backend.batch_get(["a", "b", "c"])
    assert torch.equal(got[0], value) and torch.equal(got[1], value * 2) and got[2] is None
    assert backend.batch_exists(["a", "b", "c"]) == 2
    with pytest.raises(DTypeError, match="HiCacheStorageConfig"):
        ks.KvmmHiCacheStorage({"tier": "arena"})


def test_a_page_twice_in_one_batch_keeps_its_first_copy():
    # SGLang never rewrites a stored page; within one batch the first copy is the stored one
    # (found by the stateful test: the second copy used to overwrite the first).
    backend = ks.KvmmHiCacheStorage(storage_config(None), tier=ArenaTier(1 << 16))
    first, second = torch.ones(4, dtype=torch.float16), torch.zeros(4, dtype=torch.float16)
    assert backend.batch_set(["p", "p"], [first, second])
    assert torch.equal(backend.get("p"), first) and len(backend.tier.keys()) == 1
