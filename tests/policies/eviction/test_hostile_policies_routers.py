"""Issue 33, item 9: routers given something that is not a request or a view, policy calls with
a bad size, Belady's trace of numpy integers, and one overfill rule for every order with a
capacity (docs/eviction_orders.md, "Overfill")."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.cluster import BlockIndex, ClusterView, make_router
from kvmm.cluster.routers import ROUTERS, checked_route
from kvmm.cluster.view import RouteRequest
from kvmm.errors import BadInputError, DTypeError
from kvmm.policies.eviction import make_eviction_policy
from kvmm.policies.eviction.belady import BeladyPolicy
from kvmm.policies.eviction.lirs import LIRSPolicy
from kvmm.policies.eviction.twoq import TwoQPolicy
from tests.state_snapshot import raises_unchanged

REQUEST = RouteRequest(0, 0.0, np.array([1, 2, 3]), 48, 4, session=7)


@pytest.mark.parametrize("name", sorted(ROUTERS))
@pytest.mark.parametrize("request_, view, match", [
    (REQUEST, None, "view must be a kvmm.cluster.ClusterView, got NoneType"),
    (None, "view", "request must be a kvmm.cluster.RouteRequest, got NoneType"),
    (REQUEST, 5, "view must be a kvmm.cluster.ClusterView, got int"),
    ({"block_ids": [1]}, "view", "request must be a kvmm.cluster.RouteRequest, got dict"),
])
def test_routers_refuse_what_is_not_a_request_or_a_view(name, request_, view, match):
    router = make_router(name, 2)
    view = ClusterView(2, index=BlockIndex(2)) if view == "view" else view
    raises_unchanged(router, DTypeError, lambda: router.route(request_, view), match=match)
    raises_unchanged(router, DTypeError, lambda: checked_route(router, request_, view), match=match)
    # still routes (kv-cost and precise-prefix count blocks: the view says how many tokens make one)
    assert checked_route(router, REQUEST, ClusterView(2, index=BlockIndex(2), block_tokens=16)) in (0, 1)


def test_policy_calls_check_their_size_whatever_the_key():
    lirs = LIRSPolicy(capacity=4)
    lirs.on_insert(1)
    raises_unchanged(lirs, BadInputError, lambda: lirs.admits(1, -1), match="size must be >= 0, got -1")
    raises_unchanged(lirs, DTypeError, lambda: lirs.admits(2, 1.5), match="size must be an integer")
    raises_unchanged(lirs, DTypeError, lambda: lirs.admits([1], 1), match="key must be hashable")
    assert lirs.admits(2, 1) is True and lirs.admits(2, 5) is False
    twoq = TwoQPolicy(capacity=4)
    twoq.on_insert(1)
    for key in (1, 2):  # the size is checked before the key is looked at, resident or not
        raises_unchanged(twoq, BadInputError, lambda: twoq.on_insert(key, -1), match="size must be >= 0, got -1")  # noqa: B023 (called at once)
        raises_unchanged(twoq, BadInputError, lambda: twoq.on_access(key, -1), match="size must be >= 0, got -1")  # noqa: B023 (called at once)
    raises_unchanged(twoq, DTypeError, lambda: twoq.on_insert(2, 1, protected=5), match="protected")
    assert twoq.on_insert(2, 1) == [] and twoq.on_access(1) == ()  # nothing evicted on its own


@pytest.mark.parametrize("trace", [
    np.array([2**64 - 1, 5, 2**64 - 1, 7], dtype=">u8"),  # big-endian uint64 became int64 -1
    [np.uint64(2**64 - 1), np.int64(5), np.uint64(2**64 - 1), np.int32(7)],
    [np.int64(2**64 - 1 - 2**64), 5, -1, 7],
])
def test_belady_reads_numpy_integer_traces_as_the_ints_they_equal(trace):
    reference = BeladyPolicy.from_trace([int(k) for k in trace])
    policy = BeladyPolicy.from_trace(trace)
    keys = [int(k) for k in trace]
    for p in (reference, policy):
        for key in keys:
            if key in p:
                p.on_access(key)
            else:
                p.on_insert(key)
            p.check()
    assert policy.victims(3) == reference.victims(3)
    assert all(type(k) is int for k in policy.victims(3))
    fresh = BeladyPolicy.from_trace(trace)
    with pytest.raises(BadInputError, match=rf"reference 0 of the trace is to {keys[0]};"):
        fresh.on_insert(12345)


CAPACITY_ORDERS = ["arc", "s3fifo", "2q", "lirs", "slru", "wtinylfu"]


def overfill(policy, how):
    if how == "count":
        for key in range(10):
            policy.on_insert(key, 1)
    elif how == "large entry":
        policy.on_insert("big", 10)
        policy.on_insert(1, 1)
    else:  # an overwrite that grows a resident
        for key in range(3):
            policy.on_insert(key, 1)
        policy.on_access(0, 9)


@pytest.mark.parametrize("how", ["count", "large entry", "growing overwrite"])
@pytest.mark.parametrize("name", CAPACITY_ORDERS)
def test_every_order_accepts_overfill_and_its_victims_empty_it(name, how):
    policy = make_eviction_policy(name, capacity=4)
    overfill(policy, how)
    policy.check()  # S3-FIFO and LIRS refused this state before
    evicted = 0
    while len(policy) and evicted < 20:
        victim = policy.victims(1)[0]
        policy.on_evict(victim)  # EvictionPolicyBase's default: on_remove
        policy.check()
        evicted += 1
    assert len(policy) == 0  # the victims reach every key: nothing overfilled is stuck
    policy.on_insert("after", 1)
    policy.check()
    assert policy.victims(1) == ["after"]
