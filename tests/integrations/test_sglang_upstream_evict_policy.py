# SPDX-License-Identifier: Apache-2.0
# Copyright 2023-2024 SGLang Team (sgl-project/sglang, Apache License 2.0:
# http://www.apache.org/licenses/LICENSE-2.0)
#
# Vendored by kvmm from sgl-project/sglang test/registered/unit/mem_cache/test_evict_policy.py at
# commit 12b3b508df7a9b6c443c8baaa5417facc2be1d42: the stored version whose strategies are those
# of sglang 0.5.23 (the PyPI wheel ships no tests and records no commit; every test below passes
# against 0.5.23's own strategies, and the later version of this file asks for PriorityStrategy
# methods 0.5.23 does not have).
#
# kvmm's changes, each marked "kvmm:": the LRU, LFU and FIFO test classes and the LRU ordering
# test take the class under test from an attribute, and a subclass of each runs the same tests
# against kvmm's strategy (KvmmLRUStrategy, KvmmLFUStrategy, KvmmFIFOStrategy).  kvmm has no MRU,
# FILO, priority or SLRU strategy (SLRU's segment quotas are no per-node priority), so those
# tests run against SGLang's only.  Nothing else is changed.  Runs in the SGLang venv only
# (.ci/run); the main suite does not collect tests/integrations.

"""Unit tests for evict_policy.py"""

import kvmm.testing.engines.sglang_env  # noqa: F401  kvmm: first, the torchvision stub

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=1, suite="stage-a-test-cpu")

import faulthandler  # kvmm: the watchdog below
import unittest
from unittest.mock import MagicMock

import pytest  # kvmm: the watchdog below

from sglang.srt.mem_cache.evict_policy import (
    FIFOStrategy,
    FILOStrategy,
    LFUStrategy,
    LRUStrategy,
    MRUStrategy,
    PriorityStrategy,
    SLRUStrategy,
)

from kvmm.integrations.sglang_eviction import (  # kvmm: the strategies under test
    KvmmFIFOStrategy,
    KvmmLFUStrategy,
    KvmmLRUStrategy,
)


@pytest.fixture(autouse=True)
def _watchdog():  # kvmm: a get_priority that never returns (a walk up a mock's parents) ends the run
    faulthandler.dump_traceback_later(120, exit=True)  # with a traceback, instead of hanging it
    yield
    faulthandler.cancel_dump_traceback_later()


def _make_node(**kwargs):
    node = MagicMock()
    node.last_access_time = kwargs.get("last_access_time", 0.0)
    node.hit_count = kwargs.get("hit_count", 0)
    node.creation_time = kwargs.get("creation_time", 0.0)
    node.priority = kwargs.get("priority", 0)
    return node


class TestLRUStrategy(unittest.TestCase):
    strategy_class = LRUStrategy  # kvmm: the class under test

    def setUp(self):
        self.strategy = self.strategy_class()

    def test_priority_is_last_access_time(self):
        node = _make_node(last_access_time=42.0)
        self.assertEqual(self.strategy.get_priority(node), 42.0)

    def test_older_access_evicted_first(self):
        old = _make_node(last_access_time=1.0)
        new = _make_node(last_access_time=10.0)
        self.assertLess(
            self.strategy.get_priority(old), self.strategy.get_priority(new)
        )


class TestLFUStrategy(unittest.TestCase):
    strategy_class = LFUStrategy  # kvmm: the class under test

    def setUp(self):
        self.strategy = self.strategy_class()

    def test_priority_is_hit_count_and_time(self):
        node = _make_node(hit_count=5, last_access_time=3.0)
        self.assertEqual(self.strategy.get_priority(node), (5, 3.0))

    def test_lower_hit_count_evicted_first(self):
        cold = _make_node(hit_count=1, last_access_time=10.0)
        hot = _make_node(hit_count=100, last_access_time=1.0)
        self.assertLess(
            self.strategy.get_priority(cold), self.strategy.get_priority(hot)
        )

    def test_same_hit_count_older_access_evicted_first(self):
        old = _make_node(hit_count=3, last_access_time=1.0)
        new = _make_node(hit_count=3, last_access_time=10.0)
        self.assertLess(
            self.strategy.get_priority(old), self.strategy.get_priority(new)
        )


class TestFIFOStrategy(unittest.TestCase):
    strategy_class = FIFOStrategy  # kvmm: the class under test

    def setUp(self):
        self.strategy = self.strategy_class()

    def test_priority_is_creation_time(self):
        node = _make_node(creation_time=7.0)
        self.assertEqual(self.strategy.get_priority(node), 7.0)

    def test_earlier_created_evicted_first(self):
        first = _make_node(creation_time=1.0)
        second = _make_node(creation_time=5.0)
        self.assertLess(
            self.strategy.get_priority(first), self.strategy.get_priority(second)
        )


class TestKvmmLRUStrategy(TestLRUStrategy):  # kvmm
    strategy_class = KvmmLRUStrategy


class TestKvmmLFUStrategy(TestLFUStrategy):  # kvmm
    strategy_class = KvmmLFUStrategy


class TestKvmmFIFOStrategy(TestFIFOStrategy):  # kvmm
    strategy_class = KvmmFIFOStrategy


