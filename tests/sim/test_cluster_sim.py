"""The cluster in the simulator (kvmm.sim.engine.cluster): routing, shared tiers, fabric contention.

Cross-checks from the issue: a cluster of one instance with a shared tier equals that instance
alone with the tier private; a shared LRU tier's block hits, requests replayed one at a time,
equal the exact LRU miss-ratio curve of the merged block stream at that capacity.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.policies.mrc.stack_distance import StackDistanceTracker
from kvmm.sim import GiB, SimConfig, TierLevel, simulate
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.tiers.spec import TierSpec
from tests.sim.sim_helpers import TOY_FAST, TOY_MODEL, trace

BLOCK_BYTES = 512 * TOY_MODEL.kv_bytes_per_token  # the toy traces use Mooncake's 512-token blocks


class FixedRouter:
    """A user-written router (no registration): request r goes to ``plan[r]``; it records the
    view it was shown."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.seen = []

    def route(self, request, view):
        self.seen.append((request.index, view.queue_lengths.copy(), view.running.copy()))
        return self.plan[request.index]


def spaced(rows, gap_ms=100_000):
    """A trace whose requests arrive ``gap_ms`` apart (each finishes before the next arrives)."""
    return trace([(i * gap_ms, len(b) * 512, 1, b) for i, b in enumerate(rows)])


def toy(workload, **kw):
    kw.setdefault("model", TOY_MODEL)
    kw.setdefault("load", None)
    kw.setdefault("fast_tier", TOY_FAST)
    kw.setdefault("gpu_kv_bytes", 10**10)
    kw.setdefault("stage_efficiency", 1.0)
    return SimConfig(workload=workload, **kw)


SLOW = TierSpec("toy-shared", 40 * BLOCK_BYTES, read_bandwidth=1e8, write_bandwidth=1e8, latency_s=0.001)


def test_one_instance_with_a_shared_tier_equals_it_alone_with_the_tier_private():
    for workload, level in [("conversation", TierLevel("nvme", capacity_bytes=64 * GiB)),
                            ("synthetic", TierLevel("dram", capacity_bytes=32 * GiB, eviction="arc"))]:
        alone = simulate(SimConfig(workload=workload, max_requests=1500, tiers=(level,)))
        cluster = simulate(SimConfig(workload=workload, max_requests=1500, tiers=(),
                                     cluster=ClusterConfig(instances=1, shared_tiers=(level,), fabric=None)))
        assert alone.tier_block_hits[0] > 0
        a, c = alone.as_dict(), cluster.as_dict()
        assert {k for k in a if a[k] != c[k]} == set()


def test_shared_lru_hits_replayed_one_request_at_a_time_equal_the_exact_mrc():
    rng = np.random.default_rng(7)
    rows = [list(rng.choice(60, size=rng.integers(1, 6), replace=False)) for _ in range(80)]
    capacity = 25
    level = TierLevel(dataclasses.replace(SLOW, capacity_bytes=capacity * BLOCK_BYTES), eviction="lru")
    plan = rng.integers(0, 3, size=len(rows)).tolist()
    res = simulate(toy(spaced(rows), gpu_prefix_cache=False, tiers=(),
                       cluster=ClusterConfig(instances=3, router=FixedRouter(plan), shared_tiers=(level,))))
    merged = np.array([b for r in rows for b in r], dtype=np.int64)
    tracker = StackDistanceTracker()
    tracker.access(merged)
    expected_hits = round(merged.size * (1.0 - float(tracker.mrc([capacity])[0])))
    assert res.tier_block_hits == (expected_hits,)
    assert res.tier_blocks_offered == (merged.size,)
    assert res.requests_per_instance == tuple(np.bincount(plan, minlength=3).tolist())


