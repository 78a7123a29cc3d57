"""kvmm.cluster routers: pinned instance sequences for small hand-made inputs (docs/cluster_routers.md),
bad input, checked_route, the view and request validation, and the docs page's own example."""

import re

import numpy as np
import pytest

from kvmm.cluster import (
    ROUTERS,
    ApproxPrefixRouter,
    ClusterView,
    PrecisePrefixRouter,
    RouteRequest,
    WeightedRouter,
    checked_route,
    make_router,
)
from kvmm.errors import BadInputError, DTypeError, InvalidIdError, KvmmError, ShapeError
from kvmm.protocols import Router
from tests.paths import ROOT


class TinyIndex:
    """A BlockIndex stand-in: per instance and medium a set of held block ids."""

    def __init__(self, num_instances, held, media=("GPU", "CPU")):
        self.num_instances = num_instances
        self.media = media
        self.held = held  # {(instance, medium): set of block ids}

    def prefix_hits(self, keys):
        keys = [int(k) for k in keys]
        out = np.zeros((self.num_instances, len(self.media)), dtype=np.int64)
        for i in range(self.num_instances):
            for m, medium in enumerate(self.media):
                held = self.held.get((i, medium), set())
                k = 0
                while k < len(keys) and keys[k] in held:
                    k += 1
                out[i, m] = k
        return out


def req(blocks, session=-1, number=0):
    return RouteRequest(number, float(number), np.array(blocks, dtype=np.int64), 16 * len(blocks), 4, session)


def view(n, queue=None, running=None, kv=None, index=None, **extra):
    return ClusterView(n, queue_lengths=queue, running=running, kv_utilisation=kv, index=index, **extra)


def replay(router, steps):
    """steps: (request, view) pairs -> the instances chosen."""
    return [checked_route(router, r, v) for r, v in steps]


# -- pinned sequences ---------------------------------------------------------------------------
def test_round_robin_deals_in_turn():
    assert replay(make_router("round-robin", 3), [(req([1]), view(3))] * 5) == [0, 1, 2, 0, 1]


def test_least_loaded_counts_waiting_plus_running_and_ties_go_low():
    r = make_router("least-loaded", 3)
    assert r.route(req([1]), view(3, queue=[2, 0, 1], running=[0, 1, 0])) == 1  # loads 2, 1, 1
    assert r.route(req([1]), view(3, queue=[0, 0, 0], running=[1, 0, 0])) == 1
    assert r.route(req([1]), view(3)) == 0


def test_session_sticks_and_sessionless_requests_go_least_loaded():
    steps = [(req([1], 5), view(2, [0, 0])), (req([1], 7), view(2, [1, 0])), (req([1], 5), view(2, [1, 5])),
             (req([1], -1), view(2, [3, 1])), (req([1], 7), view(2, [0, 9]))]
    assert replay(make_router("session", 2), steps) == [0, 1, 0, 1, 1]
    rr = [(req([1], s), view(2, [5, 0])) for s in (5, 7, 9, 5)]
    assert replay(make_router("session", 2, first="round-robin"), rr) == [0, 1, 0, 0]


def test_session_memory_bound_forgets_the_oldest_session():
    steps = [(req([1], 5), view(2, [0, 0])), (req([1], 7), view(2, [1, 0])), (req([1], 5), view(2, [1, 0]))]
    assert replay(make_router("session", 2), steps) == [0, 1, 0]
    assert replay(make_router("session", 2, max_sessions=1), steps) == [0, 1, 1]  # 5 forgotten, placed again


OLD = dict(rule="sgl-router-2025", tie_break="lowest")  # sgl-router before December 2025, ties to the lowest index


def test_approx_prefix_2025_rule_follows_sgl_router():
    steps = [
        (req([1, 2, 3, 4]), view(3)),           # nothing remembered: smallest memory (all 0) -> 0
        (req([1, 2, 5, 6]), view(3)),           # 2/4 = 0.5 > 0.3 matched on 0
        (req([7, 8]), view(3)),                 # no match: smallest memory, sizes [6, 0, 0] -> 1
        (req([1, 5]), view(3)),                 # 1 and 5 both remembered for 0: ratio 1
        (req([1, 2, 3, 4]), view(3, [100, 0, 0])),  # imbalanced (100 - 0 > 64, 100 > 1.5 * 0): least loaded
        (req([1, 2, 3]), view(3, [5, 2, 0])),   # 0 and 1 both match 3/3; lower load wins -> 1
    ]
    router = make_router("approx-prefix", 3, **OLD)
    assert replay(router, steps) == [0, 0, 1, 0, 1, 1]
    assert router._memory.sizes.tolist() == [6, 6, 0] and router.remembered == 12  # distinct (block, instance) pairs


