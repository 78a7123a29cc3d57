"""kvmm.cluster routers: pinned instance sequences for small hand-made inputs (docs/cluster_routers.md),
bad input, checked_route, the view and request validation, and the docs page's own example."""

import re
from pathlib import Path

import numpy as np
import pytest

from kvmm.cluster import (ROUTERS, ApproxPrefixRouter, ClusterView, PrecisePrefixRouter, RouteRequest, WeightedRouter,
                          checked_route, make_router)
from kvmm.errors import BadInputError, DTypeError, InvalidIdError, KvmmError, ShapeError
from kvmm.protocols import Router


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


def view(n, queue=None, running=None, kv=None, index=None):
    return ClusterView(n, queue_lengths=queue, running=running, kv_utilisation=kv, index=index)


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


def test_approx_prefix_follows_sglang_cache_aware_rules():
    steps = [
        (req([1, 2, 3, 4]), view(3)),           # nothing remembered: smallest memory (all 0) -> 0
        (req([1, 2, 5, 6]), view(3)),           # 2/4 = 0.5 > 0.3 matched on 0
        (req([7, 8]), view(3)),                 # no match: smallest memory, sizes [6, 0, 0] -> 1
        (req([1, 5]), view(3)),                 # 1 and 5 both remembered for 0: ratio 1
        (req([1, 2, 3, 4]), view(3, [100, 0, 0])),  # imbalanced (100 - 0 > 64, 100 > 1.5 * 0): least loaded
        (req([1, 2, 3]), view(3, [5, 2, 0])),   # 0 and 1 both match 3/3; lower load wins -> 1
    ]
    router = make_router("approx-prefix", 3)
    assert replay(router, steps) == [0, 0, 1, 0, 1, 1]
    assert router._memory.sizes.tolist() == [6, 6, 0] and router.remembered == 12  # distinct (block, instance) pairs


def test_approx_prefix_threshold_is_strict():
    steps = [(req([1, 2]), view(2)), (req([1, 3]), view(2))]  # second: match 1/2 = 0.5
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.5), steps) == [0, 1]  # not > 0.5: smallest
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.49), steps) == [0, 0]
    assert replay(make_router("approx-prefix", 2, cache_threshold=0.5, miss_route="least-loaded"),
                  [(req([1, 2]), view(2)), (req([1, 3]), view(2, [1, 0]))]) == [0, 1]


def test_approx_prefix_imbalance_needs_both_thresholds():
    router = make_router("approx-prefix", 2, balance_abs_threshold=0, balance_rel_threshold=1.5)
    steps = [(req([1]), view(2)), (req([1]), view(2, [3, 2])), (req([1]), view(2, [4, 2]))]
    assert replay(router, steps) == [0, 0, 1]  # 3 > 1.5 * 2 is false: still cache-aware; 4 > 3: least loaded
    router = make_router("approx-prefix", 2, balance_abs_threshold=2, balance_rel_threshold=1.0)
    assert replay(router, [(req([1]), view(2)), (req([1]), view(2, [2, 0])), (req([1]), view(2, [3, 0]))]) == [0, 0, 1]


def test_approx_prefix_lru_forgets_prefix_tails_first():
    router = make_router("approx-prefix", 2, max_blocks=2)
    steps = [(req([1, 2, 3]), view(2)), (req([1, 2, 3]), view(2)), (req([3]), view(2)), (req([1, 2]), view(2))]
    assert replay(router, steps) == [0, 0, 1, 0]  # (3, 0) was the oldest pair: forgotten; heads 1, 2 kept
    assert router.remembered == 2 and router._memory.sizes.tolist() == [2, 0]


HELD = {(0, "GPU"): {1, 2}, (1, "CPU"): {1, 2, 3}, (2, "GPU"): {1, 2, 3}}


def test_precise_prefix_picks_the_longest_prefix_then_lower_load():
    index = TinyIndex(3, HELD)  # hits for [1, 2, 3, 4]: [[2, 0], [0, 3], [3, 0]]
    r = make_router("precise-prefix", 3)
    q = req([1, 2, 3, 4])
    assert r.route(q, view(3, index=index)) == 1  # 1 and 2 tie at 3 blocks: lowest index
    assert r.route(q, view(3, [0, 4, 1], index=index)) == 2  # ... lower load first
    assert make_router("precise-prefix", 3, medium_weights={"GPU": 1.0, "CPU": 0.8}).route(q, view(3, index=index)) == 2
    assert make_router("precise-prefix", 3, load_weight=1.0).route(q, view(3, [0, 0, 2], index=index)) == 1
    assert make_router("precise-prefix", 3, load_weight=1.0).route(q, view(3, [0, 2, 0], index=index)) == 2
    assert r.route(req([9]), view(3, [3, 1, 2], index=index)) == 1  # nothing held anywhere: least loaded


