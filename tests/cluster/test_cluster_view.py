"""What a router sees (kvmm.cluster.ClusterView, filled by kvmm.sim.engine.cluster): the load
signals per instance, exact as of each arrival or as of the last metrics scrape (docs/cluster.md,
"What a router sees"), checked on a hand-worked trace, against a plain recomputation from the
engines at every refresh of a real replay, and for bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvmm.cluster import ClusterView, make_router
from kvmm.cluster.view import COUNT_FIELDS, LOAD_FIELDS
from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.sim import GiB, SimConfig, TierLevel, simulate
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.sim.config_json import config_from_json, config_to_json
from kvmm.sim.engine import cluster as engine_cluster
from tests.sim.sim_helpers import TOY_MODEL, trace
from tests.sim.test_cluster_sim import toy  # the toy clock's config, with no lower tier below

FIELDS = COUNT_FIELDS + ("kv_utilisation",)


class Recorder:
    """A user router: request r goes to ``plan[r]`` (or the least loaded); it records a copy of
    every field of the view it was shown."""

    def __init__(self, plan=None):
        self.plan = plan
        self.seen = []

    def route(self, request, view):
        self.seen.append({name: getattr(view, name).copy() for name in FIELDS} |
                         {"now": view.now, "scraped_at": view.scraped_at, "block_tokens": view.block_tokens})
        if self.plan is not None:
            return self.plan[request.index]
        return int(np.argmin(view.load()))


# r0 arrives at 0 and prefills its 4096 tokens in one step (4.096 s on the toy clock); r1 at 1 s
# goes to 0 as well, r2 at 1.001 s to 1
ROWS = [(0, 4096, 50, list(range(8))), (1000, 512, 1, [100]), (1001, 512, 1, [101])]


def test_the_view_by_hand_exact():
    res = simulate(toy(trace(ROWS), tiers=(), cluster=ClusterConfig(instances=2, router=Recorder([0, 0, 1]))))
    v0, v1, v2 = res.policies["router"].seen
    pool = v0["kv_blocks_total"][0]
    assert pool == 10**10 // (512 * TOY_MODEL.kv_bytes_per_token) and v0["kv_blocks_total"].tolist() == [pool, pool]
    assert v0["block_tokens"] == 512 and v0["scraped_at"] == v0["now"] == 0.0
    for name in LOAD_FIELDS:  # nothing routed yet
        assert not v0[name].any(), name
    # r0 is prefilling (the step in flight): its 4096 prompt tokens still to compute, 9 blocks held
    # (8 prompt + 1 for its 50 output tokens), nothing queued
    assert v1["running"].tolist() == [1, 0] and v1["prefill_tokens"].tolist() == [4096, 0]
    assert v1["running_blocks"].tolist() == [9, 0] and v1["kv_blocks_used"].tolist() == [9, 0]
    assert v1["queue_lengths"].tolist() == [0, 0] and v1["running_tokens"].tolist() == [0, 0]
    assert v1["kv_utilisation"][0] == pytest.approx(9 / pool)
    # r1 was routed to 0 at 1 s mid-step: inbound, its whole prompt owed (no index), one block queued
    assert v2["inbound"].tolist() == [1, 0] and v2["waiting"].tolist() == [0, 0]
    assert v2["queue_lengths"].tolist() == [1, 0] and v2["prefill_tokens"].tolist() == [4096 + 512, 0]
    assert v2["queued_blocks"].tolist() == [1, 0] and v2["running_blocks"].tolist() == [9, 0]
    assert v2["scraped_at"] == v2["now"] == pytest.approx(1.001)


def test_the_view_by_hand_scraped():
    """Every 0.5 s: r1 (at 1 s) sees the scrape at 1 s; r2 (1.001 s) sees the same scrape, so not
    r1, routed after it."""
    res = simulate(toy(trace(ROWS), tiers=(), cluster=ClusterConfig(instances=2, router=Recorder([0, 0, 1]),
                                                            metrics_interval_s=0.5)))
    v0, v1, v2 = res.policies["router"].seen
    assert v1["scraped_at"] == v2["scraped_at"] == 1.0 and v2["now"] == pytest.approx(1.001)
    assert v1["running"].tolist() == [1, 0] and v1["prefill_tokens"].tolist() == [4096, 0]
    for name in LOAD_FIELDS:
        np.testing.assert_array_equal(v2[name], v1[name], err_msg=name)  # r1's booking is not scraped yet
    assert v2["queue_lengths"].tolist() == [0, 0] and v2["inbound"].tolist() == [0, 0]


class RefreshChecker:
    """Wraps RowFeed.refresh: after each refresh, the row equals a plain recomputation from the
    engine (waiting and inbound prefill summed request by request)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self.seen = set()  # which parts of a row were non-zero in some check
        original = engine_cluster.RowFeed.refresh
        checker = self

        def refresh(feed, rows, i, engine, t):
            original(feed, rows, i, engine, t)
            checker.check(feed, rows, i, engine, t)

        monkeypatch.setattr(engine_cluster.RowFeed, "refresh", refresh)

    def check(self, feed, rows, i, engine, t):
        self.calls += 1
        table = engine.table
        blocks = np.diff(table.offsets)
        inbound = engine.arrival_ids[engine.next_arrival:]
        owed = sum(int(table.prefill_tokens[r]) for r in engine.waiting) + sum(feed.inbound_tokens[r] for r in inbound)
        owed += sum(int(table.prefill_tokens[r]) - engine.scheduler.prefilled[r] for r in engine.prefilling)
        if engine.step_end > t and not engine.scheduler.chunked:
            owed += engine.prefill_in_flight
        context = sum(table.input_len_py[r] + table.output_len_py[r] - 1 - (int(table.finish_step[r]) - engine.decode_steps)
                      for r in engine.running)
        context += sum(table.input_len_py[r] - int(table.prefill_tokens[r]) + engine.scheduler.prefilled[r]
                       for r in engine.prefilling)
        self.seen |= {name for name, n in (("waiting", len(engine.waiting)), ("inbound", len(inbound)),
                                           ("prefilling", len(engine.prefilling)), ("decoding", len(engine.running))) if n}
        pool = engine.hier.pool
        assert rows.waiting[i] == len(engine.waiting) and rows.inbound[i] == len(inbound)
        assert rows.queue_lengths[i] == rows.waiting[i] + rows.inbound[i]
        assert rows.prefill_tokens[i] == owed
        assert rows.queued_blocks[i] == sum(int(blocks[r]) for r in list(engine.waiting) + inbound)
        assert rows.running_tokens[i] == context
        assert rows.running_blocks[i] == sum(ids.shape[0] for ids in engine.held.values())
        assert rows.kv_blocks_used[i] == pool.num_blocks - pool.num_free and rows.kv_utilisation[i] == pool.usage