def test_approx_prefix_threshold_is_strict():
    steps = [(req([1, 2]), view(2)), (req([1, 3]), view(2))]  # second: match 1/2 = 0.5
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.5, **OLD), steps) == [0, 1]  # not > 0.5: smallest
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.49, **OLD), steps) == [0, 0]
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.5, miss_route="least-loaded", **OLD),
                  [(req([1, 2]), view(2)), (req([1, 3]), view(2, [1, 0]))]) == [0, 1]


def test_approx_prefix_imbalance_needs_both_thresholds():
    router = make_router("approx-prefix", 2, balance_abs_threshold=0, balance_rel_threshold=1.5, **OLD)
    steps = [(req([1]), view(2)), (req([1]), view(2, [3, 2])), (req([1]), view(2, [4, 2]))]
    assert replay(router, steps) == [0, 0, 1]  # 3 > 1.5 * 2 is false: still cache-aware; 4 > 3: least loaded
    router = make_router("approx-prefix", 2, balance_abs_threshold=2, balance_rel_threshold=1.0, **OLD)
    assert replay(router, [(req([1]), view(2)), (req([1]), view(2, [2, 0])), (req([1]), view(2, [3, 0]))]) == [0, 0, 1]


def test_approx_prefix_lru_forgets_prefix_tails_first():
    router = make_router("approx-prefix", 2, max_blocks=2, **OLD)
    steps = [(req([1, 2, 3]), view(2)), (req([1, 2, 3]), view(2)), (req([3]), view(2)), (req([1, 2]), view(2))]
    assert replay(router, steps) == [0, 0, 1, 0]  # (3, 0) was the oldest pair: forgotten; heads 1, 2 kept
    assert router.remembered == 2 and router._memory.sizes.tolist() == [2, 0]


def test_approx_prefix_smg_rule_follows_smg():
    """smg's current rule (least-loaded among the matching instances, a spill gate against the
    mean load, misses to the smallest (load, requests sent, index)), ties to the lowest index."""
    steps = [
        (req([1, 2, 3, 4]), view(3)),               # nothing remembered: miss -> (load, sent, idx) all 0 -> 0
        (req([1, 2, 5, 6]), view(3)),               # 2/4 > 0.3 on 0; mean 0, no spill -> 0
        (req([7, 8]), view(3)),                     # miss; sent [2, 0, 0] -> 1
        (req([9]), view(3)),                        # miss; sent [2, 1, 0] -> 2
        (req([1, 2, 3, 4]), view(3, [100, 0, 0])),  # hit on 0, but 100 > 1.5 x 33.3 and > 33.3 + 64: spill;
                                                    # loads [100, 0, 0], sent [2, 1, 1] -> 1 (lowest)
        (req([1, 2, 3]), view(3, [5, 2, 0])),       # 0 and 1 both hold 3/3 now: the less loaded -> 1
    ]
    router = make_router("approx-prefix", 3, tie_break="lowest")
    assert replay(router, steps) == [0, 0, 1, 2, 1, 1]
    assert router._sent.tolist() == [2, 3, 1]
    gate = make_router("approx-prefix", 3, balance_abs_threshold=2, tie_break="lowest")
    first = [(req([1, 2]), view(3))]
    assert replay(gate, first + [(req([1, 2]), view(3, [4, 0, 0]))]) == [0, 1]  # 4 > 2.0 and 4 > 3.33: spill
    gate = make_router("approx-prefix", 3, balance_abs_threshold=2, tie_break="lowest")
    assert replay(gate, first + [(req([1, 2]), view(3, [3, 1, 1]))]) == [0, 0]  # 3 > 2.5 but 3 <= 3.67: kept