def test_precise_prefix_with_zero_load_weight_goes_where_the_longest_prefix_is():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        held = {(int(i), m): set(rng.integers(0, 6, size=int(rng.integers(0, 6))).tolist())
                for i in range(n) for m in ("GPU", "CPU")}
        index = TinyIndex(n, held)
        q = req(rng.integers(0, 6, size=int(rng.integers(0, 6))).tolist())
        v = view(n, rng.integers(0, 9, size=n), rng.integers(0, 9, size=n), index=index)
        choice = checked_route(make_router("precise-prefix", n), q, v)
        longest = index.prefix_hits(q.block_ids).max(axis=1)
        assert longest[choice] == longest.max()


def test_weighted_sums_normalised_scores():
    r = make_router("weighted", 3)  # no index: prefix from its own memory
    steps = [(req([1, 2]), view(3)),                                 # all equal: 0
             (req([1, 2]), view(3, [2, 0, 1], kv=[0.5, 0, 0])),     # [2+0+.5, 0+1+1, 0+.5+1] -> 0
             (req([1, 2]), view(3, [4, 0, 0], kv=[1.0, 0, 0.5]))]   # [2+0+0, 0+1+1, 0+1+.5]: tie -> 0
    assert replay(r, steps) == [0, 0, 0]
    assert make_router("weighted", 3, weights={"kv": 1.0}).route(req([1]), view(3, kv=[0.2, 0.1, 0.1])) == 1
    index = TinyIndex(3, HELD)  # matched [2, 3, 3] of 4; queue [0, 3, 1]: totals [3, 2.5, 3.17]
    assert r._memory.sizes.tolist() == [2, 0, 0]  # pairs (1, 0), (2, 0): refreshed, not added again
    assert r.route(req([1, 2, 3, 4]), view(3, [0, 3, 1], index=index)) == 2
    assert r._memory.sizes.tolist() == [2, 0, 0]  # with an index the memory is neither read nor written


def test_weighted_load_metric_waiting_or_total():
    v = view(3, [0, 0, 0], running=[5, 0, 0])
    assert make_router("weighted", 3, weights={"load": 1.0}).route(req([1]), v) == 0  # waiting all equal
    assert make_router("weighted", 3, weights={"load": 1.0}, load_metric="total").route(req([1]), v) == 1


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
    r = make_router("precise-prefix", 2, medium_weights={"HBM": 1.0})
    with pytest.raises(BadInputError, match="'HBM', which the index does not have; its media are \\['GPU', 'CPU'\\]"):
        r.route(req([1]), view(2, index=TinyIndex(2, {})))

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
PAGE = (Path(__file__).resolve().parents[1] / "docs" / "cluster_routers.md").read_text(encoding="utf-8")


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


def test_the_docs_table_names_every_router_with_its_defaults():
    for name, cls in ROUTERS.items():
        assert f"| `{name}` |" in PAGE
    for default in ("`cache_threshold` (0.3)", "`balance_abs_threshold` (64)", "`balance_rel_threshold` (1.5)",
                    "`load_weight` (0.0)"):
        assert default in PAGE
    r = ApproxPrefixRouter(2)
    assert (r.cache_threshold, r.balance_abs_threshold, r.balance_rel_threshold) == (0.3, 64, 1.5)


def test_kvmm_cluster_exports_load_lazily_without_numba():
    import importlib
    import subprocess
    import sys

    pkg = importlib.import_module("kvmm.cluster")
    for name in ("RouteRequest", "ClusterView", "make_router", "ROUTERS", "checked_route", "ApproxPrefixRouter"):
        assert name in pkg.__all__ and getattr(pkg, name) is getattr(importlib.import_module(pkg._LAZY[name]), name)
    code = "import sys, kvmm.cluster; kvmm.cluster.make_router; print('numba' in sys.modules, 'hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.split() == ["False", "False"]