class TestMRUStrategy(unittest.TestCase):
    def setUp(self):
        self.strategy = MRUStrategy()

    def test_priority_is_negated_access_time(self):
        node = _make_node(last_access_time=5.0)
        self.assertEqual(self.strategy.get_priority(node), -5.0)

    def test_most_recently_used_evicted_first(self):
        """MRU evicts the most recently accessed node first (lowest priority value)."""
        old = _make_node(last_access_time=1.0)
        new = _make_node(last_access_time=10.0)
        self.assertLess(
            self.strategy.get_priority(new), self.strategy.get_priority(old)
        )


class TestFILOStrategy(unittest.TestCase):
    def setUp(self):
        self.strategy = FILOStrategy()

    def test_priority_is_negated_creation_time(self):
        node = _make_node(creation_time=3.0)
        self.assertEqual(self.strategy.get_priority(node), -3.0)

    def test_last_created_evicted_first(self):
        """FILO evicts the most recently created node first."""
        first = _make_node(creation_time=1.0)
        second = _make_node(creation_time=5.0)
        self.assertLess(
            self.strategy.get_priority(second), self.strategy.get_priority(first)
        )


class TestPriorityStrategy(unittest.TestCase):
    def setUp(self):
        self.strategy = PriorityStrategy()

    def test_priority_is_tuple(self):
        node = _make_node(priority=2, last_access_time=4.0)
        self.assertEqual(self.strategy.get_priority(node), (2, 4.0))

    def test_lower_priority_evicted_first(self):
        low = _make_node(priority=1, last_access_time=10.0)
        high = _make_node(priority=5, last_access_time=1.0)
        self.assertLess(
            self.strategy.get_priority(low), self.strategy.get_priority(high)
        )

    def test_same_priority_older_access_evicted_first(self):
        old = _make_node(priority=3, last_access_time=1.0)
        new = _make_node(priority=3, last_access_time=10.0)
        self.assertLess(
            self.strategy.get_priority(old), self.strategy.get_priority(new)
        )


class TestSLRUStrategy(unittest.TestCase):
    def setUp(self):
        self.strategy = SLRUStrategy(protected_threshold=2)

    def test_probationary_segment(self):
        node = _make_node(hit_count=1, last_access_time=5.0)
        self.assertEqual(self.strategy.get_priority(node), (0, 5.0))

    def test_protected_segment(self):
        node = _make_node(hit_count=2, last_access_time=5.0)
        self.assertEqual(self.strategy.get_priority(node), (1, 5.0))

    def test_highly_accessed_is_protected(self):
        node = _make_node(hit_count=100, last_access_time=5.0)
        self.assertEqual(self.strategy.get_priority(node), (1, 5.0))

    def test_probationary_evicted_before_protected(self):
        prob = _make_node(hit_count=1, last_access_time=10.0)
        prot = _make_node(hit_count=5, last_access_time=1.0)
        self.assertLess(
            self.strategy.get_priority(prob), self.strategy.get_priority(prot)
        )

    def test_same_segment_older_access_evicted_first(self):
        old = _make_node(hit_count=0, last_access_time=1.0)
        new = _make_node(hit_count=0, last_access_time=10.0)
        self.assertLess(
            self.strategy.get_priority(old), self.strategy.get_priority(new)
        )

    def test_custom_threshold(self):
        strategy = SLRUStrategy(protected_threshold=5)
        below = _make_node(hit_count=4, last_access_time=1.0)
        at = _make_node(hit_count=5, last_access_time=1.0)
        self.assertEqual(strategy.get_priority(below), (0, 1.0))
        self.assertEqual(strategy.get_priority(at), (1, 1.0))

    def test_default_threshold_is_2(self):
        default = SLRUStrategy()
        self.assertEqual(default.protected_threshold, 2)


class TestEvictionOrdering(unittest.TestCase):
    """Integration-style test: sort a list of nodes by eviction priority."""

    lru_class = LRUStrategy  # kvmm: the class under test

    def test_lru_ordering(self):
        strategy = self.lru_class()
        nodes = [
            _make_node(last_access_time=5.0),
            _make_node(last_access_time=1.0),
            _make_node(last_access_time=3.0),
        ]
        eviction_order = sorted(nodes, key=strategy.get_priority)
        times = [n.last_access_time for n in eviction_order]
        self.assertEqual(times, [1.0, 3.0, 5.0])

    def test_slru_ordering(self):
        strategy = SLRUStrategy(protected_threshold=2)
        nodes = [
            _make_node(hit_count=5, last_access_time=1.0),  # protected, old
            _make_node(hit_count=0, last_access_time=10.0),  # probationary, new
            _make_node(hit_count=0, last_access_time=2.0),  # probationary, old
            _make_node(hit_count=3, last_access_time=8.0),  # protected, new
        ]
        eviction_order = sorted(nodes, key=strategy.get_priority)
        expected = [
            (0, 2.0),  # probationary old
            (0, 10.0),  # probationary new
            (1, 1.0),  # protected old
            (1, 8.0),  # protected new
        ]
        actual = [strategy.get_priority(n) for n in eviction_order]
        self.assertEqual(actual, expected)


class TestKvmmEvictionOrdering(TestEvictionOrdering):  # kvmm
    lru_class = KvmmLRUStrategy
    test_slru_ordering = None  # SGLang's SLRU: run once, above


if __name__ == "__main__":
    unittest.main()