def test_approx_prefix_smg_ties_among_matching_instances_are_random_and_seeded():
    def run(seed):
        router = make_router("approx-prefix", 4, seed=seed, balance_abs_threshold=0, balance_rel_threshold=1.0)
        for busy in ([0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]):  # each holder spills to the next
            router.route(req([1, 2]), view(4, busy))
        assert router._sent.tolist() == [1, 1, 1, 1]  # now every instance remembers [1, 2]
        return [router.route(req([1, 2], number=9), view(4)) for _ in range(40)]

    runs = [run(seed) for seed in range(3)]
    assert runs[0] == run(0)  # the same seed, the same choices
    assert all(set(r) == {0, 1, 2, 3} for r in runs)  # equal match and load: every instance gets some
    assert len({tuple(r) for r in runs}) == 3


HELD = {(0, "GPU"): {1, 2}, (1, "CPU"): {1, 2, 3}, (2, "GPU"): {1, 2, 3}}
BLIND = dict(balance="none", tie_break="lowest")


def test_precise_prefix_load_blind_takes_the_best_llmd_prefix_score_then_lower_load():
    index = TinyIndex(3, HELD)  # hits for [1, 2, 3, 4]: [[2, 0], [0, 3], [3, 0]]; scores 2, 3 x 0.8, 3
    r = make_router("precise-prefix", 3, **BLIND)
    q = req([1, 2, 3, 4])
    assert r.route(q, view(3, index=index)) == 2  # llm-d's cpu weight 0.8: 2.4 < 3
    equal = dict(BLIND, medium_weights={"gpu": 1.0, "Cpu": 1.0})  # names case-insensitive
    assert make_router("precise-prefix", 3, **equal).route(q, view(3, index=index)) == 1  # 1 and 2 tie: lowest
    assert make_router("precise-prefix", 3, **equal).route(q, view(3, [0, 4, 1], index=index)) == 2  # lower load
    linear = dict(load_weight=1.0, tie_break="lowest")
    assert make_router("precise-prefix", 3, **linear).route(q, view(3, [0, 0, 2], index=index)) == 1  # 2.4 > 3 - 2
    assert make_router("precise-prefix", 3, **linear).route(q, view(3, [0, 2, 0], index=index)) == 2
    assert r.route(req([9]), view(3, [3, 1, 2], index=index)) == 1  # nothing held anywhere: least loaded


def test_precise_prefix_sums_medium_weights_along_the_prefix_as_llmd_does():
    """A block counts the best medium holding it: GPU {1, 2} and CPU {1, 2, 3, 4} score
    2 x 1.0 + 2 x 0.8 = 3.6 (the best single medium would say 3.2)."""
    held = {(0, "GPU"): {1, 2}, (0, "CPU"): {1, 2, 3, 4}, (1, "GPU"): {1, 2, 3}, (2, "CPU"): {1, 2, 3, 4}}
    index = TinyIndex(3, held)
    from kvmm.cluster.routers_llmd import prefix_scores

    hits = index.prefix_hits([1, 2, 3, 4])
    np.testing.assert_allclose(prefix_scores(hits, np.array([1.0, 0.8])), [3.6, 3.0, 3.2])
    assert make_router("precise-prefix", 3, **BLIND).route(req([1, 2, 3, 4]), view(3, [1, 0, 0], index=index)) == 0


def test_precise_prefix_default_is_dynamos_cost():
    """The default balances as NVIDIA Dynamo's KV router: equal to kv-cost's decisions."""
    index = TinyIndex(3, HELD)
    q = req([1, 2, 3, 4])  # 64 tokens in 16-token blocks
    busy = view(3, index=index, prefill_tokens=[0, 0, 160], block_tokens=16)  # instance 2 has 10 blocks to prefill
    assert make_router("precise-prefix", 3).route(q, busy) == make_router("kv-cost", 3).route(q, busy) == 1
    assert make_router("precise-prefix", 3, **BLIND).route(q, busy) == 2  # the ablation ignores the queue
    with pytest.raises(BadInputError, match="view.block_tokens is 0"):
        make_router("precise-prefix", 3).route(q, view(3, index=index))


