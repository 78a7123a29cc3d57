"""The simulator is a composition of the library: three cross-checks on the bundled Mooncake traces.

1. One LRU tier fed every block (write-all), one request at a time, no GPU prefix cache: the
   tier's block hits equal ``StackDistanceTracker``'s LRU hits at that capacity, exactly.
2. The GPU pool's answers equal a direct ``BlockAllocator`` replay of the same operations.
3. An eviction policy written here (registered nowhere) runs in the simulator and sees every
   insert, access and remove; its run equals the built-in LRU's.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from kvmm.allocators.block_allocator import BlockAllocator
from kvmm.errors import BadInputError
from kvmm.policies.eviction import LRUPolicy
from kvmm.policies.mrc.stack_distance import StackDistanceTracker
from kvmm.sim import SimConfig, TierLevel, simulate
from kvmm.sim.config import make_eviction
from kvmm.sim.simulator import resolve_trace
from kvmm.tiers.spec import preset
from kvmm.traces.mooncake import MooncakeTrace
from tests.sim.sim_helpers import make_engine

REQUESTS = 400
BLOCK_BYTES = 512 * 32 * 8 * 128 * 2 * 2  # llama3-8b: 512 tokens x 128 KiB


def one_at_a_time(name: str) -> MooncakeTrace:
    """The trace's first requests, 1000 s apart: each finishes before the next arrives."""
    t = resolve_trace(name, REQUESTS)
    return MooncakeTrace(t.name, np.arange(t.num_requests, dtype=np.int64) * 1_000_000, t.input_length,
                         t.output_length, t.block_offsets, t.block_ids)


def lru_config(trace, capacity_blocks, eviction="lru"):
    tier = TierLevel(preset("dram", capacity_blocks * BLOCK_BYTES), eviction=eviction, admission="write-all")
    return SimConfig(workload=trace, load=None, tiers=(tier,), gpu_prefix_cache=False, policy="on-demand")


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
@pytest.mark.parametrize("capacity", [64, 1024])
def test_lru_tier_hits_equal_the_stack_distance_mrc(name, capacity):
    trace = one_at_a_time(name)
    res = simulate(lru_config(trace, capacity))
    tracker = StackDistanceTracker()
    tracker.access(trace.block_ids)
    expected = int(round(float(tracker.histogram().hits(np.array([capacity]))[0])))
    assert res.tier_blocks_offered == (trace.block_ids.shape[0],)
    assert res.tier_block_hits == (expected,)
    assert 1 - expected / trace.block_ids.shape[0] == pytest.approx(float(tracker.mrc([capacity])[0]))
    assert expected > 0 and res.tier_evictions[0] > 0  # the tier was full: the order mattered


def test_gpu_pool_answers_equal_a_direct_block_allocator_replay():
    cfg = SimConfig(workload="conversation", max_requests=REQUESTS, load=0.9, gpu_kv_bytes=40 * BLOCK_BYTES * 8)
    eng = make_engine(cfg, record_ops=True)
    eng.run()
    ops = eng.hier.ops
    kinds = {op[0] for op in ops}
    assert kinds == {"lookup", "admit", "free"}
    ref = BlockAllocator(eng.hier.num_blocks, 512, secret=bytes(16))
    for op in ops:
        if op[0] == "lookup":
            assert ref.lookup(op[1]).shape[0] == op[2]
        elif op[0] == "admit":
            ids, hits = ref.admit(op[1], op[2])
            assert hits == op[4] and np.array_equal(ids, op[3])
        else:
            ref.free(op[1])
    ref.check()
    eng.hier.pool.check()
    assert ref.stats == eng.hier.pool.stats
    assert ref.stats["hits"] > 0 and ref.stats["evictions"] > 0  # the pool was both reused and full


class RecordingLRU:
    """A user's eviction policy: LRU in 15 lines, recording every event (no kvmm base class)."""

    def __init__(self):
        self.order: OrderedDict = OrderedDict()
        self.events: list[tuple[str, int]] = []

    def on_insert(self, key, size=1):
        self.events.append(("insert", key))
        self.order[key] = size

    def on_access(self, key, size=None):
        self.events.append(("access", key))
        self.order.move_to_end(key)

    def on_remove(self, key):
        self.events.append(("remove", key))
        del self.order[key]

    def victims(self, n, protected=()):
        return [k for k in self.order if k not in protected][:n]


