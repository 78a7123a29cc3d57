"""kvmm's LRU, FIFO and LFU as SGLang 0.5.23 radix-cache eviction strategies, against SGLang's own
strategies and against kvmm's policy objects fed the tree's events (tests/integrations/
sglang_policy_oracle.py), on a real RadixCache replaying the Mooncake conversation trace (sglang
venv only)."""

from __future__ import annotations

import threading
import types
from unittest.mock import MagicMock

import pytest

from tests.integrations.sglang_replay import counter_clock, new_tree, replay  # first: loads SGLang

# isort: split
from array import array  # noqa: E402

import torch  # noqa: E402
from sglang.srt.arg_groups import choices  # noqa: E402
from sglang.srt.mem_cache import utils as mem_cache_utils  # noqa: E402
from sglang.srt.mem_cache.evict_policy import EvictionStrategy  # noqa: E402
from sglang.srt.mem_cache.radix_cache import EvictParams, InsertParams, MatchPrefixParams, RadixKey  # noqa: E402

import kvmm.integrations.sglang as ks  # noqa: E402
from kvmm.errors import BadInputError  # noqa: E402
from kvmm.policies import EVICTION_POLICIES, ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy  # noqa: E402
from kvmm.traces import load_mooncake  # noqa: E402
from tests.integrations.sglang_policy_oracle import PolicyFedStrategy  # noqa: E402

N_REQUESTS = 1500
CAPACITY = 600  # tokens (= blocks): the largest request fits, the working set does not


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


#: the kvmm policy objects themselves, fed the tree's events, as radix-cache strategies
ORACLES = {"oracle_lru": LRUPolicy, "oracle_fifo": FIFOPolicy, "oracle_lfu": LFUPolicy}


@pytest.fixture(scope="module", autouse=True)
def registered():
    names = ks.register_eviction_strategies()
    for name, policy in ORACLES.items():
        mem_cache_utils._EVICTION_POLICY_FACTORIES[name] = lambda policy=policy: PolicyFedStrategy(policy())
    yield names
    for name in ORACLES:
        del mem_cache_utils._EVICTION_POLICY_FACTORIES[name]


def test_register_adds_the_names_sglang_resolves(registered):
    assert registered == ["kvmm_fifo", "kvmm_lfu", "kvmm_lru"]
    for name, cls in [("kvmm_lru", ks.STRATEGY_NAMES["kvmm_lru"]), ("KVMM_FIFO", ks.STRATEGY_NAMES["kvmm_fifo"])]:
        assert type(mem_cache_utils.get_eviction_strategy(name)) is cls  # SGLang's own factory, any case
    assert {"kvmm_lru", "kvmm_fifo", "kvmm_lfu"} <= set(choices.RADIX_EVICTION_POLICY_CHOICES)
    assert ks.register_eviction_strategies() == registered  # idempotent
    assert choices.RADIX_EVICTION_POLICY_CHOICES.count("kvmm_lru") == 1


def check_tracks_the_tree(tree):
    """After each request: the oracle's kvmm policy tracks exactly the tree's nodes (as of its last look)."""
    strategy = tree.eviction_strategy
    strategy.policy.check()
    assert set(strategy.policy.keys()) == set(strategy._seen)


@pytest.mark.parametrize("order", ["lru", "fifo", "lfu"])
def test_replay_makes_exactly_sglangs_and_the_kvmm_policys_evictions(trace, order):
    ours, sglang = new_tree(f"kvmm_{order}"), new_tree(order)
    oracle = new_tree(f"oracle_{order}")
    assert isinstance(ours.eviction_strategy, ks.STRATEGY_NAMES[f"kvmm_{order}"])
    a = replay(ours, trace, N_REQUESTS, CAPACITY)
    b = replay(sglang, trace, N_REQUESTS, CAPACITY)
    c = replay(oracle, trace, N_REQUESTS, CAPACITY, check=check_tracks_the_tree)
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        assert x == y, f"request {i}: kvmm_{order} (hits {x[0]}, evicted {x[1][:5]}...) differs from SGLang {order}"
        assert x == z, f"request {i}: kvmm_{order} differs from kvmm's {order} policy fed the tree's events"
    # The comparison means something: hits and evictions both happen.
    assert sum(r[0] for r in b) > 1000 and sum(len(r[1]) for r in b) > 10_000


def test_lfu_without_touches_would_differ_exactly_where_a_touch_is_not_counted(trace, monkeypatch):
    """Why kvmm's LFU order, fed SGLang's records, counts an uncounted touch as recency
    (LFUPolicy.touch): with such touches ignored, the LFU policy breaks ties by the last counted
    use only, and on this replay two requests' evictions differ from SGLang's (whose last-access
    time every match moves); the hits stay the same."""
    monkeypatch.setattr(LFUPolicy, "touch", lambda self, key: None)
    a = replay(new_tree("oracle_lfu"), trace, N_REQUESTS, CAPACITY)
    b = replay(new_tree("kvmm_lfu"), trace, N_REQUESTS, CAPACITY)
    assert [i for i, (x, y) in enumerate(zip(a, b)) if x != y] == [1242, 1244]
    assert [x[0] for x in a] == [y[0] for y in b]