def test_kv_cost_follows_dynamos_cost_by_hand():
    """Dynamo's cost, worked by hand: 4 blocks of 16 tokens; overlap credited device 1.0 and
    host 0.75 beyond the device run.
    instance 0: GPU 2 -> credit 2;           prefill (0 + 64) / 16 = 4 -> 2;    decode 0 + 4 -> cost 6
    instance 1: CPU 3 -> credit 2.25;        prefill 4 -> 1.75;                  decode 4 -> 5.75
    instance 2: GPU 3 -> credit 3, but 32 queued tokens: prefill 6 -> 3; running 1 block: decode 5 -> 8"""
    index = TinyIndex(3, HELD)
    r = make_router("kv-cost", 3)
    v = view(3, index=index, prefill_tokens=[0, 0, 32], running_blocks=[0, 0, 1], block_tokens=16)
    np.testing.assert_allclose(r.costs(req([1, 2, 3, 4]), v, index.prefix_hits([1, 2, 3, 4])), [6.0, 5.75, 8.0])
    assert r.route(req([1, 2, 3, 4]), v) == 1
    weighted = make_router("kv-cost", 3, decode_active_request_weight=1.0)  # + 1 per queued or running request
    assert weighted.route(req([1, 2, 3, 4]), view(3, [0, 1, 0], index=index, prefill_tokens=[0, 0, 32],
                                                  running_blocks=[0, 0, 1], block_tokens=16)) == 0  # 6 < 6.75
    no_host = make_router("kv-cost", 3, medium_credits={"cpu": 0.0})
    assert no_host.route(req([1, 2, 3, 4]), v) == 0  # instance 1 loses its host credit: 8 > 6
    # a speculative entry (routed, not yet confirmed by an event) is credited as device overlap
    spec = TinyIndex(2, {(0, "GPU"): {1, 2}, (1, "speculative"): {1, 2}}, media=("GPU", "speculative"))
    costs = make_router("kv-cost", 2).costs(req([1, 2, 3, 4]), view(2, index=spec, block_tokens=16),
                                            spec.prefix_hits([1, 2, 3, 4]))
    np.testing.assert_allclose(costs, [6.0, 6.0])


def test_kv_cost_ties_are_random_and_temperature_samples():
    index = TinyIndex(4, {})
    v = view(4, index=index, block_tokens=16)
    picks = {make_router("kv-cost", 4, seed=s).route(req([1]), v) for s in range(40)}
    assert picks == {0, 1, 2, 3}  # all cost the same: Dynamo picks at random
    assert {make_router("kv-cost", 4, tie_break="lowest", seed=s).route(req([1]), v) for s in range(5)} == {0}
    loaded = view(4, index=index, block_tokens=16, prefill_tokens=[0, 160, 320, 480])  # costs 2, 12, 22, 32
    cold = [make_router("kv-cost", 4, router_temperature=0.01, seed=s).route(req([1]), loaded) for s in range(50)]
    hot = [make_router("kv-cost", 4, router_temperature=1.0, seed=s).route(req([1]), loaded) for s in range(200)]
    assert set(cold) == {0}  # a low temperature is nearly the argmin
    assert set(hot) == {0, 1, 2, 3} and hot.count(0) > hot.count(3)  # a high one spreads, still favouring cheap


def test_least_loaded_and_session_take_random_ties():
    v = view(3, [1, 0, 0])
    assert {make_router("least-loaded", 3, tie_break="random", seed=s).route(req([1]), v) for s in range(30)} == {1, 2}
    assert make_router("least-loaded", 3).route(req([1]), v) == 1  # the default stays the lowest index
    firsts = {make_router("session", 3, tie_break="random", seed=s).route(req([1], session=4), v) for s in range(30)}
    assert firsts == {1, 2}


