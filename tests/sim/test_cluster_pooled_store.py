"""A shared level modelled like Mooncake Store (kvmm.sim.pooled_store, issue 31 item 4).

* ``PooledStore()`` (one segment, one replica, watermark 1.0) equals the plain shared pool bit
  for bit: every SimResult field, with write-through and write-back levels and with the index;
* per-segment locality on a hand-worked example: each instance reads its own segment without
  the fabric, the other's over it, and a replica turns the second cross read local;
* the watermark eviction on a hand-worked example, and a Hypothesis stateful test of the
  segments with check() after every step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvmm.cluster.fabric import fabric_preset
from kvmm.errors import BadInputError
from kvmm.sim import GiB, SimConfig, TierLevel, simulate
from kvmm.sim.cluster_config import ClusterConfig, PooledStore
from kvmm.sim.pooled_store import SegmentedStore
from kvmm.tiers.spec import TierSpec
from tests.sim.sim_helpers import TOY_MODEL, trace
from tests.sim.test_cluster_sim import BLOCK_BYTES, FixedRouter, toy


@pytest.mark.parametrize("shared, router, private", [
    ((TierLevel("pooled-dram", capacity_bytes=8 * GiB),), "round-robin", ()),
    ((TierLevel("pooled-dram", capacity_bytes=4 * GiB, fill="write-back"),
      TierLevel("pooled-nvme", capacity_bytes=16 * GiB, eviction="arc")), "precise-prefix",
     (TierLevel("dram", capacity_bytes=2 * GiB, fill="write-back", inclusive=False),)),
])
def test_one_segment_one_replica_full_watermark_equals_the_single_pool(shared, router, private):
    base = SimConfig(workload="conversation", max_requests=600, load=0.8, tiers=private, gpu_kv_bytes=24 * GiB)
    pool = ClusterConfig(instances=3, router=router, shared_tiers=shared, fabric="rdma400")
    plain = simulate(base.with_(cluster=pool))
    store = simulate(base.with_(cluster=dataclasses.replace(pool, store=PooledStore(segments=1, replicas=1,
                                                                                    watermark=1.0))))
    assert sum(plain.tier_block_hits) > 0 and plain.fabric_bytes > 0 and sum(plain.tier_evictions) > 0
    a, b = plain.as_dict(), store.as_dict()
    assert {k for k in a if a[k] != b[k]} == set()
    assert plain == store


# ---------------------------------------------------------------- locality, worked by hand
# Instance 0 writes blocks 0-7, instance 1 blocks 100-107 (each its own segment); then each
# reads 8 blocks back: its own (no fabric, at the pool's own bandwidth) or the other's (over
# its 1e7 B/s link).  TTFT of a read request = copy time + prefill of its one new block + the
# staged read from the fast tier.
WARM = [(0, 8 * 512, 1, list(range(8))), (0, 8 * 512, 1, list(range(100, 108)))]
READ = [(100_000, 9 * 512, 1, list(range(8)) + [50]), (100_000, 9 * 512, 1, list(range(100, 108)) + [51])]
AGAIN = [(200_000, 9 * 512, 1, list(range(8)) + [52]), (200_000, 9 * 512, 1, list(range(100, 108)) + [53])]
LINK = 1e7
POOL = TierSpec("pool", 10**12, read_bandwidth=1e12, write_bandwidth=1e12, latency_s=0.0)
FAST = TierSpec("fast", 10**9, read_bandwidth=1e12, write_bandwidth=1e12, latency_s=0.0)
FABRIC = dataclasses.replace(fabric_preset("rdma400"), link_bandwidth=LINK, aggregate_bandwidth=2 * LINK, latency_s=0.0)
COPY_S = 8 * BLOCK_BYTES / LINK
LOCAL_S = 8 * BLOCK_BYTES / POOL.read_bandwidth
PREFILL_S = 512 / TOY_MODEL.prefill_tokens_per_s + 8 * BLOCK_BYTES / FAST.read_bandwidth


def run_reads(plan, store, rows=WARM + READ, engines=None):
    engines = [] if engines is None else engines
    res = simulate(toy(trace(rows), gpu_prefix_cache=False, tiers=(), policy="on-demand", fast_tier=FAST,
                       cluster=ClusterConfig(instances=2, router=FixedRouter(plan), shared_tiers=(TierLevel(POOL),),
                                             fabric=FABRIC, store=store)), engine_hook=engines.append)
    ttft = {r: float(e.table.first_token[r] - e.table.arrival[r]) for e in engines for r in e.arrival_ids if r >= 2}
    return res, [ttft[r] for r in sorted(ttft)]


def test_a_read_from_the_readers_own_segment_skips_the_fabric():
    engines = []
    res, ttft = run_reads([0, 1, 0, 1], PooledStore(segments=2), engines=engines)
    for e in engines:  # pool@local is the instance's own segment (9 blocks each); pool, every segment
        local, shared = e.hier.tiers
        assert local.name == "pool@local" and local.used_bytes == 9 * BLOCK_BYTES == shared.used_bytes // 2
        assert local.capacity_bytes == POOL.capacity_bytes // 2 and shared.capacity_bytes == POOL.capacity_bytes
    assert res.fabric_bytes == 0
    # levels: pool@local (the reader's segment), pool (every segment, over the fabric)
    assert res.tier_block_hits == (16, 16) and res.tier_read_blocks == (16, 0)
    assert ttft == pytest.approx([LOCAL_S + PREFILL_S] * 2)
    stats = res.policies["shared_store"][0].stats
    assert stats["fabric_write_bytes"] == 0 and stats["local_write_bytes"] == 18 * BLOCK_BYTES


def test_a_read_from_another_segment_crosses_the_fabric():
    res, ttft = run_reads([0, 1, 1, 0], PooledStore(segments=2))
    assert res.fabric_bytes == 16 * BLOCK_BYTES
    assert res.tier_block_hits == (0, 16) and res.tier_read_blocks == (0, 16)
    assert ttft == pytest.approx([COPY_S + PREFILL_S] * 2)


def test_one_segment_is_a_pool_on_no_instances_node():
    res, ttft = run_reads([0, 1, 0, 1], PooledStore(segments=1))
    assert res.fabric_bytes == 16 * BLOCK_BYTES and res.tier_block_hits == (16,)
    assert ttft == pytest.approx([COPY_S + PREFILL_S] * 2)
    stats = res.policies["shared_store"][0].stats
    assert stats["fabric_write_bytes"] == 18 * BLOCK_BYTES and stats["local_write_bytes"] == 0


def test_a_replica_turns_the_second_cross_read_local():
    for replicas, second in [(1, COPY_S), (2, LOCAL_S)]:
        res, ttft = run_reads([0, 1, 1, 0, 1, 0], PooledStore(segments=2, replicas=replicas), WARM + READ + AGAIN)
        assert ttft[:2] == pytest.approx([COPY_S + PREFILL_S] * 2)  # the first cross read is remote either way
        assert ttft[2:] == pytest.approx([second + PREFILL_S] * 2)
        store = res.policies["shared_store"][0]
        assert store.stats["replicas_written"] == (16 if replicas == 2 else 0)
        store.check()
        assert res.fabric_bytes == (32 if replicas == 1 else 16) * BLOCK_BYTES


# ---------------------------------------------------------------- watermark
def test_a_segment_evicts_past_its_watermark_down_by_the_fraction():
    level = TierLevel(TierSpec("pool", 20 * 100, 1e9, 1e9, 0.0))  # 20 blocks of 100 bytes, one segment
    store = SegmentedStore(level, PooledStore(segments=1, watermark=0.5, evict_fraction=0.25), instances=1,
                           logged=True)
    view = store.view(0)
    view.access_or_put_size_many(np.arange(10), 100, np.ones(10, dtype=bool))  # 10 blocks: at the high mark
    assert store.segments[0].used_bytes == 1000 and view.evictions == 0
    view.access_or_put_size_many(np.array([10]), 100, np.ones(1, dtype=bool))  # past it: LRU 0 goes, then 1-5
    assert sorted(store.where) == [6, 7, 8, 9, 10]
    assert view.evictions == 6 and store.stats["watermark_evictions"] == 5
    assert [k for k, stored in view.drain() if not stored] == [0, 1, 2, 3, 4, 5]
    store.check()


def test_write_flags_of_the_wrong_length_are_refused_in_every_layout():
    level = TierLevel(TierSpec("pool", 20 * 100, 1e9, 1e9, 0.0))
    for segments in (1, 2):
        view = SegmentedStore(level, PooledStore(segments=segments), instances=2, logged=True).view(0)
        with pytest.raises(BadInputError, match=r"one flag per key \(3\)"):
            view.access_or_put_size_many(np.arange(3), 100, np.ones(2, dtype=bool))


def test_bad_store_settings_are_refused():
    with pytest.raises(BadInputError, match="watermark"):
        PooledStore(watermark=0.5, evict_fraction=0.5)
    with pytest.raises(BadInputError, match="segments"):
        ClusterConfig(instances=2, shared_tiers=(TierLevel(POOL),), store=PooledStore(segments=3))
    with pytest.raises(BadInputError, match="one per shared level"):
        ClusterConfig(instances=2, shared_tiers=(TierLevel(POOL),), store=(PooledStore(), PooledStore()))
    plain = ClusterConfig(instances=2, shared_tiers=(TierLevel(POOL),))
    assert dataclasses.replace(plain, instances=3).store == () == plain.store  # replace keeps "no store"


# ---------------------------------------------------------------- stateful
class SegmentsMachine(RuleBasedStateMachine):
    """Random reads and writes by 3 instances over a store of 1-3 segments, replicas 1-2 and a
    watermark; check() after every step, and the hits each call reports are the blocks held."""

    @initialize(segments=st.integers(1, 3), replicas=st.integers(1, 2), mark=st.sampled_from([(1.0, 0.0), (0.8, 0.3)]))
    def setup(self, segments, replicas, mark):
        level = TierLevel(TierSpec("pool", 3 * 6 * 10, 1e9, 1e9, 0.0), eviction="lru")  # 6 blocks of 10 bytes a segment
        self.store = SegmentedStore(level, PooledStore(segments=segments, replicas=replicas, watermark=mark[0],
                                                       evict_fraction=mark[1]), instances=3, logged=True)
        self.views = [self.store.view(i) for i in range(3)]

    @rule(i=st.integers(0, 2), keys=st.lists(st.integers(0, 12), max_size=6), write=st.booleans())
    def offer(self, i, keys, write):
        held = self.views[i].contains_many(keys)
        hits = self.views[i].access_or_put_size_many(np.array(keys, dtype=np.int64), 10,
                                                     np.full(len(keys), write, dtype=bool))
        assert hits.shape == (len(keys),)
        for p, k in enumerate(keys):  # a hit was held when the call began, or written earlier in it
            assert not hits[p] or held[p] or (write and k in keys[:p])
        if write and len(set(keys)) == len(keys) and len(keys) <= 3:  # the low mark holds 3 blocks a segment
            assert self.views[i].contains_many(keys).all()  # what was written (or held) is held after

    @invariant()
    def consistent(self):
        self.store.check()


SegmentsMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestSegmentsMachine = SegmentsMachine.TestCase


def test_evict_until_evicts_in_the_policys_order_and_refuses_a_bad_mark():
    from kvmm.policies.eviction import LRUPolicy
    from kvmm.tiers.managed import ManagedTier
    from kvmm.tiers.simulated import SimulatedTier

    tier = ManagedTier(SimulatedTier(1000), LRUPolicy())
    for k in range(5):
        tier.put_size(k, 100)
    tier.get(0)  # 0 is the most recently used now
    with pytest.raises(BadInputError):
        tier.evict_until(-1)
    assert sorted(tier.keys()) == [0, 1, 2, 3, 4]
    assert tier.evict_until(250) == [1, 2, 3] and sorted(tier.keys()) == [0, 4] and tier.evictions == 3
    assert tier.evict_until(1000) == []
