"""The planner's analytic stage (issue 21: 3 tier kinds x 32 capacity points = 32,768
combinations on the whole conversation trace in <= 2 s on one core) beside the brute-force
baseline: simulating a sample of the same combinations with the composed simulator, one
combination per run (the time per combination, extrapolated to the whole grid, is printed).

Both are timed in combinations per second; the ratio is how many times faster stage 1 prices a
combination than one simulation of it.  Stage 1 includes the stack-distance pass, the
per-request run statistics and the grid kernel (everything ``analytic_grid`` does after the
trace is parsed once per process).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import size
from kvmm.plan import SLO
from kvmm.plan._planner import _checked, analytic_grid
from kvmm.sim import SimConfig, simulate

REQUESTS = size(None, 60)  # None: the whole conversation trace
POINTS = size(32, 4)
TIERS = [f"dram:0-4TiB:points={POINTS}", f"nvme:0-16TiB:points={POINTS}", f"dfs:0-64TiB:points={POINTS}"]
SAMPLE = size(2, 1)  # simulated combinations (the baseline)
BASE = SimConfig(workload="conversation", max_requests=REQUESTS)


def _setup():
    _, cands, prices, base = _checked("conversation", SLO(2.0), TIERS, None, 1, None, 1, 0, BASE, None)
    return cands, prices, base


@pytest.mark.benchmark(group="plan-stage1")
def test_stage1_analytic_grid(benchmark):
    cands, prices, base = _setup()
    grid = analytic_grid(base, cands, prices, 1)  # warm: compiles (or loads) the kernels, parses the trace
    combos = POINTS**3
    benchmark.extra_info.update(role="kvmm", label="kvmm.plan stage 1 (all combinations)", items=combos,
                                unit="combinations")
    grid = benchmark.pedantic(lambda: analytic_grid(base, cands, prices, 1), rounds=size(5, 1), iterations=1)
    assert grid["points"] == combos
    assert np.all(np.isfinite(grid["usd_h"])) and np.all(grid["hit"].sum(1) <= 1.0 + 1e-9)


@pytest.mark.benchmark(group="plan-stage1")
def test_stage1_brute_force_simulation(benchmark):
    cands, prices, base = _setup()
    grid = analytic_grid(base, cands, prices, 1)
    rng = np.random.default_rng(0)
    sample = rng.choice(grid["points"], size=SAMPLE, replace=False)
    from kvmm.plan._planner import _point

    configs = [_point(grid, int(j), SLO(2.0), base, cands, prices, 1).config() for j in sample]
    simulate(configs[0].with_(max_requests=20))  # warm the simulator's kernels
    benchmark.extra_info.update(role="baseline", label=f"kvmm.sim on {SAMPLE} sampled combinations", items=SAMPLE,
                                unit="combinations")
    results = benchmark.pedantic(lambda: [simulate(c) for c in configs], rounds=1, iterations=1)
    per_combo = benchmark.stats.stats.median / SAMPLE if benchmark.stats else float("nan")
    benchmark.extra_info["extrapolated_grid_s"] = per_combo * grid["points"]
    print(f"\nbrute force: {per_combo:.2f} s per simulated combination -> {per_combo * grid['points']:,.0f} s "
          f"for all {grid['points']:,} combinations")
    assert all(r.requests == (REQUESTS or 12_031) for r in results)