def test_weighted_sums_normalised_scores():
    r = make_router("weighted", 3, tie_break="lowest")  # no index: prefix from its own memory
    steps = [(req([1, 2]), view(3)),                                 # all equal: 0
             (req([1, 2]), view(3, [2, 0, 1], kv=[0.5, 0, 0])),     # [2+0+.5, 0+1+1, 0+.5+1] -> 0
             (req([1, 2]), view(3, [4, 0, 0], kv=[1.0, 0, 0.5]))]   # [2+0+0, 0+1+1, 0+1+.5]: tie -> 0
    assert replay(r, steps) == [0, 0, 0]
    kv_only = make_router("weighted", 3, weights={"kv": 1.0}, tie_break="lowest")
    assert kv_only.route(req([1]), view(3, kv=[0.2, 0.1, 0.1])) == 1
    # precise scorer: scores [2, 2.4, 3] over holders {0, 1, 2} -> [0, 0.4, 1]; queue [0, 3, 1] -> [1, 0, 2/3]
    # totals 2 x prefix + queue + kv: [1 + 1, 0.8 + 0 + 1, 2 + 2/3 + 1] -> 2
    index = TinyIndex(3, HELD)
    assert r._memory.sizes.tolist() == [2, 0, 0]  # pairs (1, 0), (2, 0): refreshed, not added again
    assert r.route(req([1, 2, 3, 4]), view(3, [0, 3, 1], index=index)) == 2
    assert r._memory.sizes.tolist() == [2, 0, 0]  # with an index the memory is neither read nor written


def test_weighted_precise_prefix_is_min_max_over_the_instances_holding_the_first_block():
    held = {(0, "GPU"): {1}, (1, "GPU"): {1, 2, 3}}  # instance 2 holds nothing: 0, not the minimum
    r = make_router("weighted", 3, weights={"prefix": 1.0}, tie_break="lowest")
    assert r.route(req([1, 2, 3]), view(3, index=TinyIndex(3, held))) == 1
    only = {(2, "CPU"): {1}}  # a single holder scores 1.0 whatever its length
    assert make_router("weighted", 3, weights={"prefix": 1.0, "load": 0.9}, tie_break="lowest").route(
        req([1, 2, 3]), view(3, [0, 0, 1], index=TinyIndex(3, only))) == 2  # 1.0 + 0 > 0 + 0.9


def test_weighted_profiles_are_llmds():
    precise, approximate = make_router("weighted", 2), make_router("weighted", 2, profile="approximate")
    assert precise.weights == {"prefix": 2.0, "load": 1.0, "kv": 1.0} and precise.uses_index
    assert approximate.weights == {"prefix": 3.0, "load": 2.0, "kv": 2.0} and not approximate.uses_index
    approximate.route(req([5, 6]), view(2, [0, 1], index=TinyIndex(2, {(1, "GPU"): {5, 6}})))
    assert approximate._memory.sizes.tolist() == [2, 0]  # it ignored the index, remembered where it sent


def test_weighted_load_metric_waiting_or_total():
    v = view(3, [0, 0, 0], running=[5, 0, 0])
    load_only = dict(weights={"load": 1.0}, tie_break="lowest")
    assert make_router("weighted", 3, **load_only).route(req([1]), v) == 0  # waiting all equal
    assert make_router("weighted", 3, load_metric="total", **load_only).route(req([1]), v) == 1


# -- bad input ----------------------------------------------------------------------------------
def test_unknown_router_lists_the_known_ones():
    with pytest.raises(BadInputError, match="unknown router 'fastest'") as err:
        make_router("fastest", 2)
    for name in ROUTERS:
        assert name in str(err.value)
    assert isinstance(make_router("Approx_Prefix", 2), ApproxPrefixRouter)


