"""The capacity grid (issue 33, item 14): log-spaced points per tier, refined around the cheapest
point estimated to meet the SLO, so a cheaper feasible point between grid points is found."""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.plan import SLO, TierCandidate, plan
from kvmm.plan._planner import refine_capacities
from kvmm.plan.core import MAX_POINTS
from kvmm.sim import GiB, SimConfig, TierLevel, simulate

TiB = 1024 * GiB


def test_the_default_grid_is_log_spaced_down_to_a_gib_of_a_64_tib_pool():
    caps = TierCandidate.parse("layer3.5:0-64TiB:shared").capacities()
    assert len(caps) == 32 and caps[0] == 0 and caps[-1] == 64 * TiB
    assert caps[1] == GiB  # 16 octaves below the top (a linear grid's smallest pool is 2.065 TiB)
    ratios = np.array(caps[2:]) / np.array(caps[1:-1])
    assert ratios == pytest.approx(2 ** (16 / 30), rel=1e-6)  # one factor a step


def test_a_range_above_zero_is_geometric_between_its_ends():
    caps = TierCandidate.parse("nvme:1TiB-16TiB:points=5").capacities()
    assert caps == (TiB, 2 * TiB, 4 * TiB, 8 * TiB, 16 * TiB)
    assert TierCandidate.parse("dram:0-1TiB:points=2").capacities() == (0, TiB)
    assert TierCandidate.parse("dram:0-1TiB:points=3").capacities() == (0, TiB // 4, TiB)  # steps of at most 4x


@given(st.integers(0, 2**50), st.integers(1, 2**50), st.integers(2, 64))
@settings(max_examples=200, deadline=None)
def test_capacities_are_ascending_distinct_and_keep_both_ends(lo, span, points):
    caps = TierCandidate("dram", lo, lo + span, points=points).capacities()
    assert caps[0] == lo and caps[-1] == lo + span and len(caps) <= points <= MAX_POINTS
    assert all(a < b for a, b in zip(caps, caps[1:]))
    assert all(isinstance(c, int) for c in caps)
    if lo > 0 and span > lo * 2**12 and points > 2:  # geometric: the middle point is near the geometric mean
        mid = TierCandidate("dram", lo, lo + span, points=3).capacities()[1]
        assert abs(mid - math.sqrt(lo * (lo + span))) <= 1e-6 * mid + 1  # to the byte


def test_refinement_adds_points_beside_the_target_only_where_a_cheaper_point_may_be():
    caps = [(0, 8 * GiB, 64 * GiB), (0, TiB, 4 * TiB)]
    grid = {"index": np.array([[0, 1], [2, 0]])}  # point 0: (0, 1 TiB); point 1: (64 GiB, 0)
    block = GiB
    finer = refine_capacities(caps, grid, 0, block, points=3)
    # tier 1 at 1 TiB: three points below it and three above it (tier 0 may be traded for it? it is at 0: no)
    assert finer[1] == (0, TiB // 4, TiB // 2, 3 * TiB // 4, TiB, 4 * TiB)
    # tier 0 at 0: nothing below; above it, since tier 1 holds a capacity it may trade for
    assert finer[0] == (0, 2 * GiB, 4 * GiB, 6 * GiB, 8 * GiB, 64 * GiB)
    finer = refine_capacities(caps, grid, 1, block, points=1)  # (64 GiB, 0)
    assert finer[0] == (0, 8 * GiB, 36 * GiB, 64 * GiB) and finer[1] == (0, TiB // 2, TiB, 4 * TiB)
    assert refine_capacities([(0, 2 * GiB)], {"index": np.array([[1]])}, 0, GiB, points=3) == [(0, 2 * GiB)]  # < 4 blocks


def test_a_cheaper_feasible_point_between_grid_points_is_found():
    # one nvme tier, 0-4 TiB in 3 points: a linear grid has 0, 2 and 4 TiB; this trace's reuse fits
    # in a few hundred GiB, so the SLO half-way between no tier and all of it is met far below 2 TiB
    base = SimConfig(workload="conversation", max_requests=400, load=0.8)
    tier = TierCandidate.parse("nvme:0-4TiB:points=3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = simulate(base.with_(tiers=())).ttft_p95
        full = simulate(base.with_(tiers=(TierLevel("nvme", capacity_bytes=4 * TiB),))).ttft_p95
        slo = (bare + full) / 2
        linear = [tier.min_bytes + (tier.max_bytes - tier.min_bytes) * i // 2 for i in range(3)]
        linear_ok = [c for c in linear if simulate(base.with_(tiers=(TierLevel("nvme", capacity_bytes=c),) if c else ())
                                                   ).ttft_p95 <= slo]
        with ThreadPoolExecutor(max_workers=1) as pool:
            p = plan("conversation", slo=SLO(slo), tiers=[tier], base=base, verify=2, executor=pool)
    assert bare > slo > full and linear_ok and min(linear_ok) == 2 * TiB  # the linear grid's answer: 2 TiB
    assert p.chosen is not None and p.chosen.meets_slo_sim
    chosen = p.chosen.capacities[0]
    assert 0 < chosen < min(c for c in tier.capacities() if c)  # between two points of the (log) grid too
    assert p.points_evaluated > len(tier.capacities())  # the refined grid
    assert simulate(p.config).ttft_p95 <= slo
    assert any("refined" in r for r in p.reasons)
