"""The ``plan`` report section (kvmm/reproduce/plan.py) runs in quick mode and writes its tables:
the frontier at two SLOs and the equal-cost comparison of per-node DRAM, a shared Layer 3.5
pool and DFS offload.  Checks structure, finiteness and the equal-cost arithmetic; the
measured values are not asserted (the section measures them)."""

from __future__ import annotations

import math
import re

import pytest

from kvmm.reproduce import SECTIONS
from kvmm.reproduce import plan as section
from kvmm.tiers.spec import PRESETS
from tests.reproduce.report_helpers import markdown_table, run_quick_section

GiB = 2**30


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "plan")


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:,\d{3})*(?:\.\d+)?|nan|inf", cell.replace(",", ""))]


def test_section_is_registered():
    assert ("plan", "kvmm.reproduce.plan") in SECTIONS


def test_the_frontier_at_two_slos(quick_report):
    md, _ = quick_report
    for slo in section._slos(True):
        headers, rows = markdown_table(md, f"Frontier at p95 TTFT <= {slo:g} s")
        assert headers[:6] == ["#", "capacities", "hit ratio per tier (dram / layer3.5 / nvme)", "est p95 TTFT s",
                               "sim p95 TTFT s", "USD / h"]
        assert rows and [r[0] for r in rows] == [str(i + 1) for i in range(len(rows))]
        costs = [float(r[5].replace(",", "")) for r in rows]
        assert costs == sorted(costs)  # cheapest first
        est = [float(r[3]) for r in rows]
        assert all(a >= b for a, b in zip(est, est[1:]))  # a Pareto frontier: each dearer point is faster (3 decimals shown)
        assert sum(r[-1] in ("chosen", "closest") for r in rows) <= 1
        assert any(r[4] for r in rows)  # some points were simulated
    assert md.count("![plan-frontier]") == 1


def test_the_equal_cost_question(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "The first article's question, at equal cost")
    assert headers[:4] == ["KV tier budget", "routing", "design", "capacity it buys"]
    expected = [("none", r, "no KV tier") for r in section.ROUTINGS] + [
        (f"${b:g}/h", r, d[0]) for b in section.QUICK_BUDGETS for r in section.ROUTINGS for d in section.DESIGNS]
    assert [tuple(r[:3]) for r in rows] == expected
    for r in rows:
        for cell in r[4:]:
            assert all(math.isfinite(v) for v in _numbers(cell)) and _numbers(cell), r
        if r[2] == "no KV tier":
            assert r[3] == "" and _numbers(r[4]) == [0.0, 0.0]  # no lower tier, no lower-tier hit
    caps = {r[2]: r[3] for r in rows if r[0] != "none" and r[1] == "round-robin"}
    assert caps["per-node DRAM"].endswith(" per node") and caps["DFS offload"].endswith(" shared")
    for routing in section.ROUTINGS:
        assert f"at $0.5/h with {routing} routing, " in md


def test_equal_cost_capacity_spends_the_same_budget():
    for kind, shared in (("dram", False), ("layer3.5", True), ("dfs", True)):
        price = PRESETS[kind].usd_per_gib_hour
        cap = section.equal_cost_capacity(2.0, price, 8, shared)
        spent = cap / GiB * price * (1 if shared else 8)
        assert spent == pytest.approx(2.0, rel=1e-9)
    # a private tier is bought for every instance: an 8th of the capacity each
    assert section.equal_cost_capacity(2.0, 0.004, 8, False) == section.equal_cost_capacity(2.0, 0.004, 1, True) // 8


def test_the_answers_line_names_each_slos_choice(quick_report):
    md, _ = quick_report
    line = next(ln for ln in md.splitlines() if ln.startswith("The planner's answers: "))
    for slo in section._slos(True):
        assert f"at {slo:g} s, " in line