def test_the_router_sees_queues_and_running_batches_as_of_each_arrival():
    # r0 arrives at 0 and runs 4096 tokens of prefill (4.096 s); r1 at 1 s sees it running on 0
    rows = [(0, 4096, 50, list(range(8))), (1000, 512, 1, [100]), (1001, 512, 1, [101])]
    router = FixedRouter([0, 0, 1])
    res = simulate(toy(trace(rows), tiers=(), cluster=ClusterConfig(instances=2, router=router)))
    assert res.requests_per_instance == (2, 1)
    assert router.seen == []  # the config's router is copied for the run; the run's copy is returned
    (_, q0, r0), (_, q1, r1), (_, q2, r2) = res.policies["router"].seen
    assert q0.tolist() == [0, 0] and r0.tolist() == [0, 0]
    assert q1.tolist() == [0, 0] and r1.tolist() == [1, 0]  # r0 is prefilling (in the batch)
    assert q2.tolist() == [1, 0] and r2.tolist() == [1, 0]  # r1 waits behind r0's prefill step


def test_fabric_aggregate_is_shared_by_instances_reading_at_once():
    # two requests on two instances each read 8 blocks from the shared tier at the same moment;
    # with an aggregate of one link's bandwidth the second copy waits for the first
    from kvmm.cluster.fabric import fabric_preset

    warm = [(0, 8 * 512, 1, list(range(8))), (0, 8 * 512, 1, list(range(100, 108)))]
    read = [(100_000, 9 * 512, 1, list(range(8)) + [50]), (100_000, 9 * 512, 1, list(range(100, 108)) + [51])]
    link = 1e7
    wide = dataclasses.replace(fabric_preset("rdma400"), link_bandwidth=link, aggregate_bandwidth=2 * link, latency_s=0.0)
    narrow = dataclasses.replace(wide, aggregate_bandwidth=link)
    level = TierLevel(TierSpec("pool", 10**12, read_bandwidth=1e12, write_bandwidth=1e12, latency_s=0.0))
    fast = TierSpec("fast", 10**9, read_bandwidth=1e12, write_bandwidth=1e12, latency_s=0.0)
    ttft = {}
    for name, fab in [("wide", wide), ("narrow", narrow)]:
        engines = []
        res = simulate(toy(trace(warm + read), gpu_prefix_cache=False, tiers=(), policy="on-demand", fast_tier=fast,
                           cluster=ClusterConfig(instances=2, router=FixedRouter([0, 1, 0, 1]), shared_tiers=(level,),
                                                 fabric=fab)), engine_hook=engines.append)
        assert res.tier_block_hits == (16,)
        assert res.fabric_bytes == 16 * BLOCK_BYTES
        ttft[name] = sorted(float(e.table.first_token[r] - e.table.arrival[r]) for e in engines for r in e.arrival_ids if r >= 2)
    copy_s = 8 * BLOCK_BYTES / link
    prefill_s = 512 / TOY_MODEL.prefill_tokens_per_s + 8 * BLOCK_BYTES / fast.read_bandwidth  # new block + staged read
    assert ttft["wide"] == pytest.approx([copy_s + prefill_s] * 2)
    assert ttft["narrow"] == pytest.approx([copy_s + prefill_s, 2 * copy_s + prefill_s])


def test_cluster_config_errors_name_what_is_wrong():
    with pytest.raises(BadInputError, match="unknown router 'nope'"):
        ClusterConfig(router="nope")
    with pytest.raises(BadInputError, match="route"):
        ClusterConfig(router=object())
    with pytest.raises(BadInputError, match="instances"):
        ClusterConfig(instances=0)
    with pytest.raises(BadInputError, match="shared_tiers"):
        ClusterConfig(shared_tiers=3)
    with pytest.raises(BadInputError, match="give the number of instances once"):
        SimConfig(instances=2, cluster=ClusterConfig())
    with pytest.raises(BadInputError, match="cluster must be"):
        SimConfig(cluster="yes")