@pytest.mark.parametrize("policy, first_evicted", [("lfu", [4, 5]), ("kvmm_lfu", [4, 5]), ("oracle_lfu", [4, 5]),
                                                   ("lru", [4, 5]), ("kvmm_lru", [4, 5])])
def test_an_uncounted_touch_moves_the_lfu_tie_break(policy, first_evicted):
    """SGLang's match stamps the last-access time of the node it splits without counting a hit:
    [3], split off [1, 2, 3] by a match of [1, 2, 9], becomes SGLang LFU's most recent of two
    leaves hit once each; kvmm's LFU orders by the last reference, counted or not (LFUPolicy.touch,
    what the oracle feeds it), and agrees."""
    tree = new_tree(policy)
    with counter_clock():
        for blocks in ([1, 2, 3], [4, 5]):
            tree.insert(InsertParams(key=RadixKey(array("q", blocks)), value=torch.tensor(blocks)))
        tree.evict(EvictParams(num_tokens=0))  # the strategy looks at the tree: both leaves hit once
        assert tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", [1, 2, 9])))).device_prefix_len == 2
        tree.evict(EvictParams(num_tokens=1))
    assert tree.evicted == first_evicted


def test_the_replay_tells_the_orders_apart(trace):
    """LRU and FIFO (and LFU) make different evictions on this replay, so each parity above is a
    test of the order, not of a replay that evicts the same whatever the strategy."""
    runs = {name: replay(new_tree(name), trace, N_REQUESTS, CAPACITY) for name in ("lru", "fifo", "lfu")}
    assert runs["lru"] != runs["fifo"] and runs["lru"] != runs["lfu"] and runs["fifo"] != runs["lfu"]


def test_make_eviction_strategy_from_kvmm_policies():
    for policy, expected in [(LRUPolicy, LRUPolicy), ("fifo", FIFOPolicy), (LFUPolicy(), LFUPolicy),
                             (lambda: LRUPolicy(), LRUPolicy)]:
        cls = ks.make_eviction_strategy(policy)
        assert issubclass(cls, EvictionStrategy) and cls.order is expected


class Node:
    """A radix-tree node's records, without the tree."""

    def __init__(self, created, used, hits=0):
        self.creation_time, self.last_access_time, self.hit_count = created, used, hits


@pytest.mark.parametrize("order, expected", [("lru", [1, 0, 2]), ("fifo", [0, 1, 2]), ("lfu", [1, 2, 0])])
def test_a_priority_is_computed_from_the_node_alone(order, expected):
    """Issue 33, item 2: the priority reads the node's records, as SGLang's strategies do (it
    walked the whole tree before, and forever on a node whose parents never end, a mock's)."""
    nodes = [Node(1.0, 4.0, hits=3), Node(2.0, 3.0), Node(4.0, 5.0)]
    strategy = ks.STRATEGY_NAMES[f"kvmm_{order}"]()
    assert sorted(range(3), key=lambda i: strategy.get_priority(nodes[i])) == expected
    endless = MagicMock(creation_time=1.0, last_access_time=2.0, hit_count=0)  # parent of parent of ... a mock
    answer = []
    worker = threading.Thread(target=lambda: answer.append(strategy.get_priority(endless)), daemon=True)
    worker.start()
    worker.join(timeout=10)  # a walk up the mock's parents would never end: fail instead of hanging
    assert answer == [{"lru": 2.0, "fifo": 1.0, "lfu": (0, 2.0)}[order]]


@pytest.mark.parametrize("node, missing", [(None, "hit_count, last_access_time"),
                                           (object(), "hit_count, last_access_time"),
                                           (types.SimpleNamespace(last_access_time=1.0), "hit_count")])
def test_a_node_without_its_records_is_a_clear_error(node, missing):
    with pytest.raises(BadInputError, match=f"needs a SGLang radix-tree node .* without {missing}$"):
        ks.STRATEGY_NAMES["kvmm_lfu"]().get_priority(node)


@pytest.mark.parametrize("policy, match", [
    (ARCPolicy, "ARC cannot be a SGLang EvictionStrategy: it keeps ghost lists"),
    (lambda: ARCPolicy(capacity=64), "ghost lists"),
    ("arc", "ghost lists"),
    ("clock", "ClockPolicy cannot be a SGLang EvictionStrategy"),
    (type("MyLRU", (LRUPolicy,), {}), "MyLRU cannot be a SGLang EvictionStrategy: it subclasses LRUPolicy"),
    ("mru", "unknown eviction policy 'mru'"),
    (object(), "EvictionPolicy"),
])
def test_orders_a_node_priority_cannot_express_are_refused(policy, match):
    with pytest.raises(BadInputError, match=match):
        ks.make_eviction_strategy(policy)


@pytest.mark.parametrize("order", sorted(set(EVICTION_POLICIES) - {"lru", "fifo", "lfu"}))
def test_every_other_registered_order_is_refused_by_name(order):
    # CLOCK's hand, S3-FIFO's queues, SIEVE's hand, ... are state no per-node priority holds;
    # Belady needs the future
    with pytest.raises(BadInputError, match="cannot be a SGLang EvictionStrategy|future reference stream"):
        ks.make_eviction_strategy(order)
