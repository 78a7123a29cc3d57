"""The nontrivial routers agree with their plain-Python models (kvmm/testing/models/routers.py,
written from docs/cluster_routers.md) on Hypothesis-generated request and view sequences."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.cluster import make_router
from kvmm.testing.models.routers import ApproxPrefixModel, PrecisePrefixModel, WeightedModel
from kvmm.testing.router_contract import FakeBlockIndex, build_step, route_steps

SETTINGS = settings(max_examples=150, deadline=None)


def cases(**options):
    """(num_instances, steps, options) with options drawn from the given strategies."""
    return st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n, max_steps=30),
                                                         st.fixed_dictionaries(options)))


def agree(router, model, n, steps, with_index=True):
    index = FakeBlockIndex(n) if with_index else None
    got, want = [], []
    for number, step in enumerate(steps):
        request, view = build_step(step, number, index, n)
        got.append(router.route(request, view))
        want.append(model.route(request, view))
    assert got == want
    return got


APPROX = dict(max_blocks=st.sampled_from([1, 2, 3, 5, 8, 1000]), cache_threshold=st.sampled_from([0.0, 0.3, 0.5, 0.99, 1.0]),
              balance_abs_threshold=st.sampled_from([0, 1, 2, 3, 64]), balance_rel_threshold=st.sampled_from([1.0, 1.5, 2.0]),
              miss_route=st.sampled_from(["smallest", "least-loaded"]))


@SETTINGS
@given(cases(**APPROX))
def test_approx_prefix_matches_its_model(case):
    n, steps, options = case
    router = make_router("approx-prefix", n, **options)
    model = ApproxPrefixModel(n, **options)
    agree(router, model, n, steps, with_index=False)
    assert router.remembered == len(model.memory.pairs) <= options["max_blocks"]
    assert router._memory.sizes.tolist() == [model.memory.size(i) for i in range(n)]
    assert set(router._memory._lru) == set(model.memory.pairs)


def test_approx_prefix_model_agreement_sees_every_branch():
    """The generated cases reach each rule (imbalance, cache hit, both misses), so the agreement
    above is not about one branch only."""
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(300):
        n = int(rng.integers(2, 5))
        model = ApproxPrefixModel(n, max_blocks=5, balance_abs_threshold=2, miss_route="smallest")
        router = make_router("approx-prefix", n, max_blocks=5, balance_abs_threshold=2)
        for number in range(10):
            step = {"blocks": rng.integers(0, 4, size=int(rng.integers(0, 4))).tolist(), "session": -1,
                    "queue": rng.integers(0, 6, size=n).tolist(), "running": [0] * n, "kv": [0.0] * n, "store": None}
            request, view = build_step(step, number, None, n)
            load = view.load()
            matched = model.memory.matched(request.block_ids.tolist(), n)
            if load.max() - load.min() > 2 and load.max() > 1.5 * load.min():
                seen.add("imbalanced")
            elif request.block_ids.size and max(matched) / request.block_ids.size > 0.3:
                seen.add("hit")
            else:
                seen.add("miss")
            assert router.route(request, view) == model.route(request, view)
    assert seen == {"imbalanced", "hit", "miss"}


PRECISE = dict(load_weight=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
               medium_weights=st.sampled_from([None, {"GPU": 1.0, "CPU": 0.8}, {"CPU": 1.0}, {"GPU": 0.0, "CPU": 0.5}]))


@SETTINGS
@given(cases(**PRECISE))
def test_precise_prefix_matches_its_model(case):
    n, steps, options = case
    agree(make_router("precise-prefix", n, **options), PrecisePrefixModel(n, **options), n, steps)


WEIGHTED = dict(weights=st.sampled_from([{"prefix": 2.0, "load": 1.0, "kv": 1.0}, {"prefix": 1.0}, {"load": 1.0},
                                         {"kv": 1.0, "load": 0.5}, {"prefix": 3.0, "load": 2.0},
                                         {"prefix": 0.7, "load": 0.3, "kv": 0.1}]),
                load_metric=st.sampled_from(["waiting", "total"]), max_blocks=st.sampled_from([2, 6, 1000]))


@SETTINGS
@given(cases(**WEIGHTED), st.booleans())
def test_weighted_matches_its_model(case, with_index):
    n, steps, options = case
    agree(make_router("weighted", n, **options), WeightedModel(n, **options), n, steps, with_index=with_index)


@SETTINGS
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n, max_steps=30))))
def test_precise_prefix_with_zero_load_weight_always_lands_on_a_longest_prefix(case):
    n, steps = case
    index = FakeBlockIndex(n)
    router = make_router("precise-prefix", n)
    for number, step in enumerate(steps):
        request, view = build_step(step, number, index, n)
        longest = index.prefix_hits(request.block_ids).max(axis=1)
        assert longest[router.route(request, view)] == longest.max()