@pytest.mark.parametrize("router, tiers", [("kv-cost", (TierLevel("dram", capacity_bytes=8 * GiB),)),
                                           ("least-loaded", ())])
def test_every_refresh_equals_a_plain_recomputation(monkeypatch, router, tiers):
    checker = RefreshChecker(monkeypatch)
    res = simulate(SimConfig(workload="conversation", max_requests=400, load=0.9, tiers=tiers,
                             cluster=ClusterConfig(instances=3, router=router)))
    assert checker.calls > 100 and sum(res.requests_per_instance) == 400
    assert checker.seen == {"waiting", "inbound", "prefilling", "decoding"}  # every part was exercised


def test_scrapes_are_at_multiples_of_the_interval_and_rows_hold_between_them():
    cfg = SimConfig(workload="conversation", max_requests=300, load=0.9, tiers=(),
                    cluster=ClusterConfig(instances=3, router=Recorder(), metrics_interval_s=0.25))
    seen = simulate(cfg).policies["router"].seen
    held = 0
    for before, after in zip(seen, seen[1:]):
        assert after["scraped_at"] == math.floor(after["now"] / 0.25) * 0.25
        if after["scraped_at"] == before["scraped_at"]:
            held += 1
            for name in LOAD_FIELDS:
                np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert len({v["scraped_at"] for v in seen}) > 20
    assert held > 100  # the rows-hold check above ran (265 of 299 consecutive pairs share a scrape)


