"""Every kvmm router, and a user-written one, through kvmm.testing.RouterContract.  A new
router: one line.  The suite itself fails on deliberately broken routers."""

import numpy as np
import pytest

from kvmm.cluster import ROUTERS, make_router
from kvmm.testing import RouterContract


class FirstBlockRouter:
    """A user-written router (no registration): the request's first block id modulo n."""

    def route(self, request, view):
        ids = request.block_ids
        return int(ids[0]) % view.num_instances if ids.shape[0] else 0


class TestRoundRobin(RouterContract):
    make_router = staticmethod(lambda n: make_router("round-robin", n))


class TestLeastLoaded(RouterContract):
    make_router = staticmethod(lambda n: make_router("least-loaded", n))


class TestSession(RouterContract):
    make_router = staticmethod(lambda n: make_router("session", n))


class TestSessionRoundRobinFirst(RouterContract):
    make_router = staticmethod(lambda n: make_router("session", n, first="round-robin", max_sessions=2))


class TestApproxPrefix(RouterContract):
    make_router = staticmethod(lambda n: make_router("approx-prefix", n))


class TestApproxPrefixTight(RouterContract):
    make_router = staticmethod(lambda n: make_router("approx-prefix", n, max_blocks=3, balance_abs_threshold=1,
                                                     cache_threshold=0.0))


class TestApproxPrefix2025(RouterContract):
    make_router = staticmethod(lambda n: make_router("approx-prefix", n, rule="sgl-router-2025", max_blocks=3,
                                                     balance_abs_threshold=1, cache_threshold=0.0,
                                                     miss_route="least-loaded", seed=5))


class TestPrecisePrefix(RouterContract):
    make_router = staticmethod(lambda n: make_router("precise-prefix", n))


class TestPrecisePrefixLoadWeighted(RouterContract):
    make_router = staticmethod(lambda n: make_router("precise-prefix", n, load_weight=0.5,
                                                     medium_weights={"GPU": 1.0, "cpu": 0.5}))


class TestPrecisePrefixLoadBlind(RouterContract):
    make_router = staticmethod(lambda n: make_router("precise-prefix", n, balance="none", tie_break="lowest"))


class TestWeighted(RouterContract):
    make_router = staticmethod(lambda n: make_router("weighted", n))


class TestWeightedWithoutIndex(RouterContract):
    uses_index = False
    make_router = staticmethod(lambda n: make_router("weighted", n, load_metric="total"))


class TestWeightedApproximateProfile(RouterContract):
    make_router = staticmethod(lambda n: make_router("weighted", n, profile="approximate", seed=3))


class TestKvCost(RouterContract):
    make_router = staticmethod(lambda n: make_router("kv-cost", n))


class TestKvCostSampled(RouterContract):
    make_router = staticmethod(lambda n: make_router("kv-cost", n, router_temperature=0.5,
                                                     decode_active_request_weight=2.0, seed=11))


class TestLeastLoadedRandomTies(RouterContract):
    make_router = staticmethod(lambda n: make_router("least-loaded", n, tie_break="random", seed=2))


class TestSessionRandomTies(RouterContract):
    make_router = staticmethod(lambda n: make_router("session", n, tie_break="random", seed=2))


class TestUserWritten(RouterContract):
    make_router = staticmethod(lambda n: make_router(FirstBlockRouter(), n))


def test_every_registered_router_has_a_contract_class():
    covered = {type(c.make_router(3)) for c in RouterContract.__subclasses__() if c.__module__ == __name__}
    assert set(ROUTERS.values()) <= covered and FirstBlockRouter in covered


class OffByOne:
    def route(self, request, view):
        return view.num_instances  # one past the last instance


class Flaky:
    """Different answers for the same inputs (a shared counter across fresh routers)."""
    calls = [0]

    def route(self, request, view):
        Flaky.calls[0] += 1
        return Flaky.calls[0] % view.num_instances


class Mutating:
    def route(self, request, view):
        view.queue_lengths[0] += 1  # books the request itself: the simulator's job
        return 0


class ReturnsFloat:
    def route(self, request, view):
        return 0.0


@pytest.mark.parametrize("broken", [OffByOne, Flaky, Mutating, ReturnsFloat], ids=lambda c: c.__name__)
def test_the_suite_fails_on_a_broken_router(broken):
    suite = type("Broken", (RouterContract,), {"make_router": staticmethod(lambda n: broken())})()
    with pytest.raises(AssertionError):
        suite.test_answers_in_range_deterministically_without_mutating()
    suite.test_speaks_the_protocol()  # it still has route(): only the behaviour is wrong


def test_the_fake_index_counts_leading_runs_per_medium():
    from kvmm.testing.router_contract import FakeBlockIndex

    index = FakeBlockIndex(2)
    index.store(0, [1, 2, 4], "GPU")
    index.store(1, [1], "CPU")
    np.testing.assert_array_equal(index.prefix_hits(np.array([1, 2, 3, 4])), [[2, 0], [0, 1]])
