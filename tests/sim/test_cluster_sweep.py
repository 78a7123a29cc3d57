"""kvmm.sim.sweep runs cluster configs (routers by name and by object, shared tiers, a fabric,
write-back) on a process pool and on Dask's local cluster with the results of direct
simulate() calls."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pytest

from kvmm.sim import ClusterConfig, GiB, SimConfig, TierLevel, simulate
from kvmm.sim._sweep import sweep


class LeastBlocksFirst:
    """A user-written router (module level, so workers can unpickle it): the instance with the
    fewest requests routed to it so far, ties lowest index."""

    def __init__(self):
        self.sent = None

    def route(self, request, view):
        if self.sent is None:
            self.sent = [0] * view.num_instances
        i = self.sent.index(min(self.sent))
        self.sent[i] += 1
        return i


CONFIGS = [
    SimConfig(workload="conversation", max_requests=300, tiers=(), label="precise/shared",
              cluster=ClusterConfig(instances=4, router="precise-prefix", fabric="rdma400",
                                    shared_tiers=(TierLevel("layer3.5", capacity_bytes=64 * GiB),))),
    SimConfig(workload="conversation", max_requests=300, label="user router/write-back",
              tiers=(TierLevel("dram", capacity_bytes=8 * GiB, fill="write-back"),),
              cluster=ClusterConfig(instances=3, router=LeastBlocksFirst(), fabric=None,
                                    shared_tiers=(TierLevel("pooled-nvme", capacity_bytes=64 * GiB, fill="write-back"),))),
]


@pytest.fixture(scope="module")
def expected():
    return [simulate(c).as_dict() for c in CONFIGS]


def test_the_configs_are_clusters_that_differ(expected):
    assert [d["instances"] for d in expected] == [4, 3]
    assert [d["label"] for d in expected] == ["precise/shared", "user router/write-back"]
    assert expected[0]["index_entries"] > 0 and expected[0]["fabric_bytes"] > 0  # index fed, shared tier read over the fabric
    assert expected[1]["requests_per_instance"] == (100, 100, 100)
    assert min(expected[1]["demoted_blocks"]) > 0 and expected[1]["index_entries"] == 0  # both levels written back


def test_process_pool(expected):
    with ProcessPoolExecutor(2) as ex:
        got = sweep(CONFIGS, ex)
    assert [r.as_dict() for r in got] == expected
    assert CONFIGS[1].cluster.router.sent is None  # the config's router object is never run itself


def test_default_process_pool(expected):
    assert [r.as_dict() for r in sweep(CONFIGS, max_workers=2)] == expected


def test_dask_local_cluster(expected):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] (the 'dist' extra) is not installed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            assert [r.as_dict() for r in sweep(CONFIGS, client)] == expected