def test_out_of_order_arrivals_are_refused():
    rows = [(1000, 512, 1, [0]), (0, 512, 1, [1])]
    with pytest.raises(BadInputError, match="arrival order"):
        simulate(toy(trace(rows), tiers=(), cluster=ClusterConfig(instances=2)))


class CheckedPrecise:
    """precise-prefix with zero load weight, checked at every decision against the index as the
    router saw it: the chosen instance holds the longest prefix any instance holds."""

    uses_index = True

    def __init__(self, num_instances):
        from kvmm.cluster.routers import make_router

        self.inner = make_router("precise-prefix", num_instances, load_weight=0.0)
        self.decisions = 0
        self.with_hits = 0

    def route(self, request, view):
        hits = view.index.prefix_hits(request.block_ids).max(axis=1)
        chosen = self.inner.route(request, view)
        assert hits[chosen] == hits.max()
        self.decisions += 1
        self.with_hits += int(hits.max() > 0)
        return chosen


def test_precise_prefix_sends_each_request_to_an_instance_holding_its_longest_prefix():
    cfg = SimConfig(workload="conversation", max_requests=1500, tiers=(TierLevel("dram", capacity_bytes=64 * GiB),),
                    cluster=ClusterConfig(instances=4, router=CheckedPrecise(4)))
    res = simulate(cfg)
    router = res.policies["router"]
    assert router.decisions == 1500
    assert router.with_hits > 100  # the check bit: many requests found a prefix somewhere
    assert res.index_entries > 0


def test_the_index_agrees_with_the_instances_gpu_pools_and_private_tiers():
    # after the run, every key the index says instance i holds on the GPU is in i's prefix cache,
    # and every key of i's private tier is indexed under that tier's medium
    engines = []
    cfg = SimConfig(workload="conversation", max_requests=800, gpu_kv_bytes=16 * GiB,
                    tiers=(TierLevel("dram", capacity_bytes=8 * GiB),),
                    cluster=ClusterConfig(instances=3, router="precise-prefix", router_params={"load_weight": 1.0}))
    res = simulate(cfg, engine_hook=engines.append)
    view_index = _index_of(engines)
    table = view_index.as_dict()
    for i, eng in enumerate(engines):
        gpu = {k for k, holders in table.items() if (i, "GPU") in holders}
        cached = {int(key[0]) for key in eng.hier.pool.cached_map()}
        assert gpu == cached
        tier = {k for k, holders in table.items() if (i, "dram") in holders}
        assert tier == {int(k) for k in eng.hier.tiers[0].keys()}
    assert res.index_entries == len(table)
    assert sum(int(e.hier.pool.stats["evictions"]) for e in engines) > 0  # removals were exercised too
    assert sum(e.hier.tiers[0].evictions for e in engines) > 0


def _index_of(engines):
    """The BlockIndex the engines feed (each engine's events callback closes over it)."""
    feed = engines[0].hier.events
    cells = dict(zip(feed.__code__.co_freevars, (c.cell_contents for c in feed.__closure__)))
    return cells["index"]


def test_a_pd_cluster_routes_each_request_to_a_prefill_instance():
    from kvmm.sim import PDConfig

    base = SimConfig(max_requests=600, pd=PDConfig(3, 2))
    rr = simulate(base.with_(cluster=ClusterConfig(instances=3, router="round-robin")))
    assert rr.requests_per_instance == (200, 200, 200) and rr.policy == "pd"
    checked = simulate(base.with_(cluster=ClusterConfig(instances=3, router=CheckedPrecise(3))))
    assert checked.policies["router"].decisions == 600 and checked.policies["router"].with_hits > 50
    assert checked.index_entries > 0
    with pytest.raises(BadInputError, match="prefill instances; expected ClusterConfig\\(instances=3\\)"):
        base.with_(cluster=ClusterConfig(instances=2))
    with pytest.raises(BadInputError, match="no shared_tiers with pd="):
        base.with_(cluster=ClusterConfig(instances=3, shared_tiers=(TierLevel("dram"),)))
