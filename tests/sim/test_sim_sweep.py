"""Sweeps give identical, ordered results on every executor (in-process, threads, processes, Dask)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from kvmm.errors import BadInputError
from kvmm.sim._sweep import sweep
from kvmm.sim.simulator import GiB, SimConfig, simulate
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import preset

CONFIGS = [
    SimConfig(workload=Workload(num_requests=60, arrival_rate=3.0, prefix_ratio=r, seed=4), policy=p,
              fast_tier=preset("cxl", 8 * GiB), label=f"{p}/{r}")
    for p in ("immediate", "timely") for r in (0.25, 0.75)
]


@pytest.fixture(scope="module")
def expected():
    return [simulate(c) for c in CONFIGS]


def test_in_process(expected):
    done = []
    assert sweep(CONFIGS, max_workers=1, progress=done.append) == expected
    assert sum(done) == len(CONFIGS)
    assert [r.label for r in expected] == [c.label for c in CONFIGS]


def test_thread_pool(expected):
    with ThreadPoolExecutor(2) as ex:
        assert sweep(CONFIGS, ex) == expected


def test_process_pool(expected):
    with ProcessPoolExecutor(2) as ex:
        assert sweep(CONFIGS, ex) == expected


def test_default_process_pool(expected):
    assert sweep(CONFIGS[:2], max_workers=2) == expected[:2]


def test_dask_local_cluster(expected):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] (the 'dist' extra) is not installed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            assert sweep(CONFIGS, client.get_executor()) == expected
            assert sweep(CONFIGS[:1], client) == expected[:1]  # a Client works directly


def test_bad_sweeps():
    assert sweep([]) == []
    with pytest.raises(BadInputError):
        sweep([CONFIGS[0], "not a config"])


def test_a_sweep_takes_any_mix_of_tiers_policies_objects_and_pd():
    """Names, user objects (pickled to the workers), several tiers, staging variants and PD in one sweep."""
    from kvmm.policies.admission import StoreThreshold
    from kvmm.sim import PDConfig, TierLevel
    from tests.sim.test_sim_compose import RecordingLRU

    wl = Workload(num_requests=50, prefix_ratio=0.6, seed=7)
    mix = [
        SimConfig(workload=wl, policy="write-through-lru", tiers=(TierLevel("dram", capacity_bytes=4 * GiB, eviction="arc"),)),
        SimConfig(workload=wl, policy="immediate-edf",
                  tiers=(TierLevel("dram", capacity_bytes=4 * GiB, eviction=RecordingLRU(), admission=StoreThreshold(k=2)),
                         TierLevel("nvme", eviction="lfu", admission="refill-filter"))),
        SimConfig(workload=wl, tiers=(), pd=PDConfig(1, 1, "supernode")),
    ]
    with ProcessPoolExecutor(2) as ex:
        got = sweep(mix, ex)
    assert got == [simulate(c) for c in mix]
    assert [r.policy for r in got] == ["write-through-lru", "immediate-edf", "pd"]
    assert len(got[1].tier_block_hits) == 2 and got[2].kv_bytes_transferred > 0