@pytest.mark.parametrize("name, params, error, match", [
    ("round-robin", {"speed": 1}, BadInputError, "takes no option 'speed'; it takes no options"),
    ("approx-prefix", {"cache_threshold": 1.5}, BadInputError, "cache_threshold must be in"),
    ("approx-prefix", {"max_blocks": 0}, BadInputError, "max_blocks must be >= 1"),
    ("approx-prefix", {"balance_abs_threshold": 2.5}, DTypeError, "balance_abs_threshold must be an integer"),
    ("approx-prefix", {"balance_rel_threshold": 0}, BadInputError, "balance_rel_threshold"),
    ("approx-prefix", {"miss_route": "random"}, BadInputError, "miss_route"),
    ("session", {"first": "random"}, BadInputError, "first must be"),
    ("session", {"max_sessions": 0}, BadInputError, "max_sessions"),
    ("precise-prefix", {"load_weight": -1}, BadInputError, "load_weight"),
    ("precise-prefix", {"medium_weights": {}}, DTypeError, "medium_weights"),
    ("precise-prefix", {"medium_weights": {"GPU": float("nan")}}, BadInputError, "medium_weights"),
    ("weighted", {"weights": {"prefix": 1.0, "latency": 1.0}}, BadInputError, "unknown score 'latency'"),
    ("weighted", {"weights": {"prefix": 0.0}}, BadInputError, "all zero"),
    ("weighted", {"weights": {"kv": -1.0}}, BadInputError, "weights\\['kv'\\]"),
    ("weighted", {"load_metric": "p99"}, BadInputError, "load_metric"),
    ("weighted", {"profile": "fast"}, BadInputError, "profile must be one of \\['approximate', 'precise'\\]"),
    ("weighted", {"profile": "approximate", "medium_weights": {"gpu": 1.0}}, BadInputError, "does not read the index"),
    ("weighted", {"medium_weights": {"gpu": 1.0, "GPU": 0.5}}, BadInputError, "names medium 'GPU' twice"),
    ("approx-prefix", {"rule": "sglang"}, BadInputError, "rule must be one of"),
    ("approx-prefix", {"miss_route": "smallest"}, BadInputError, "miss_route applies to rule='sgl-router-2025'"),
    ("precise-prefix", {"balance": "fair"}, BadInputError, "balance must be one of"),
    ("precise-prefix", {"balance": "linear"}, BadInputError, "needs load_weight"),
    ("precise-prefix", {"balance": "none", "load_weight": 2.0}, BadInputError, "load_weight applies to balance='linear'"),
    ("precise-prefix", {"medium_weights": {"gpu": 1.0}}, BadInputError, "balance='dynamo' credits media"),
    ("precise-prefix", {"balance": "none", "medium_weights": {3: 1.0}}, DTypeError, "medium names"),
    ("kv-cost", {"overlap_score_credit": 1.5}, BadInputError, "overlap_score_credit"),
    ("kv-cost", {"host_cache_hit_weight": -0.1}, BadInputError, "host_cache_hit_weight"),
    ("kv-cost", {"prefill_load_scale": float("inf")}, BadInputError, "prefill_load_scale"),
    ("kv-cost", {"router_temperature": -1}, BadInputError, "router_temperature"),
    ("kv-cost", {"medium_credits": {"gpu": 2.0}}, BadInputError, "medium_credits\\['gpu'\\] must be in \\[0, 1.0\\]"),
    ("kv-cost", {"tie_break": "first"}, BadInputError, "tie_break must be 'random' or 'lowest'"),
    ("least-loaded", {"tie_break": None}, BadInputError, "tie_break"),
    ("session", {"seed": -3}, BadInputError, "seed must be >= 0"),
    ("weighted", {"seed": 1.5}, DTypeError, "seed must be an integer"),
])
def test_bad_options_raise_naming_the_option(name, params, error, match):
    with pytest.raises(error, match=match):
        make_router(name, 2, **params)


def test_bad_specs_and_instance_counts():
    with pytest.raises(DTypeError, match="route\\(request, view\\)"):
        make_router(object(), 2)
    with pytest.raises(DTypeError, match="route\\(request, view\\)"):
        make_router(ApproxPrefixRouter, 2)  # the class, not an object
    with pytest.raises(BadInputError, match="only apply to a router given by name"):
        make_router(make_router("round-robin", 2), 2, speed=1)
    with pytest.raises(BadInputError, match="num_instances must be >= 1"):
        make_router("round-robin", 0)
    with pytest.raises(BadInputError, match="built for 2 instances but the view has 3"):
        make_router("least-loaded", 2).route(req([1]), view(3))


def test_precise_prefix_needs_an_index_and_known_media():
    with pytest.raises(BadInputError, match="view.index is None"):
        make_router("precise-prefix", 2).route(req([1]), view(2))
    r = make_router("precise-prefix", 2, balance="none", medium_weights={"HBM": 1.0})
    with pytest.raises(BadInputError, match="'hbm', which the index does not have; its media are \\['GPU', 'CPU'\\]"):
        r.route(req([1]), view(2, index=TinyIndex(2, {})))
    with pytest.raises(BadInputError, match="medium_credits names 'nvme'"):
        make_router("kv-cost", 2, medium_credits={"NVMe": 0.1}).route(req([1]), view(2, index=TinyIndex(2, {}),
                                                                                  block_tokens=16))

    class WrongShape(TinyIndex):
        def prefix_hits(self, keys):
            return np.zeros((1, 2), dtype=np.int64)

    with pytest.raises(BadInputError, match="returned shape \\(1, 2\\); expected \\(2, 2\\)"):
        make_router("precise-prefix", 2).route(req([1]), view(2, index=WrongShape(2, {})))