def test_an_unregistered_policy_object_sees_every_event():
    trace = one_at_a_time("conversation")
    cfg = lru_config(trace, 64, eviction=RecordingLRU())
    engines = []
    res = simulate(cfg, engine_hook=engines.append)
    tier = engines[0].hier.tiers[0]
    policy = tier.policy
    assert isinstance(policy, RecordingLRU) and policy is not cfg.tiers[0].eviction  # a fresh copy per run
    counts = {k: sum(1 for e in policy.events if e[0] == k) for k in ("insert", "access", "remove")}
    assert counts["access"] == res.tier_block_hits[0]
    assert counts["remove"] == tier.evictions == res.tier_evictions[0] > 0
    assert counts["insert"] - counts["remove"] == len(tier) == len(policy.order)
    assert set(policy.order) == set(tier.keys())
    assert counts["insert"] + counts["access"] == trace.block_ids.shape[0]  # every offered block, once
    builtin = simulate(lru_config(trace, 64))
    assert (builtin.tier_block_hits, builtin.tier_evictions, builtin.ttft_p95) == \
        (res.tier_block_hits, res.tier_evictions, res.ttft_p95)


def test_admission_sees_the_gpu_hits():
    """SGLang-style selective write-through writes a block once it was hit on the GPU: it needs the
    pool's hits passed down (a write-all tier holds far more)."""
    sizes = {}
    for admission in ("write-all", "selective"):
        engines = []
        cfg = SimConfig(workload="conversation", max_requests=REQUESTS, load=0.8, policy="on-demand",
                        tiers=(TierLevel("dram", admission=admission),))
        simulate(cfg, engine_hook=engines.append)
        sizes[admission] = len(engines[0].hier.tiers[0])
    assert 0 < sizes["selective"] < sizes["write-all"] / 2


class DuckWriteAll:
    """Write-all admission written as a user would (not kvmm's WriteAll): every block not cached."""

    def admit(self, request):
        return ~np.asarray(request.cached)


@pytest.mark.parametrize("capacity", [64, 1 << 20])
def test_builtin_write_all_equals_a_user_written_one(capacity):
    # the simulator skips the admission call for kvmm's own WriteAll (it admits everything not
    # cached, and cached blocks are kept); a duck-typed equivalent takes the general path
    def run(admission):
        tier = TierLevel(preset("dram", capacity * BLOCK_BYTES), eviction="lru", admission=admission)
        return simulate(SimConfig(workload="conversation", max_requests=REQUESTS, load=0.8, policy="timely",
                                  tiers=(tier,)))

    builtin, duck = run("write-all"), run(DuckWriteAll())
    assert duck.as_dict() == builtin.as_dict()
    assert builtin.tier_block_hits[0] > 0 and (capacity > 64 or builtin.tier_evictions[0] > 0)


@pytest.mark.parametrize("make, message", [
    (lambda: TierLevel(eviction="mru"), r"unknown eviction policy 'mru'; expected one of \[.*'arc'.*'lirs'.*'lru'"),
    (lambda: TierLevel(eviction=DuckWriteAll()),
     r"eviction policy DuckWriteAll lacks \['on_insert', 'on_access', 'on_remove', 'victims'\]"),
    (lambda: TierLevel(admission="write-none"), r"unknown admission policy 'write-none'; expected one of \['refill-filter'"),
    (lambda: TierLevel(admission=object()), r"admission policy object lacks \['admit'\]"),
    (lambda: SimConfig(scorer="h3o"), r"unknown scorer 'h3o'; expected one of \['h2o'"),
    (lambda: SimConfig(scorer=DuckWriteAll()), r"scorer DuckWriteAll lacks \['observe', 'scores'\]"),
])
def test_a_policy_is_a_registered_name_or_an_object_with_its_methods(make, message):
    with pytest.raises(BadInputError, match=message):
        make()


def test_eviction_names_are_case_insensitive():
    assert TierLevel(eviction="LRU").eviction == "LRU"
    assert isinstance(make_eviction("LRU"), LRUPolicy)


def test_the_run_returns_its_own_policy_objects():
    # the config's objects are copied for the run and stay untouched; SimResult.policies gives back
    # the copies that saw the run (their counters are the run's)
    from kvmm.policies.admission import StoreThreshold

    trace = one_at_a_time("conversation")
    given = RecordingLRU()
    admission = StoreThreshold()
    cfg = lru_config(trace, 64, eviction=given).with_(
        tiers=(TierLevel(preset("dram", 64 * BLOCK_BYTES), eviction=given, admission=admission),))
    res = simulate(cfg)
    used = res.policies["eviction"][0][0]
    assert isinstance(used, RecordingLRU) and used is not given
    assert len(given.events) == 0 and len(used.events) > 0
    assert isinstance(res.policies["admission"][0][0], StoreThreshold)
    assert res.policies["admission"][0][0] is not admission
    assert res.policies["scorer"] == (None,)
    assert "policies" not in res.as_dict()
