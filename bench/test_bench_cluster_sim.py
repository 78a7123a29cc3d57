"""Cluster replay in simulated requests per second (issue 20: >= 10,000/s on one core, on the
old constant-rate clock; issue 30 keeps the single-instance replay >= 8,000/s on the physical one).

The whole bundled conversation trace on 16 instances routed by ``precise-prefix`` (the global
block index fed by every instance's GPU pool; balanced by NVIDIA Dynamo's cost, reading the
view's queued prefill and held blocks), over one shared 20 TiB Layer 3.5 tier reached over
``rdma400``, load 0.7 per instance, on the default clock (Roofline, llama-3.1-8b on an H200,
chunked prefill).  Baselines timed in the same run:

* the single-instance default replay (``SimConfig()``: one instance, one private NVMe tier),
  which the cluster code must not slow down;
* the same cluster routed ``round-robin`` (no index to feed or read): what precise routing and
  its index cost on top of running 16 instances interleaved;
* the same cluster routed by the load-blind ablation (``precise-prefix`` with ``balance="none"``,
  the default before issue 31): long queues on a few instances, the view's costliest case;
* the same cluster with every decode-only step its own loop iteration
  (``Instance.jump_decode_stretches = False``, no closed-form stretch): what the stretches save.

Each run is one whole simulation; the event loops are Python, so the rates say what a cluster
of this size costs to simulate, not how fast a kernel is.
"""

from __future__ import annotations

import warnings

import pytest

from bench.conftest import info, size
from kvmm.sim import ClusterConfig, GiB, SimConfig, TierLevel, simulate
from kvmm.sim.engine.instance import Instance

REQUESTS = size(12_031, 60)  # the whole conversation trace
SHARED = (TierLevel("layer3.5", capacity_bytes=20 * 1024 * GiB),)
SINGLE = SimConfig(workload="conversation", max_requests=REQUESTS)  # the default hierarchy, load 0.7


def cluster(router: str, **params) -> SimConfig:
    return SimConfig(workload="conversation", max_requests=REQUESTS, tiers=(),
                     cluster=ClusterConfig(instances=16, router=router, router_params=params, shared_tiers=SHARED,
                                           fabric="rdma400"))


def _bench(benchmark, config: SimConfig, role: str, label: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the load-blind ablation leaves instances idle: measured, not an error
        simulate(config)  # warm: kernels compiled or loaded from numba's cache, the trace parsed once
        info(benchmark, role, label, REQUESTS, "requests")
        res = benchmark.pedantic(lambda: simulate(config), rounds=size(3, 1), iterations=1)
    assert res.requests == REQUESTS and res.steps > 0
    return res


@pytest.mark.benchmark(group="simulate conversation trace: 16-instance cluster")
def test_cluster_precise_prefix(benchmark):
    res = _bench(benchmark, cluster("precise-prefix"), "kvmm", "16 instances, precise-prefix, shared layer3.5")
    assert res.instances == 16 and sum(res.requests_per_instance) == REQUESTS
    assert res.index_entries > 0  # the router read an index the instances fed


@pytest.mark.benchmark(group="simulate conversation trace: 16-instance cluster")
def test_cluster_round_robin(benchmark):
    res = _bench(benchmark, cluster("round-robin"), "baseline", "16 instances, round-robin, shared layer3.5")
    assert res.instances == 16 and max(res.requests_per_instance) - min(res.requests_per_instance) <= 1
    assert res.index_entries == 0  # no index is built for a router that does not read one


@pytest.mark.benchmark(group="simulate conversation trace: 16-instance cluster")
def test_cluster_precise_prefix_load_blind(benchmark):
    res = _bench(benchmark, cluster("precise-prefix", balance="none", tie_break="lowest"), "baseline",
                 "16 instances, precise-prefix load-blind ablation")
    assert res.instances == 16 and min(res.requests_per_instance) == 0  # it piles requests up: instances idle


@pytest.mark.benchmark(group="simulate conversation trace: 16-instance cluster")
def test_single_instance_default(benchmark):
    res = _bench(benchmark, SINGLE, "baseline", "one instance, SimConfig() default")
    assert res.instances == 1 and res.requests_per_instance == (REQUESTS,)


@pytest.mark.benchmark(group="simulate conversation trace: 16-instance cluster")
def test_cluster_every_decode_step(benchmark, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as in _bench
        fast = simulate(cluster("precise-prefix"))
    monkeypatch.setattr(Instance, "jump_decode_stretches", False)
    res = _bench(benchmark, cluster("precise-prefix"), "baseline",
                 "16 instances, precise-prefix, every decode step a loop iteration")
    # the same simulation: a stretch sums the same step times in closed form
    assert res.requests_per_instance == fast.requests_per_instance
    assert res.ttft_p95 == pytest.approx(fast.ttft_p95, rel=1e-9) and res.tpot_mean == pytest.approx(fast.tpot_mean, rel=1e-9)
