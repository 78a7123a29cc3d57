"""kvmm cache policies inside vLLM 0.33's real ``CPUOffloadingManager``, per request.

Each group replays the first Mooncake conversation requests through a fresh
``CPUOffloadingManager`` (600 blocks: many hits and many evictions), one request at a time as
vLLM's offloading scheduler drives a request that runs alone (``kvmm/testing/engines/vllm_replay``:
lookup, load the hit prefix, ``prepare_store`` + ``complete_store`` the rest, finish), unit:
requests.  The baseline is vLLM's own policy of the same algorithm, timed in the same run:

* ``vllm-offloading: arc``: ``KvmmARC`` against vLLM's ``arc``;
* ``vllm-offloading: lru``: ``KvmmLRU`` against vLLM's ``lru``.

Skips (with the reason) when vLLM is not importable: run it in the vLLM venv that ``.ci/run``
builds (``.ci/venvs/vllm/bin/python -m pytest bench/test_bench_vllm_offloading.py``).
"""

from __future__ import annotations

import pytest

from bench.conftest import info, size
from kvmm.traces import load_mooncake

CAPACITY = 600
REQUESTS = size(1500, 40)


@pytest.fixture(scope="module")
def replay():
    try:
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

        import kvmm.integrations.vllm as kv
        from kvmm.testing.engines.vllm_replay import request_keys, run_request
    except ImportError as exc:
        pytest.skip(f"vllm not importable ({exc}); vLLM's CPUOffloadingManager not timed")
    trace = load_mooncake("conversation")
    requests = [request_keys(trace, i) for i in range(min(REQUESTS, trace.num_requests))]

    def run(policy: str) -> int:
        module = None if policy in ("lru", "arc") else kv.MODULE_PATH
        manager = CPUOffloadingManager(CAPACITY, cache_policy=policy, cache_policy_module_path=module)
        return sum(run_request(manager, f"r{i}", keys)[0] for i, keys in enumerate(requests))

    run.requests = len(requests)
    return run


@pytest.mark.parametrize("group, policy, role, label", [
    ("vllm-offloading: arc", "KvmmARC", "kvmm", "KvmmARC in CPUOffloadingManager"),
    ("vllm-offloading: arc", "arc", "baseline", "vLLM arc in CPUOffloadingManager"),
    ("vllm-offloading: lru", "KvmmLRU", "kvmm", "KvmmLRU in CPUOffloadingManager"),
    ("vllm-offloading: lru", "lru", "baseline", "vLLM lru in CPUOffloadingManager"),
])
def test_policy_in_cpu_offloading_manager(benchmark, replay, group, policy, role, label):
    benchmark.group = group
    info(benchmark, role, label, replay.requests, "requests")
    hits = benchmark.pedantic(replay, (policy,), rounds=size(5, 1), iterations=1)
    assert hits > 0
