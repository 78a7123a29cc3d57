"""The nontrivial routers agree with their plain-Python models (kvmm/testing/models/routers.py,
written from docs/cluster_routers.md and the peer files it names) decision by decision, random
tie-breaks and softmax samples included, on Hypothesis-generated request and view sequences."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.cluster import make_router
from kvmm.testing.models.routers import (
    ApproxPrefixModel,
    KvCostModel,
    LeastLoadedModel,
    PrecisePrefixModel,
    WeightedModel,
)
from kvmm.testing.router_contract import FakeBlockIndex, build_step, route_steps

SETTINGS = settings(max_examples=150, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)
TIES = st.sampled_from(["random", "lowest"])


def cases(**options):
    """(num_instances, steps, options) with options drawn from the given strategies."""
    return st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n, max_steps=30),
                                                         st.fixed_dictionaries(options)))


def agree(router, model, n, steps, with_index=True, media=("GPU", "CPU")):
    index = FakeBlockIndex(n, media) if with_index else None
    got, want = [], []
    for number, step in enumerate(steps):
        if index is not None and step["store"] is not None and step["store"][2] not in media:
            step = dict(step, store=(step["store"][0], step["store"][1], media[-1]))
        request, view = build_step(step, number, index, n)
        got.append(router.route(request, view))
        want.append(model.route(request, view))
    assert got == want
    return got


APPROX_2025 = dict(rule=st.just("sgl-router-2025"), max_blocks=st.sampled_from([1, 2, 3, 5, 8, 1000]),
                   cache_threshold=st.sampled_from([0.0, 0.3, 0.5, 0.99, 1.0]),
                   balance_abs_threshold=st.sampled_from([0, 1, 2, 3, 64]),
                   balance_rel_threshold=st.sampled_from([1.0, 1.5, 2.0]),
                   miss_route=st.sampled_from(["smallest", "least-loaded"]), tie_break=TIES, seed=SEEDS)
APPROX_SMG = dict(max_blocks=st.sampled_from([1, 2, 3, 5, 8, 1000]), cache_threshold=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
                  balance_abs_threshold=st.sampled_from([0, 1, 2, 64]), balance_rel_threshold=st.sampled_from([1.0, 1.1, 1.5]),
                  tie_break=TIES, seed=SEEDS)


@SETTINGS
@given(st.one_of(cases(**APPROX_2025), cases(**APPROX_SMG)))
def test_approx_prefix_matches_its_model(case):
    n, steps, options = case
    router = make_router("approx-prefix", n, **options)
    model = ApproxPrefixModel(n, **options)
    agree(router, model, n, steps, with_index=False)
    assert router.remembered == len(model.memory.pairs) <= options["max_blocks"]
    assert router._memory.sizes.tolist() == [model.memory.size(i) for i in range(n)]
    assert set(router._memory._lru) == set(model.memory.pairs)
    assert router._sent.tolist() == model.sent


def test_approx_prefix_model_agreement_sees_every_branch():
    """The generated cases reach each rule (smg: hit kept, hit spilled by the gate, miss; 2025:
    imbalance, hit, miss), so the agreement above is not about one branch only."""
    rng = np.random.default_rng(3)
    seen = set()
    for rule in ("smg", "sgl-router-2025"):
        for _ in range(300):
            n = int(rng.integers(2, 5))
            options = dict(rule=rule, max_blocks=5, balance_abs_threshold=2, seed=int(rng.integers(1 << 30)))
            model = ApproxPrefixModel(n, **options)
            router = make_router("approx-prefix", n, **options)
            for number in range(10):
                step = {"blocks": rng.integers(0, 4, size=int(rng.integers(0, 4))).tolist(), "session": -1,
                        "queue": rng.integers(0, 8, size=n).tolist(), "running": [0] * n, "kv": [0.0] * n,
                        "store": None}
                request, view = build_step(step, number, None, n)
                load = view.load()
                matched = model.memory.matched(request.block_ids.tolist(), n)
                hit = request.block_ids.size and max(matched) / request.block_ids.size > 0.3
                if rule == "smg":
                    choice = router.route(request, view)
                    spilled = hit and matched[choice] < max(matched)
                    seen.add(("smg", "spill" if spilled else "hit" if hit else "miss"))
                    assert choice == model.route(request, view)
                    continue
                if load.max() - load.min() > 2 and load.max() > 1.5 * load.min():
                    seen.add(("2025", "imbalanced"))
                else:
                    seen.add(("2025", "hit" if hit else "miss"))
                assert router.route(request, view) == model.route(request, view)
    assert seen == {("smg", "hit"), ("smg", "spill"), ("smg", "miss"), ("2025", "imbalanced"), ("2025", "hit"),
                    ("2025", "miss")}


MEDIUM_WEIGHTS = st.sampled_from([None, {"GPU": 1.0, "CPU": 0.8}, {"cpu": 1.0}, {"Gpu": 0.0, "CPU": 0.5},
                                  {"gpu": 0.3, "cpu": 0.9}])
PRECISE = st.one_of(
    st.fixed_dictionaries({"balance": st.just("none"), "medium_weights": MEDIUM_WEIGHTS, "tie_break": TIES,
                           "seed": SEEDS}),
    st.fixed_dictionaries({"load_weight": st.sampled_from([0.0, 0.5, 1.0, 3.0]), "medium_weights": MEDIUM_WEIGHTS,
                           "tie_break": TIES, "seed": SEEDS}),
    st.fixed_dictionaries({"tie_break": TIES, "seed": SEEDS}))


@SETTINGS
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n, max_steps=30), PRECISE)))
def test_precise_prefix_matches_its_model(case):
    n, steps, options = case
    agree(make_router("precise-prefix", n, **options), PrecisePrefixModel(n, **options), n, steps)


KV_COST = dict(overlap_score_credit=st.sampled_from([1.0, 0.5, 0.0]), host_cache_hit_weight=st.sampled_from([0.75, 1.0, 0.0]),
               disk_cache_hit_weight=st.sampled_from([0.25, 0.5]), prefill_load_scale=st.sampled_from([1.0, 0.0, 2.5]),
               decode_active_request_weight=st.sampled_from([0.0, 1.0, 32.0]),
               router_temperature=st.sampled_from([0.0, 0.0, 0.1, 1.0, 5.0]),
               medium_credits=st.sampled_from([None, {"cpu": 0.5}, {"GPU": 0.9, "Disk": 0.1}]), tie_break=TIES,
               seed=SEEDS)


@SETTINGS
@given(cases(**KV_COST), st.sampled_from([("GPU", "CPU"), ("GPU",), ("GPU", "CPU", "Disk"), ("GPU", "speculative")]))
def test_kv_cost_matches_its_model(case, media):
    n, steps, options = case
    if options["medium_credits"] and not {m.lower() for m in options["medium_credits"]} <= {m.lower() for m in media}:
        options = dict(options, medium_credits=None)
    agree(make_router("kv-cost", n, **options), KvCostModel(n, **options), n, steps, media=media)


def test_kv_cost_model_agreement_samples_more_than_one_instance():
    """With a temperature the sampled instances vary (not the argmin every time), and router and
    model still agree draw for draw."""
    rng = np.random.default_rng(8)
    chosen = []
    n = 4
    router, model = make_router("kv-cost", n, router_temperature=1.0, seed=4), KvCostModel(n, router_temperature=1.0, seed=4)
    index = FakeBlockIndex(n)
    for number in range(60):
        step = {"blocks": [1, 2, 3], "session": -1, "queue": [0] * n, "running": [0] * n, "kv": [0.0] * n,
                "prefill": rng.choice([0, 16, 64], size=n).tolist(), "held": rng.integers(0, 6, size=n).tolist(),
                "store": (int(rng.integers(n)), [1, 2], "GPU")}
        request, view = build_step(step, number, index, n)
        got = router.route(request, view)
        assert got == model.route(request, view)
        chosen.append(got)
    assert len(set(chosen)) > 1


WEIGHTED = dict(profile=st.sampled_from(["precise", "approximate"]),
                weights=st.sampled_from([None, {"prefix": 2.0, "load": 1.0, "kv": 1.0}, {"prefix": 1.0}, {"load": 1.0},
                                         {"kv": 1.0, "load": 0.5}, {"prefix": 0.7, "load": 0.3, "kv": 0.1}]),
                load_metric=st.sampled_from(["waiting", "total"]), max_blocks=st.sampled_from([2, 6, 1000]),
                tie_break=TIES, seed=SEEDS)


@SETTINGS
@given(cases(**WEIGHTED), MEDIUM_WEIGHTS, st.booleans())
def test_weighted_matches_its_model(case, medium_weights, with_index):
    n, steps, options = case
    if options["profile"] == "precise":
        options = dict(options, medium_weights=medium_weights)
    agree(make_router("weighted", n, **options), WeightedModel(n, **options), n, steps, with_index=with_index)


@SETTINGS
@given(cases(tie_break=TIES, seed=SEEDS))
def test_least_loaded_matches_its_model(case):
    n, steps, options = case
    agree(make_router("least-loaded", n, **options), LeastLoadedModel(n, **options), n, steps, with_index=False)


@SETTINGS
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n, max_steps=30))))
def test_precise_prefix_load_blind_always_lands_on_a_longest_prefix(case):
    n, steps = case
    index = FakeBlockIndex(n)
    router = make_router("precise-prefix", n, balance="none", medium_weights={"gpu": 1.0, "cpu": 1.0})
    for number, step in enumerate(steps):
        request, view = build_step(step, number, index, n)
        longest = index.prefix_hits(request.block_ids).max(axis=1)
        assert longest[router.route(request, view)] == longest.max()