@pytest.mark.parametrize("answer, error, match", [
    (3, InvalidIdError, "returned instance 3 for request 0; expected an index in \\[0, 3\\)"),
    (-1, InvalidIdError, "returned instance -1"),
    (1.0, DTypeError, "returned 1.0 \\(float\\)"),
    (True, DTypeError, "returned True"),
    (None, DTypeError, "returned None"),
])
def test_checked_route_refuses_bad_answers(answer, error, match):
    class Fixed:
        name = "fixed"

        def route(self, request, view):
            return answer

    with pytest.raises(error, match=match) as err:
        checked_route(Fixed(), req([1]), view(3))
    assert "'fixed'" in str(err.value) and isinstance(err.value, KvmmError)
    assert checked_route(type("NumpyInt", (), {"route": lambda self, r, v: np.int32(2)})(), req([1]), view(3)) == 2


def test_cluster_view_validates_and_shares_owned_arrays():
    queue = np.zeros(3, dtype=np.int64)
    v = ClusterView(3, queue_lengths=queue)
    queue[1] = 4  # the simulator updates in place; routers see it
    assert v.queue_lengths is queue and v.load().tolist() == [0, 4, 0]
    assert ClusterView(2, queue_lengths=[1, 2]).queue_lengths.dtype == np.int64
    for kwargs, error, match in [
        ({"queue_lengths": [1, 2, 3]}, ShapeError, "queue_lengths must have shape \\(2,\\)"),
        ({"running": [-1, 0]}, BadInputError, "negative count -1"),
        ({"queue_lengths": [0.5, 1]}, DTypeError, "integers"),
        ({"kv_utilisation": [0.5, 1.5]}, BadInputError, "kv_utilisation must be in \\[0, 1\\]"),
        ({"kv_utilisation": [float("nan"), 0]}, BadInputError, "kv_utilisation"),
        ({"kv_utilisation": ["a", "b"]}, DTypeError, "kv_utilisation"),
        ({"index": object()}, DTypeError, "index must be a BlockIndex"),
        ({"index": TinyIndex(3, {})}, BadInputError, "index covers 3 instances but the view has 2"),
        ({"now": -1.0}, BadInputError, "now"),
    ]:
        with pytest.raises(error, match=match):
            ClusterView(2, **kwargs)
    with pytest.raises(BadInputError, match="num_instances must be >= 1"):
        ClusterView(0)


def test_route_request_validates_and_keeps_an_int64_array():
    ids = np.array([3, 4], dtype=np.int64)
    assert RouteRequest(0, 0.0, ids, 32, 1).block_ids is ids
    assert RouteRequest(0, 0.0, [3, 4], 32, 1).block_ids.dtype == np.int64
    assert RouteRequest(0, 0.0, [], 0, 1).session == -1
    for args, error, match in [((0, 0.0, [1.5], 1, 1), DTypeError, "block_ids"), ((-1, 0.0, [1], 1, 1), BadInputError, "index"),
                               ((0, -2.0, [1], 1, 1), BadInputError, "arrival_s"),
                               ((0, 0.0, [1], 1, 1, -2), BadInputError, "session must be >= -1")]:
        with pytest.raises(error, match=match):
            RouteRequest(*args)
    with pytest.raises(AttributeError):
        RouteRequest(0, 0.0, ids, 32, 1).session = 3  # frozen


def test_every_router_speaks_the_protocol_and_has_its_name():
    for name, cls in ROUTERS.items():
        router = make_router(name, 2)
        assert isinstance(router, Router) and type(router) is cls and router.name == name
    assert isinstance(PrecisePrefixRouter(2), Router) and isinstance(WeightedRouter(2), Router)


def test_a_raising_route_leaves_the_router_as_it_was():
    r = make_router("approx-prefix", 2)
    r.route(req([1, 2]), view(2))
    before = (list(r._memory._lru), dict(r._memory._mask), r._memory.sizes.tolist())
    with pytest.raises(BadInputError):
        r.route(req([1, 2]), view(3))
    assert (list(r._memory._lru), dict(r._memory._mask), r._memory.sizes.tolist()) == before


