"""README "Use inside LMCache": the YAML loads through LMCache's own config reader and launcher,
and the Python block runs (lmcache venv only)."""

from __future__ import annotations

import collections

from kvmm.testing.engines.lmcache_replay import chunk_key  # noqa: F401 - first: quiets LMCache's logs

# isort: split
import torch  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator  # noqa: E402
from lmcache.v1.pin_monitor import PinMonitor  # noqa: E402
from lmcache.v1.storage_backend import cache_policy as lmcache_policies  # noqa: E402
from lmcache.v1.storage_backend import storage_plugin_launcher  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

import kvmm.integrations.lmcache as kl  # noqa: E402
from kvmm.policies import ARCPolicy  # noqa: E402
from kvmm.testing.engines.lmcache_plugin_helpers import expected_bytes, put_chunks, read_back  # noqa: E402
from tests.integrations.readme_blocks import blocks, run_block  # noqa: E402


def test_readme_yaml_loads_the_plugin_through_lmcache(tmp_path, monkeypatch):
    (yaml_text,) = blocks("lmcache", "yaml")
    monkeypatch.chdir(tmp_path)  # the YAML's relative tier folder lands here
    path = tmp_path / "lmcache.yaml"
    path.write_text(yaml_text)
    config = LMCacheEngineConfig.from_file(str(path))
    assert config.storage_plugins == ["kvmm"]
    PinMonitor.GetOrCreate(config)
    backend = LocalCPUBackend(config, metadata=None, dst_device="cpu",
                              memory_allocator=TensorMemoryAllocator(torch.empty(16 * 4096, dtype=torch.uint8)))
    plugins: collections.OrderedDict = collections.OrderedDict()
    storage_plugin_launcher(config, None, None, backend, "cpu", plugins)
    plugin = plugins["kvmm"]
    assert isinstance(plugin, kl.KvmmStoragePlugin) and isinstance(plugin.tier.policy, ARCPolicy)
    assert plugin.tier.backend.capacity_bytes == 1_000_000_000
    put_chunks(backend, plugin, [3])
    assert read_back(plugin, 3)[0] == expected_bytes(3)
    assert (tmp_path / "kvmm-lmcache").is_dir()
    plugin.close()


def test_readme_python_block_registers_the_policies(tmp_path, monkeypatch, capsys):
    (source,) = blocks("lmcache")
    run_block(source, "readme_lmcache", tmp_path, monkeypatch)
    assert capsys.readouterr().out.split("#")[0].strip() == "['KVMM_FIFO', 'KVMM_LFU', 'KVMM_LRU']"
    assert lmcache_policies.POLICY_MAPPING["KVMM_LRU"] is kl.KvmmLRU
