"""Issue 33, item 5: numbers too large for the int64 (or float) arithmetic they reach are refused
with a KvmmError naming the argument and the bound, instead of wrapping round, overflowing or
trying to allocate 10**30 slots.  The bounds are kvmm._validate's MAX_UNITS, MAX_INSTANCES and
MAX_INT64."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.cluster import BlockIndex, ClusterView, make_router
from kvmm.cluster.routers import ROUTERS
from kvmm.errors import BadInputError, KvmmError
from kvmm.plan import SLO, TierCandidate, plan
from kvmm.policies import replay
from kvmm.policies._replay import _KERNELS
from kvmm.sim.cost import cost_account

MAX_UNITS = 2**60  # kvmm._validate.MAX_UNITS, the documented bound
MAX_INSTANCES = 2**20  # kvmm._validate.MAX_INSTANCES
KEYS = np.array([1, 2, 1, 2, 3, 1], dtype=np.int64)
ORDERS = sorted(_KERNELS)


@pytest.mark.parametrize("order", ORDERS)
def test_replay_refuses_uint64_sizes_that_would_wrap_negative(order):
    sizes = np.full(KEYS.size, 2**63 + 5, dtype=np.uint64)  # as int64: negative, so "fits" and hits
    with pytest.raises(BadInputError, match=r"sizes must be <= 1152921504606846976 \(2\*\*60 size units\)"):
        replay(order, KEYS, 10, sizes=sizes)


@pytest.mark.parametrize("order", ORDERS)
def test_replay_bounds_capacity_and_runs_at_the_bound(order):
    for capacity in (2**63, 2**63 - 1, MAX_UNITS + 1):
        with pytest.raises(BadInputError, match="capacity must be <= 1152921504606846976"):
            replay(order, KEYS, capacity)
    # at the bound nothing overflows: every re-reference of a key that fits is a hit (unit sizes)
    # for the orders that keep what fits; a key of the whole capacity evicts all others
    hits = replay(order, KEYS, MAX_UNITS)
    assert hits.tolist() == replay(order, KEYS, 1000).tolist()
    whole = replay(order, KEYS, MAX_UNITS, sizes=np.full(KEYS.size, MAX_UNITS))
    assert not whole[[2, 3, 5]].all()  # each entry fills the cache: keys alternate, no run of hits


@pytest.mark.parametrize("call, match", [
    (lambda: ClusterView(10**30), "num_instances must be <= 1048576, got an integer of about 31 digits"),
    (lambda: ClusterView(MAX_INSTANCES + 1), "num_instances must be <= 1048576"),
    (lambda: make_router("round-robin", 10**30), "num_instances must be <= 1048576"),
    (lambda: cost_account(duration_s=1, gpus=10**400, tiers=[], input_tokens=1, output_tokens=1),
     "gpus must be <= 9223372036854775807, got an integer of about 401 digits"),
    (lambda: cost_account(duration_s=1, gpus=1, tiers=[], input_tokens=10**400, output_tokens=1), "input_tokens"),
    (lambda: SLO(10**400), "SLO ttft_p95_s must be a finite number of seconds > 0"),
    (lambda: SLO(1.0, 10**400), "SLO tpot_p95_s must be a finite number of seconds > 0"),
    (lambda: plan("conversation", slo=SLO(1.0), tiers=["dram:0-4TiB"], budget=10**400),
     "budget must be a finite number of USD per hour"),
    (lambda: plan("conversation", slo=10**400, tiers=["dram:0-4TiB"]), "SLO ttft_p95_s"),
    (lambda: plan("conversation", slo=SLO(1.0), tiers=["dram:0-4TiB"], instances=10**30),
     r"instances must be an integer in \[1, 1048576\]"),
    (lambda: TierCandidate("dram", 0, 10**30), r"max_bytes must be an integer number of bytes in \[0, 2\*\*60\]"),
    (lambda: BlockIndex(2, max_entries=2**70), "max_entries must be <= 1152921504606846976"),
])
def test_huge_numbers_are_refused_with_the_bound(call, match):
    with pytest.raises(BadInputError, match=match) as info:
        call()
    assert isinstance(info.value, KvmmError)
    assert len(str(info.value)) < 200  # the message names the size, never prints 400 digits


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_bounds_its_instances(name):
    with pytest.raises(BadInputError, match="num_instances must be <= 1048576"):
        make_router(name, 10**12)  # approx-prefix and weighted allocated 7 TiB for this
    assert make_router(name, MAX_INSTANCES).num_instances == MAX_INSTANCES