# -- the docs page ------------------------------------------------------------------------------
PAGE = (ROOT / "docs" / "cluster_routers.md").read_text(encoding="utf-8")


def test_the_docs_router_example_runs_and_prints_what_it_says(capsys):
    example, contract = re.findall(r"```python\n(.*?)```", PAGE, re.S)
    assert len([line for line in example.splitlines() if line.strip()]) < 20 + 6  # the class itself is under 20
    cls_lines = re.search(r"class FirstBlockAffinity:\n(?:(?:    .*)?\n)+", example).group(0)
    assert len([line for line in cls_lines.splitlines() if line.strip()]) < 20
    namespace = {}
    exec(compile(example, "cluster_routers.md", "exec"), namespace)
    expected = re.search(r"^# (\[.*\])$", example, re.M).group(1)
    assert capsys.readouterr().out.strip() == expected == "[1, 1, 2]"
    exec(compile(contract, "cluster_routers.md", "exec"), namespace)
    suite = namespace["TestFirstBlockAffinity"]()
    suite.test_speaks_the_protocol()
    suite.test_answers_in_range_deterministically_without_mutating()


def test_the_docs_table_names_every_router_with_its_peer_file_and_defaults():
    rows = {line.split("|")[1].strip(" `"): line for line in PAGE.splitlines() if line.startswith("| `")}
    assert set(rows) == set(ROUTERS)
    peers = {"approx-prefix": ("smg-project/smg", "cache_aware.rs", "f8daa8835"),
             "precise-prefix": ("llm-d/llm-d-kv-cache-manager v0.4.0", "kvblock_scorer.go", "ai-dynamo/dynamo v1.6"),
             "weighted": ("llm-d/llm-d-inference-scheduler v0.8.0", "defaults.go", "520af478"),
             "kv-cost": ("ai-dynamo/dynamo v1.6", "default.rs", "config.rs")}
    for name, needles in peers.items():
        for needle in needles:
            assert needle in rows[name], (name, needle)
        cells = re.split(r"(?<!\\)\|", rows[name])  # a cell may hold an escaped \|
        assert len(cells) == 7 and len(cells[5].strip()) > 20, cells  # what kvmm does differently
    for default in ("`cache_threshold` (0.3)", "`balance_abs_threshold` (64)", "`balance_rel_threshold` (1.5)",
                    "`overlap_score_credit` (1.0)", "`host_cache_hit_weight` (0.75)", "`disk_cache_hit_weight` (0.25)",
                    "`prefill_load_scale` (1.0)", "`decode_active_request_weight` (0.0)", "`router_temperature` (0.0)",
                    '`balance` ("dynamo"', "gpu 1.0, cpu 0.8"):
        assert default in PAGE, default
    a, k = ApproxPrefixRouter(2), make_router("kv-cost", 2)
    assert (a.rule, a.cache_threshold, a.balance_abs_threshold, a.balance_rel_threshold) == ("smg", 0.3, 64, 1.5)
    assert (k.overlap_score_credit, k.host_cache_hit_weight, k.disk_cache_hit_weight, k.prefill_load_scale,
            k.decode_active_request_weight, k.router_temperature, k.tie_break) == (1.0, 0.75, 0.25, 1.0, 0.0, 0.0, "random")
    assert make_router("precise-prefix", 2).balance == "dynamo"
    assert make_router("precise-prefix", 2, load_weight=4.0).balance == "linear"  # the old spelling still works
    from kvmm.cluster.routers_llmd import LLMD_MEDIUM_WEIGHTS
    assert LLMD_MEDIUM_WEIGHTS == {"gpu": 1.0, "cpu": 0.8}


def test_kvmm_cluster_exports_load_lazily_without_numba():
    import importlib
    import subprocess
    import sys

    pkg = importlib.import_module("kvmm.cluster")
    for name in ("RouteRequest", "ClusterView", "make_router", "ROUTERS", "checked_route", "ApproxPrefixRouter"):
        assert name in pkg.__all__ and getattr(pkg, name) is getattr(importlib.import_module(pkg._LAZY[name]), name)
    code = "import sys, kvmm.cluster; kvmm.cluster.make_router; print('numba' in sys.modules, 'hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.split() == ["False", "False"]