def test_a_stale_view_herds_least_loaded_onto_one_instance():
    """With no scrape after the first, every request sees the same (empty) loads: the least
    loaded is always instance 0.  Exact loads spread them."""
    base = SimConfig(workload="conversation", max_requests=300, load=0.9, tiers=())
    exact = simulate(base.with_(cluster=ClusterConfig(instances=3, router="least-loaded")))
    with pytest.warns(Warning):
        stale = simulate(base.with_(cluster=ClusterConfig(instances=3, router="least-loaded",
                                                          metrics_interval_s=1e9)))
    assert stale.requests_per_instance == (300, 0, 0)
    assert min(exact.requests_per_instance) > 50


def test_metrics_interval_is_validated_and_round_trips():
    for bad in (-0.1, float("nan"), float("inf"), "fast"):
        with pytest.raises(BadInputError, match="metrics_interval_s"):
            ClusterConfig(metrics_interval_s=bad)
    cfg = SimConfig(workload="conversation", cluster=ClusterConfig(instances=2, metrics_interval_s=0.05))
    assert config_from_json(config_to_json(cfg)).cluster.metrics_interval_s == 0.05
    from kvmm.sim import PDConfig

    with pytest.raises(BadInputError, match="metrics_interval_s=0 with pd="):
        SimConfig(pd=PDConfig(2, 1, "rdma400"), cluster=ClusterConfig(instances=2, metrics_interval_s=0.05))


def test_cluster_view_new_fields_validate():
    v = ClusterView(2, prefill_tokens=[5, 0], kv_blocks_used=[1, 2], kv_blocks_total=[4, 4], block_tokens=16,
                    metrics_interval_s=0.05, now=1.0, scraped_at=0.95)
    assert v.prefill_tokens.tolist() == [5, 0] and v.block_tokens == 16 and v.scraped_at == 0.95
    assert ClusterView(2, now=3.0).scraped_at == 3.0  # exact by default
    shared = np.zeros(2, dtype=np.int64)
    assert ClusterView(2, waiting=shared).waiting is shared  # the owner's array, updated in place
    for kwargs, error, match in [
        ({"prefill_tokens": [-1, 0]}, BadInputError, "prefill_tokens holds a negative count"),
        ({"running_blocks": [1, 2, 3]}, ShapeError, "running_blocks must have shape \\(2,\\)"),
        ({"inbound": [0.5, 1]}, DTypeError, "inbound"),
        ({"kv_blocks_used": [5, 0], "kv_blocks_total": [4, 4]}, BadInputError, "kv_blocks_used\\[0\\] = 5 exceeds"),
        ({"block_tokens": -16}, BadInputError, "block_tokens"),
        ({"metrics_interval_s": float("nan")}, BadInputError, "metrics_interval_s"),
        ({"now": 1.0, "scraped_at": 2.0}, BadInputError, "scraped_at = 2.0 is after now = 1.0"),
    ]:
        with pytest.raises(error, match=match):
            ClusterView(2, **kwargs)


def test_uses_index_follows_the_routers_options():
    assert ClusterConfig(router="weighted").uses_index
    assert not ClusterConfig(router="weighted", router_params={"profile": "approximate"}).uses_index
    assert ClusterConfig(router="kv-cost").uses_index and ClusterConfig(router="precise-prefix").uses_index
    assert not ClusterConfig(router="approx-prefix").uses_index
    assert make_router("weighted", 2, weights={"load": 1.0}).uses_index is False  # no prefix score, no index


def test_scrape_pauses_do_not_change_what_the_engines_do():
    """Running every engine to each scrape time only splits its steps' bookkeeping: a router that
    ignores the view (round-robin) gives the same replay, scraped or exact, to float rounding."""
    base = SimConfig(workload="conversation", max_requests=400, load=0.9, tiers=(TierLevel("dram", capacity_bytes=8 * GiB),))
    exact = simulate(base.with_(cluster=ClusterConfig(instances=3, router="round-robin")))
    scraped = simulate(base.with_(cluster=ClusterConfig(instances=3, router="round-robin", metrics_interval_s=0.05)))
    assert scraped.requests_per_instance == exact.requests_per_instance
    assert scraped.tier_block_hits == exact.tier_block_hits and scraped.steps >= exact.steps
    for name in ("ttft_p50", "ttft_p95", "tpot_mean", "gpu_hit_token_share"):
        assert getattr(scraped, name) == pytest.approx(getattr(exact, name), rel=1e-9), name
