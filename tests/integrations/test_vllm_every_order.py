"""``make_cache_policy`` inside vLLM for every registered eviction order (vLLM venv only; the main
run does not collect tests/integrations).  Written over EVICTION_POLICIES, so orders registered
later are covered too."""

from __future__ import annotations

import pytest
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

import kvmm.integrations.vllm as kv
from kvmm.policies import EVICTION_POLICIES


# Offline orders (Belady) are refused: tests/integrations/test_vllm_policies.py
ONLINE = sorted(name for name, cls in EVICTION_POLICIES.items() if not getattr(cls, "offline", False))


@pytest.mark.parametrize("order", ONLINE)
def test_make_cache_policy_accepts_every_registered_order(order):
    factory = EVICTION_POLICIES[order]
    cls = kv.make_cache_policy(factory)
    assert issubclass(cls, CachePolicy) and cls.__name__ == f"Kvmm{factory.__name__}"
    first, second = cls(8), cls(8)
    assert type(first.policy) is factory and first.policy is not second.policy  # one policy per manager
