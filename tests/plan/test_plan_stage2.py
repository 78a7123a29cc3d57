"""Stage 2 and the plan's answer (issue 33, item 15): cheapest first and stop at the first pass,
no pruning of a point that loses on TTFT but may win on TPOT, "closest" as the cheapest of the
near-equal, reasons that never round a miss onto the SLO, one line for overloaded runs, and a
config.json whose trace path replays from any folder."""

from __future__ import annotations

import shutil
import warnings
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.plan import SLO, plan
from kvmm.plan._planner import _reasons
from kvmm.plan._verify import closest_point, frontier_indices, pick_for_verification, verify_cheapest_first
from kvmm.plan.writers import seconds_text
from kvmm.sim import SimConfig, simulate
from kvmm.testing.models import plan as naive
from tests.plan.plan_helpers import TiB, point


def _points(rows):
    """PlanPoints from (usd/h, est TTFT, est TPOT) rows."""
    out = []
    for usd, ttft, tpot in rows:
        p = point((0, 0), (0.0, 0.0), ttft, usd)
        p.est_tpot_p95_s = tpot
        out.append(p)
    return out


def _runner(sims, calls):
    """A stand-in simulator: each point's (TTFT, TPOT) from ``sims`` by its price; records each wave."""
    def run(points):
        calls.append([p.usd_per_hour for p in points])
        return [SimpleNamespace(ttft_p95=sims[p.usd_per_hour][0], tpot_p95=sims[p.usd_per_hour][1]) for p in points]
    return run


def test_cheapest_first_stops_at_the_first_point_that_meets_the_slo():
    pts = _points([(5.0, 1.0, 0.1), (1.0, 3.0, 0.1), (2.0, 2.5, 0.1), (3.0, 2.0, 0.1), (4.0, 1.5, 0.1)])
    sims = {1.0: (3.1, 0.1), 2.0: (2.6, 0.1), 3.0: (1.9, 0.1), 4.0: (1.4, 0.1), 5.0: (0.9, 0.1)}
    calls = []
    verified, skipped = verify_cheapest_first(pts, SLO(2.0), _runner(sims, calls), workers=1)
    assert [p.usd_per_hour for p in verified] == [1.0, 2.0, 3.0] and skipped == 2
    assert calls == [[1.0], [2.0], [3.0]]  # the dearer two never simulated
    assert [p.meets_slo_sim for p in verified] == [False, False, True]
    calls = []
    verified, _ = verify_cheapest_first(_points([(5.0, 1.0, 0.1), (1.0, 3.0, 0.1), (2.0, 2.5, 0.1), (3.0, 2.0, 0.1),
                                                 (4.0, 1.5, 0.1)]), SLO(2.0), _runner(sims, calls), workers=2)
    assert calls == [[1.0, 2.0], [3.0, 4.0]]  # waves of two; none after the wave with a pass
    assert [p.usd_per_hour for p in verified] == [1.0, 2.0, 3.0]  # 4.0 ran beside 3.0 and is dropped


def test_a_point_slower_on_ttft_but_faster_on_tpot_is_not_pruned_when_tpot_is_bounded():
    rows = [(1.0, 4.0, 0.30), (2.0, 4.5, 0.10), (3.0, 5.0, 0.30)]
    sims = {1.0: (4.0, 0.31), 2.0: (4.4, 0.11), 3.0: (4.9, 0.31)}
    calls = []
    verified, skipped = verify_cheapest_first(_points(rows), SLO(5.0, 0.2), _runner(sims, calls), workers=1)
    assert calls == [[1.0], [2.0]] and skipped == 1  # 2.0 loses on TTFT to 1.0 but may win on TPOT: simulated
    assert verified[-1].usd_per_hour == 2.0 and verified[-1].meets_slo_sim
    # TTFT alone: a point a cheaper miss beats on TTFT is skipped
    sims_ttft = {1.0: (4.1, 0.3), 2.0: (4.4, 0.1), 3.0: (3.9, 0.3)}
    calls = []
    verified, skipped = verify_cheapest_first(_points([(1.0, 4.0, 0.3), (2.0, 4.5, 0.1), (3.0, 3.5, 0.3)]), SLO(4.0),
                                              _runner(sims_ttft, calls), workers=1)
    assert calls == [[1.0], [3.0]] and skipped == 1


def test_with_a_tpot_bound_the_frontier_keeps_points_dominated_on_ttft_alone():
    cost = np.array([1.0, 2.0, 3.0, 4.0])
    ttft = np.array([5.0, 3.0, 4.0, 2.5])
    tpot = np.array([0.1, 0.3, 0.1, 0.1])
    assert frontier_indices(cost, ttft).tolist() == [0, 1, 3]
    front = frontier_indices(cost, ttft, tpot)
    assert front.tolist() == [0, 1, 2, 3]  # 2 is slower than 1 on TTFT, faster on TPOT
    meets = (ttft <= 4.5) & (tpot <= 0.2)  # 2 is the cheapest point meeting both
    assert pick_for_verification(cost, ttft, meets, front, 1, 0) == [2]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=30))
@settings(max_examples=100, deadline=None)
def test_the_three_way_frontier_is_the_naive_one(rows):
    cost, ttft, tpot = (np.array([float(r[i]) for r in rows]) for i in range(3))
    assert sorted(frontier_indices(cost, ttft, tpot).tolist()) == naive.pareto3(cost.tolist(), ttft.tolist(),
                                                                               tpot.tolist())


