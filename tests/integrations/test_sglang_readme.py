"""README "Use inside SGLang": the server flags parse with SGLang's own argument parser and build
the backend through its factory, and the Python block runs (sglang venv only)."""

from __future__ import annotations

import argparse
import json
import shlex

from kvmm.testing.engines.sglang_env import Controller, HostPool, storage_config  # first: loads SGLang

# isort: split
from sglang.srt.mem_cache import utils as mem_cache_utils  # noqa: E402
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

import kvmm.integrations.sglang as ks  # noqa: E402
from kvmm.policies import ARCPolicy  # noqa: E402
from tests.integrations.readme_blocks import blocks, run_block  # noqa: E402


def test_readme_server_flags_load_the_backend_through_sglang(tmp_path, monkeypatch):
    (command,) = blocks("sglang", "bash")
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv[3:])  # SGLang's own parser: every flag and value must be valid
    assert args.enable_hierarchical_cache and args.hicache_storage_backend == "dynamic"
    assert args.hicache_mem_layout == "page_first"
    monkeypatch.chdir(tmp_path)  # the config's relative tier folder lands here
    # SGLang's own reading of the flag: it takes its prefetch keys out, the rest reaches the factory
    extra, *_ = HybridCacheController.parse_storage_backend_extra_config(args.hicache_storage_backend_extra_config)
    assert extra == json.loads(args.hicache_storage_backend_extra_config)
    config = storage_config(extra, model_name=args.model_path)
    pool = HostPool(args.hicache_mem_layout, seed=11)
    backend = StorageBackendFactory.create_backend(args.hicache_storage_backend, config, pool)
    backend.register_mem_pool_host(pool)
    assert isinstance(backend, ks.KvmmHiCacheStorage) and isinstance(backend.tier.policy, ARCPolicy)
    assert backend.tier.capacity_bytes == 1_000_000_000 and (tmp_path / "kvmm-sglang").is_dir()
    controller = Controller(backend, pool)
    assert controller.backup(["a", "b"], [0, 1]) and backend.batch_exists(["a", "b", "c"]) == 2
    target = HostPool(args.hicache_mem_layout, seed=None)
    assert Controller(backend, target).load(["a", "b"], [0, 1]) == 2 and target.page_bytes(1) == pool.page_bytes(1)
    backend.close()


def test_readme_python_block_registers_the_strategies(tmp_path, monkeypatch, capsys):
    (source,) = blocks("sglang")
    run_block(source, "readme_sglang", tmp_path, monkeypatch)
    assert capsys.readouterr().out.split("#")[0].strip() == "['kvmm_fifo', 'kvmm_lfu', 'kvmm_lru']"
    assert mem_cache_utils._EVICTION_POLICY_FACTORIES["kvmm_lru"] is ks.STRATEGY_NAMES["kvmm_lru"]
