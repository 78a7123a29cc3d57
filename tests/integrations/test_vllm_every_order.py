"""``make_cache_policy`` inside vLLM for every registered eviction order (vLLM venv only; the main
run does not collect tests/integrations): each replays the bundled trace through vLLM's real
manager with the invariants checked after every request; 2Q's ghosts and LIRS's self-evictions
survive vLLM's batch ``evict(n)``.  Written over EVICTION_POLICIES, so orders registered later are
covered too."""

from __future__ import annotations

import pytest
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

import kvmm.integrations.vllm as kv
from kvmm.policies import EVICTION_POLICIES, FIFOPolicy, LIRSPolicy, TwoQPolicy
from kvmm.testing.engines.vllm_replay import replay_vllm
from kvmm.traces import load_mooncake

# Offline orders (Belady) are refused: tests/integrations/test_vllm_policies.py
ONLINE = sorted(name for name, cls in EVICTION_POLICIES.items() if not getattr(cls, "offline", False))


@pytest.mark.parametrize("order", ONLINE)
def test_make_cache_policy_accepts_every_registered_order(order):
    factory = EVICTION_POLICIES[order]
    cls = kv.make_cache_policy(factory)
    assert issubclass(cls, CachePolicy) and cls.__name__ == f"Kvmm{factory.__name__}"
    first, second = cls(8), cls(8)
    assert type(first.policy) is factory and first.policy is not second.policy  # one policy per manager


N_REQUESTS = 1500
CAPACITY = 600  # blocks of the bundled Mooncake conversation trace: many evictions


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


def replay_order(factory, trace, name=None):
    """The trace through vLLM's real manager with a kvmm policy; the adapter's and the policy's
    invariants (every resident chunk tracked, pending or dropped, exactly once) after each request."""
    manager = CPUOffloadingManager(CAPACITY, cache_policy="KvmmARC", cache_policy_module_path=kv.MODULE_PATH)
    manager._policy = kv.make_cache_policy(factory, name=name)(cache_capacity=CAPACITY)  # vLLM loads by name
    ours = manager._policy
    result = replay_vllm(manager, trace, N_REQUESTS, check=lambda: (ours.check(), ours.policy.check()))
    return ours, result


@pytest.mark.parametrize("order", ONLINE)
def test_every_order_replays_a_trace_inside_vllm(trace, order):
    ours, result = replay_order(EVICTION_POLICIES[order], trace)
    hits, evicted = sum(r[0] for r in result), sum(len(r[2]) for r in result)
    assert hits > 1000 and evicted > 5000  # the trace reuses prefixes and overflows the tier
    assert len(ours.chunks) <= CAPACITY


def test_2q_inside_vllm_keeps_ghosts_and_promotes_them_unlike_fifo(trace):
    # vLLM's evict(n) names no incoming key: the adapter calls on_evict, so an A1in victim
    # becomes a ghost and its return enters Am (with on_remove, a delete, 2Q would be FIFO)
    twoq, result = replay_order(TwoQPolicy, trace)
    _, fifo = replay_order(FIFOPolicy, trace)
    queues = twoq.policy.queues()
    assert queues["A1out"] and queues["Am"]
    assert [r[0] for r in result] != [r[0] for r in fifo]


class RecordingLIRS(LIRSPolicy):
    """LIRS that records the keys its inserts and accesses evict on its own (a subclass: the
    checked hooks)."""

    def __post_init__(self):
        super().__post_init__()
        self.named = set()

    def on_insert(self, key, size=1, protected=()):
        out = super().on_insert(key, size, protected)
        self.named.update(out)
        return out

    def on_access(self, key, size=None, protected=()):
        out = super().on_access(key, size, protected)
        self.named.update(out)
        return out


def test_lirs_self_evictions_are_dropped_then_handed_to_vllm_first(trace):
    # a demoted LIR key pushes out Q's oldest although vLLM asked for no room: the adapter
    # removes it from the policy (as ManagedTier evicts it) and keeps the chunk as dropped until
    # vLLM's next evict, which returns it before the policy's victims
    ours, result = replay_order(RecordingLIRS, trace, name="KvmmRecordingLIRS")
    named = ours.policy.named
    assert named
    evicted = [k for r in result for k in r[2]]
    assert named & set(evicted)
    assert set(ours._dropped) <= named and set(ours._dropped).isdisjoint(ours.policy.keys())
