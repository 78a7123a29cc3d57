"""kvmm's LRU, FIFO and LFU as SGLang 0.5.23 radix-cache eviction strategies, against SGLang's own
strategies on a real RadixCache replaying the Mooncake conversation trace (sglang venv only)."""

from __future__ import annotations

import pytest

from tests.integrations.sglang_replay import counter_clock, new_tree, replay  # first: loads SGLang
from array import array  # noqa: E402

import torch  # noqa: E402
from sglang.srt.mem_cache.radix_cache import EvictParams, InsertParams, MatchPrefixParams, RadixKey  # noqa: E402
from sglang.srt.arg_groups import choices  # noqa: E402
from sglang.srt.mem_cache import utils as mem_cache_utils  # noqa: E402
from sglang.srt.mem_cache.evict_policy import EvictionStrategy  # noqa: E402

import kvmm.integrations.sglang as ks  # noqa: E402
from kvmm.errors import BadInputError  # noqa: E402
from kvmm.policies import EVICTION_POLICIES, ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy  # noqa: E402
from kvmm.traces import load_mooncake  # noqa: E402

N_REQUESTS = 1500
CAPACITY = 600  # tokens (= blocks): the largest request fits, the working set does not


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


@pytest.fixture(scope="module", autouse=True)
def registered():
    return ks.register_eviction_strategies()


def test_register_adds_the_names_sglang_resolves(registered):
    assert registered == ["kvmm_fifo", "kvmm_lfu", "kvmm_lru"]
    for name, cls in [("kvmm_lru", ks.STRATEGY_NAMES["kvmm_lru"]), ("KVMM_FIFO", ks.STRATEGY_NAMES["kvmm_fifo"])]:
        assert type(mem_cache_utils.get_eviction_strategy(name)) is cls  # SGLang's own factory, any case
    assert {"kvmm_lru", "kvmm_fifo", "kvmm_lfu"} <= set(choices.RADIX_EVICTION_POLICY_CHOICES)
    assert ks.register_eviction_strategies() == registered  # idempotent
    assert choices.RADIX_EVICTION_POLICY_CHOICES.count("kvmm_lru") == 1


def check_tracks_the_tree(tree):
    """After each request: the kvmm policy tracks exactly the tree's nodes (as of its last look)."""
    strategy = tree.eviction_strategy
    strategy.policy.check()
    assert set(strategy.policy.keys()) == set(strategy._seen)


@pytest.mark.parametrize("ours, theirs", [("kvmm_lru", "lru"), ("kvmm_fifo", "fifo"), ("kvmm_lfu", "lfu")])
def test_replay_makes_exactly_sglangs_evictions(trace, ours, theirs):
    mine, sglang = new_tree(ours), new_tree(theirs)
    assert isinstance(mine.eviction_strategy, ks.STRATEGY_NAMES[ours])
    a = replay(mine, trace, N_REQUESTS, CAPACITY, check=check_tracks_the_tree)
    b = replay(sglang, trace, N_REQUESTS, CAPACITY)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"request {i}: {ours} (hits {x[0]}, evicted {x[1][:5]}...) differs from SGLang {theirs}"
    # The comparison means something: hits and evictions both happen.
    assert sum(r[0] for r in b) > 1000 and sum(len(r[1]) for r in b) > 10_000


def test_lfu_without_touches_would_differ_exactly_where_a_touch_is_not_counted(trace, monkeypatch):
    """Why the LFU strategy feeds uncounted touches (LFUPolicy.touch): with them ignored, kvmm's
    LFU breaks ties by the last counted use only, and on this replay two requests' evictions
    differ from SGLang's (whose last-access time every match moves); the hits stay the same."""
    monkeypatch.setattr(LFUPolicy, "touch", lambda self, key: None)
    a = replay(new_tree("kvmm_lfu"), trace, N_REQUESTS, CAPACITY)
    b = replay(new_tree("lfu"), trace, N_REQUESTS, CAPACITY)
    assert [i for i, (x, y) in enumerate(zip(a, b)) if x != y] == [1242, 1244]
    assert [x[0] for x in a] == [y[0] for y in b]


@pytest.mark.parametrize("policy, first_evicted", [("lfu", [4, 5]), ("kvmm_lfu", [4, 5]), ("lru", [4, 5]),
                                                   ("kvmm_lru", [4, 5])])
def test_an_uncounted_touch_moves_the_lfu_tie_break(policy, first_evicted):
    """SGLang's match stamps the last-access time of the node it splits without counting a hit:
    [3], split off [1, 2, 3] by a match of [1, 2, 9], becomes SGLang LFU's most recent of two
    leaves hit once each; kvmm's LFU strategy feeds that touch (LFUPolicy.touch) and agrees."""
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
        assert issubclass(cls, EvictionStrategy) and type(cls().policy) is expected
        assert cls().policy is not cls().policy  # one fresh policy per radix cache


@pytest.mark.parametrize("policy, match", [
    (ARCPolicy, "ARC cannot be a SGLang EvictionStrategy: it keeps ghost lists"),
    (lambda: ARCPolicy(capacity=64), "ghost lists"),
    ("arc", "ghost lists"),
    ("clock", "ClockPolicy cannot be a SGLang EvictionStrategy"),
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
