"""README 'Use inside vLLM': the example runs, and each --kv-transfer-config JSON is one vLLM
accepts and whose classes vLLM's factories load (vLLM venv only)."""

import json
import re

import pytest
from vllm.config import KVTransferConfig
from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

import kvmm.integrations.vllm as kv
from tests.integrations.readme_blocks import README, blocks, run_block


def test_readme_vllm_example_runs(tmp_path, monkeypatch, capsys):
    (source,) = blocks("vllm")
    run_block(source, "vllm example", tmp_path, monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["a stored 3 evicted 0", "b stored 0 evicted 0", "c stored 3 evicted 2", "True", "[] 2"]


def test_readme_kv_transfer_configs_load_in_vllm():
    configs = [json.loads(m) for m in re.findall(r"--kv-transfer-config '(\{.*?\})'\n", README.read_text())]
    assert len(configs) == 2
    for raw in configs:
        config = KVTransferConfig(**raw)
        assert config.kv_connector == "OffloadingConnector" and config.is_kv_transfer_instance
        extra = config.kv_connector_extra_config
        policy = CachePolicyFactory.get_cache_policy_cls(extra["eviction_policy"], extra["cache_policy_module_path"])
        assert policy in (kv.KvmmARC, kv.KvmmLRU)
    assert OffloadingSpecFactory.get_spec_cls(configs[1]["kv_connector_extra_config"]) is kv.KvmmOffloadingSpec
    assert kv.load_admission(configs[1]["kv_connector_extra_config"]["kvmm_admission"],
                             configs[1]["kv_connector_extra_config"]["kvmm_admission_args"]).k == 2


@pytest.mark.parametrize("command", ["pip install --no-deps vllm==0.33.0", "pip install -r .ci/requirements-vllm.txt"])
def test_readme_install_route_is_the_one_ci_uses(command):
    assert command in README.read_text()
    assert command.split("pip ", 1)[1].split()[-1] in (README.parent / ".ci" / "run").read_text()
