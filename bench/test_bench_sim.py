"""Simulator requests per second on the bundled conversation trace.

Default composed hierarchy (BlockAllocator GPU pool, one NVMe ManagedTier with LRU + write-all,
CXL staging through the CommitmentLedger), load 0.7.  Baseline: the same simulation (same event loop, same policy, same results) with the
plain-Python reference ledger (tests/naive/ledger.py) in place of the numba CommitmentLedger.
The event loop itself is Python in both, so the ratio shows what the ledger costs inside a
whole simulation, not the ledger alone (bench/test_bench_ledger.py measures that).
"""

from __future__ import annotations

import pytest

from bench.conftest import SCALE, size
from kvmm.sim.simulator import SimConfig, simulate
from tests.naive.ledger import NaiveLedger

REQUESTS = size(12_031, 60)  # the whole conversation trace
CONFIG = SimConfig(workload="conversation", max_requests=REQUESTS, policy="timely")  # default hierarchy, load 0.7


def _bench(benchmark, factory, role, label):
    simulate(SimConfig(workload="conversation", max_requests=20, policy="timely"), ledger_factory=factory)  # warm
    benchmark.extra_info.update(role=role, label=label, items=REQUESTS, unit="requests")
    res = benchmark.pedantic(lambda: simulate(CONFIG, ledger_factory=factory), rounds=size(2, 1), iterations=1)
    assert res.requests == REQUESTS and res.steps > 0
    assert res.claims > 0 or SCALE == "smoke"  # 60 requests find no lower-tier hit


@pytest.mark.benchmark(group="simulate conversation trace (timely)")
def test_sim_kvmm(benchmark):
    _bench(benchmark, None, "kvmm", "simulate + CommitmentLedger")


@pytest.mark.benchmark(group="simulate conversation trace (timely)")
def test_sim_reference_ledger(benchmark):
    _bench(benchmark, NaiveLedger, "baseline", "simulate + plain-Python ledger")
