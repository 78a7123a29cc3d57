"""Bad input to the planner is a BadInputError with one clear line; the dataclasses validate."""

from __future__ import annotations

import pytest

from kvmm.errors import BadInputError
from kvmm.plan import SLO, Plan, PlanPoint, TierCandidate, plan
from tests.paths import ROOT

GIB, TIB = 2**30, 2**40


def _one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text
    for w in words:
        assert w in text, text


def test_parse_forms():
    assert TierCandidate.parse("dram:0-4TiB") == TierCandidate("dram", 0, 4 * TIB)
    t = TierCandidate.parse("layer3.5:0-64TiB:shared")
    assert t.shared and t.max_bytes == 64 * TIB and t.points == 32
    t = TierCandidate.parse("nvme:512GiB-16TiB:points=8")
    assert (t.min_bytes, t.max_bytes, t.points) == (512 * GIB, 16 * TIB, 8)
    assert TierCandidate.parse("dfs:2TiB").capacities() == (2 * TIB,)
    caps = TierCandidate("dram", 0, 4 * TIB, points=5).capacities()
    assert caps == (0, 4 * TIB // 64, 4 * TIB // 16, TIB, 4 * TIB)  # log-spaced (tests/plan/test_plan_grid.py)


@pytest.mark.parametrize("text,words", [
    ("dram:4TiB-1TiB", ["empty capacity range"]),
    ("dram:0-0TiB", ["empty capacity range"]),
    ("dram:-4TiB", ["bad range"]),
    ("ram:0-4TiB", ["not a tier preset"]),
    ("dram:0-4XiB", ["bad size"]),
    ("dram:0-4TiB:points=x", ["points"]),
    ("dram:0-4TiB:points=1", ["points >= 2"]),
    ("dram:0-4TiB:fast", ["unknown option 'fast'"]),
    ("dram:0-4TiB:eviction=mru", ["eviction"]),
    ("dram", ["expected KIND:MIN-MAX"]),
])
def test_parse_errors_name_the_problem(text, words):
    with pytest.raises(BadInputError) as e:
        TierCandidate.parse(text)
    _one_line(e, text, *words)


@pytest.mark.parametrize("ttft", [0, -1.0, float("nan"), float("inf"), "2s", True])
def test_slo_must_be_positive(ttft):
    with pytest.raises(BadInputError) as e:
        SLO(ttft)
    _one_line(e, "ttft_p95_s")
    with pytest.raises(BadInputError):
        SLO(1.0, tpot_p95_s=0.0)


def test_slo_met_by():
    assert SLO(2.0).met_by(2.0) and not SLO(2.0).met_by(2.01) and not SLO(2.0).met_by(float("nan"))
    assert SLO(2.0, 0.1).met_by(1.0, 0.1) and not SLO(2.0, 0.1).met_by(1.0, None)


@pytest.mark.parametrize("kwargs,words", [
    (dict(tiers=["hbm:0-100GiB"]), ["no price for tier 'hbm'"]),
    (dict(tiers=[]), ["no tier candidates"]),
    (dict(tiers=["dram:4TiB-1TiB"]), ["empty capacity range"]),
    (dict(tiers=["dram:0-1TiB", "dram:0-2TiB"]), ["distinct"]),
    (dict(slo=0.0), ["ttft_p95_s"]),
    (dict(slo="fast"), ["slo must be an SLO"]),
    (dict(instances=0), ["instances"]),
    (dict(budget=-1.0), ["budget"]),
    (dict(budget=1e-6), ["budget of"]),
    (dict(verify=0), ["verify"]),
    (dict(prices="gpu=3/GiBh"), ["per hour"]),
    (dict(base="conversation"), ["base must be a SimConfig"]),
])
def test_plan_bad_input(kwargs, words):
    args = dict(slo=SLO(2.0), tiers=["dram:0-1TiB:points=2"])
    args.update(kwargs)
    with pytest.raises(BadInputError) as e:
        plan("synthetic", **args)
    _one_line(e, *words)


def test_price_override_makes_a_tier_priced():
    from kvmm.plan._planner import _checked

    _, cands, prices, _ = _checked("synthetic", SLO(1.0), ["hbm:0-100GiB:points=2"], "hbm=0.01/GiBh", 1, None, 1, 0, None, None)
    assert prices.tier_usd_per_gib_hour["hbm"] == 0.01


def _point(**kw) -> PlanPoint:
    args = dict(capacities=(0, TIB), hit_ratio=(0.0, 0.5), est_ttft_p95_s=1.0, est_tpot_p95_s=None, usd_per_hour=4.0,
                usd_per_m_tokens=0.1, tier_gib={"dram": 0.0, "nvme": 1024.0}, tier_usd_per_hour={"gpu": 3.5},
                meets_slo_est=True)
    args.update(kw)
    return PlanPoint(**args)


@pytest.mark.parametrize("kw,words", [
    (dict(capacities=(-1, 0)), ["capacities"]),
    (dict(hit_ratio=(0.6, 0.6)), ["hit ratios"]),
    (dict(hit_ratio=(0.5,)), ["hit ratios"]),
    (dict(est_ttft_p95_s=-1.0), ["est_ttft_p95_s"]),
    (dict(meets_slo_est=1), ["meets_slo_est"]),
])
def test_plan_point_validates(kw, words):
    with pytest.raises(BadInputError) as e:
        _point(**kw)
    _one_line(e, *words)


def test_hand_built_plan_and_errors():
    p = _point(sim_ttft_p95_s=0.8, meets_slo_sim=True)
    plan_ = Plan(SLO(2.0), p, None, None, [p], [p], 4, ["why"])
    assert plan_.errors() == [{"capacities": (0, TIB), "est_ttft_p95_s": 1.0, "sim_ttft_p95_s": 0.8,
                               "rel_error": pytest.approx(0.25)}]
    with pytest.raises(BadInputError):
        p.config()  # a hand-built point carries no candidates
    with pytest.raises(BadInputError):
        Plan(2.0, p, None, None, [], [], 0, [])


def test_import_kvmm_plan_compiles_nothing_and_names_load_lazily():
    import importlib
    import subprocess
    import sys

    code = ("import sys, kvmm, kvmm.plan\n"
            "from kvmm.plan import SLO, TierCandidate\n"
            "TierCandidate.parse('dram:0-4TiB'); SLO(1.0)\n"
            "print(sorted(m for m in ('numba', 'kvmm.plan._kernels', 'kvmm.plan._planner') if m in sys.modules))")
    root = ROOT
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    pkg = importlib.import_module("kvmm.plan")
    for name in pkg.__all__:
        assert getattr(pkg, name) is getattr(importlib.import_module(pkg._LAZY[name]), name)
    import kvmm

    assert kvmm.plan is pkg