def test_closest_is_the_cheapest_among_the_near_equal():
    slo = SLO(1.0)
    dear = point((2 * TiB, 32 * TiB), (0.4, 0.2), 1.2, 13.0, sim=2.045)  # 0.2 % faster, 26 % dearer
    cheap = point((2 * TiB, 0), (0.4, 0.0), 1.8, 10.3, sim=2.049)
    slow = point((0, 0), (0.0, 0.0), 5.0, 8.0, sim=3.0)
    assert closest_point([slow, cheap, dear], slo) is cheap
    assert closest_point([slow, dear], slo) is dear
    assert closest_point([], slo) is None


def test_reasons_never_round_a_miss_onto_the_slo():
    slo = SLO(7.0)
    miss = point((2 * TiB, 0), (0.4, 0.0), 6.9, 10.0, sim=7.005, slo=7.0)
    text = " ".join(_reasons(slo, None, miss, [miss], [miss], 1, 1))
    assert "7.005 s" in text and "TTFT p95 7 s" not in text
    assert seconds_text(7.005, 7.0) == "7.005" and seconds_text(6.9996, 7.0) == "6.9996"  # nor a pass onto it
    assert seconds_text(7.0, 7.0) == "7" and seconds_text(11.952, 12.0) == "11.95"
    assert seconds_text(7.0000004, 7.0) == "7.0000004" and seconds_text(12.34, 7.0) == "12.3"


def test_waves_are_as_wide_as_the_executor():
    from kvmm.cli.plan import InlineExecutor
    from kvmm.plan._verify import workers_of

    with ThreadPoolExecutor(max_workers=3) as pool:
        assert workers_of(pool) == 3
    assert workers_of(InlineExecutor()) == 1 and workers_of(None) == 1
    assert workers_of(SimpleNamespace(nthreads=lambda: {"a": 2, "b": 4})) == 6  # a Dask client


def _base(**kw) -> SimConfig:
    return SimConfig(workload="conversation", max_requests=kw.pop("requests", 400), **kw)


def test_an_overloaded_plan_says_so_in_one_line():
    with warnings.catch_warnings(), ThreadPoolExecutor(max_workers=1) as pool:
        warnings.simplefilter("ignore")
        hot = plan("conversation", slo=SLO(1000.0), tiers=["nvme:0-1TiB:points=2"], base=_base(requests=600, load=3.0),
                   executor=pool)
        calm = plan("conversation", slo=SLO(1000.0), tiers=["nvme:0-1TiB:points=2"], base=_base(load=0.8),
                    executor=pool)
    lines = [r for r in hot.reasons if r.startswith("Overloaded")]
    assert len(lines) == 1 and "waiting requests" in lines[0] and "\n" not in lines[0]
    assert hot.verified[0].sim.max_waiting > 60
    assert not any(r.startswith("Overloaded") for r in calm.reasons)


def test_a_loose_slo_simulates_only_the_cheapest_point():
    with ThreadPoolExecutor(max_workers=1) as pool:
        p = plan("conversation", slo=SLO(1000.0), tiers=["dram:0-512GiB:points=4", "nvme:0-4TiB:points=4"],
                 base=_base(load=0.8), verify=4, neighbours=2, executor=pool)
    assert len(p.verified) == 1 and p.chosen is p.verified[0] and p.chosen is p.frontier[0]


def test_config_json_replays_a_relative_trace_path_from_any_folder(tmp_path, monkeypatch):
    from kvmm.cli import main
    from kvmm.sim.config_json import load_config
    from kvmm.traces.mooncake import bundled_trace_path

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(bundled_trace_path("conversation"), work / "trace.jsonl")
    monkeypatch.chdir(work)
    assert main(["plan", "--trace", "trace.jsonl", "--requests", "60", "--ttft-p95", "100s", "--tier",
                 "nvme:0-1TiB:points=2", "--verify", "1", "--jobs", "1", "--no-progress", "--out", "plan"]) == 0
    monkeypatch.chdir(tmp_path)  # elsewhere: the relative path would not be found
    config = load_config(work / "plan" / "config.json")
    assert config.workload == str((work / "trace.jsonl").resolve())
    assert simulate(config).requests == 60


def test_the_summary_never_rounds_a_miss_onto_the_slo():
    from kvmm.plan import Plan
    from kvmm.plan.writers import plan_summary

    miss = point((2 * TiB, 0), (0.4, 0.0), 6.9, 10.0, sim=7.0004, slo=7.0)
    p = Plan(slo=SLO(7.0), chosen=None, closest=miss, config=None, frontier=[miss], verified=[miss], points_evaluated=1,
             reasons=[])
    lines = plan_summary(p)
    assert lines[0] == "no configuration meets the SLO (p95 TTFT <= 7 s)"
    assert "p95 TTFT 7.0004 s simulated" in lines[1]
    hit = point((2 * TiB, 0), (0.4, 0.0), 6.9, 10.0, sim=6.9996, slo=7.0)
    p = Plan(slo=SLO(7.0), chosen=hit, closest=None, config=None, frontier=[hit], verified=[hit], points_evaluated=1,
             reasons=[])
    assert "p95 TTFT 6.9996 s simulated" in plan_summary(p)[0]
