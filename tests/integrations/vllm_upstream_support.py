"""What runs vLLM 0.33.0's own manager tests (tests/integrations/test_vllm_upstream_manager.py)
against kvmm's policies as well as vLLM's (vLLM venv only).

`implementation` (autouse in that module) runs each test twice: "vllm" (vLLM's built-in "lru" /
"arc") and "kvmm" (KvmmLRU / KvmmARC, loaded by module path); after a kvmm run every kvmm cache
policy the test built must still satisfy its invariants.  `lru_state` / `arc_state` give the
tests vLLM's policy object, or for kvmm the same state under vLLM's field names.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

import kvmm.integrations.vllm as kv

#: vLLM's built-in policy name -> the kvmm class the kvmm run loads instead
KVMM_POLICIES = {"lru": "KvmmLRU", "arc": "KvmmARC"}

_current = {"implementation": "vllm"}


@pytest.fixture(autouse=True, params=["vllm", "kvmm"])
def implementation(request, monkeypatch):
    """Which implementation the test's managers use; a kvmm run checks every kvmm policy built."""
    built: list[kv.KvmmCachePolicy] = []
    init = kv.KvmmCachePolicy.__init__

    def recording_init(self, cache_capacity):
        init(self, cache_capacity)
        built.append(self)

    monkeypatch.setattr(kv.KvmmCachePolicy, "__init__", recording_init)
    _current["implementation"] = request.param
    try:
        yield request.param
    finally:
        _current["implementation"] = "vllm"
    assert (request.param == "kvmm") == bool(built)  # the run used the implementation it names
    for policy in built:
        policy.check()
        policy.policy.check()


def is_kvmm() -> bool:
    return _current["implementation"] == "kvmm"


def lru_class() -> type:
    return kv.KvmmLRU if is_kvmm() else LRUCachePolicy


def lru_state(manager):
    """The manager's LRU policy object (vLLM's class or KvmmLRU, as the run expects)."""
    policy = manager._policy
    assert type(policy) is lru_class()
    return policy


def arc_state(manager):
    """vLLM's ARCCachePolicy, or a :class:`KvmmArcView` of the manager's KvmmARC."""
    policy = manager._policy
    if not is_kvmm():
        assert isinstance(policy, ARCCachePolicy)
        return policy
    assert type(policy) is kv.KvmmARC
    return KvmmArcView(policy)


def pin(manager, key) -> None:
    """A test's direct ``ref_cnt = 1`` on a resident chunk (vLLM's policies read ref_cnt in
    evict; kvmm's is told through mark_non_evictable, as the manager tells it)."""
    chunk = manager._policy.get(key)
    chunk.ref_cnt = 1
    if is_kvmm():
        manager._policy.mark_non_evictable(key)


class KvmmArcView:
    """vLLM ARCCachePolicy's fields, read from (and ``target_t1_size`` written to) a KvmmARC.

    Reading a list first tells kvmm's ARC the stores it has not seen yet (what its next event
    would do): vLLM's ARC appends a chunk to T1 when it is inserted.
    """

    def __init__(self, cache_policy: kv.KvmmCachePolicy) -> None:
        self._cache_policy = cache_policy

    def _lists(self) -> dict:
        self._cache_policy._register_pending()
        return self._cache_policy.policy.lists()

    def _residents(self, name: str) -> OrderedDict:
        chunks = self._cache_policy.chunks
        return OrderedDict((key, chunks[key]) for key in self._lists()[name])

    @property
    def t1(self) -> OrderedDict:
        return self._residents("T1")

    @property
    def t2(self) -> OrderedDict:
        return self._residents("T2")

    @property
    def b1(self) -> OrderedDict:
        return OrderedDict.fromkeys(self._lists()["B1"])

    @property
    def b2(self) -> OrderedDict:
        return OrderedDict.fromkeys(self._lists()["B2"])

    @property
    def target_t1_size(self) -> float:
        return self._cache_policy.policy.p

    @target_t1_size.setter
    def target_t1_size(self, value: float) -> None:
        self._cache_policy.policy.p = float(value)

    @property
    def cache_capacity(self) -> int:
        return self._cache_policy.cache_capacity

    def get(self, key):
        return self._cache_policy.get(key)

    def evict(self, n, protected):
        return self._cache_policy.evict(n, protected)
