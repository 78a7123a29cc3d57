"""The planner's numba kernels against the plain-Python reference (kvmm/testing/models/plan.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.plan import SLO
from kvmm.plan._kernels import cummax_by_group
from kvmm.plan._planner import _checked, analytic_grid, pareto
from kvmm.sim import GiB, SimConfig
from kvmm.sim.models import model as resolve_model
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace
from kvmm.testing.models import plan as naive


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_cummax_by_group(pairs):
    groups = sorted(g for g, _ in pairs)
    b = [x for _, x in pairs]
    got = cummax_by_group(np.array(b, dtype=np.int64), np.array(groups, dtype=np.int64))
    assert got.tolist() == naive.cummax_by_group(b, groups)


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
@settings(max_examples=80, deadline=None)
def test_pareto(points):
    cost = np.array([float(c) for c, _ in points])
    lat = np.array([float(t) for _, t in points])
    assert pareto(cost, lat).tolist() == naive.pareto(cost.tolist(), lat.tolist())


#: the serving setups stage 1 is checked on: the old clock (a ModelSpec: constant rates, whole
#: prefills), the default roofline with chunked prefill, with a long-prefill threshold and a
#: small budget, without chunking, and with tensor parallelism on another GPU
SERVING = {
    "constant": dict(model=resolve_model("llama3-8b")),
    "roofline": dict(),
    "roofline-threshold": dict(max_num_batched_tokens=2048, max_num_seqs=8, long_prefill_token_threshold=700),
    "roofline-whole": dict(chunked_prefill=False, max_num_batched_tokens=16384),
    "roofline-tp2": dict(model="qwen2.5-32b", hardware="H100", tp=2),
}


#: (instances, GPU prefix cache, load): the constant and default clocks run every one; the other
#: setups one each (the reference times every decode step in Python: seconds per case)
SHAPES = [(1, True, 0.6), (1, False, 0.3), (2, True, 0.5)]
CASES = [(shape, serving) for serving in ("constant", "roofline") for shape in SHAPES] + [
    (SHAPES[2], "roofline-threshold"), (SHAPES[0], "roofline-whole"), (SHAPES[1], "roofline-tp2")]


@pytest.mark.parametrize("shape,serving", CASES, ids=[f"{s}-{i}-{c}-{lo}" for (i, c, lo), s in CASES])
def test_stage1_matches_the_reference(shape, serving):
    instances, gpu_prefix_cache, load = shape
    base = SimConfig(workload="conversation", max_requests=60, load=load, gpu_kv_bytes=4 * GiB,
                     gpu_prefix_cache=gpu_prefix_cache, **SERVING[serving])
    tiers = ["dram:0-12GiB:points=3", "nvme:2GiB-40GiB:points=3", "dfs:0-200GiB:points=2"]
    _, cands, prices, base = _checked("conversation", SLO(1.0), tiers, None, instances, None, 1, 0, base, None)
    grid = analytic_grid(base, cands, prices, instances)
    ref = naive.stage1(resolve_trace(base.workload, base.max_requests), base, cands, instances, prices)
    assert grid["points"] == len(ref["rows"]) == 18
    assert grid["grid_model"].total_refs == ref["refs"]
    for j, row in enumerate(ref["rows"]):
        caps = tuple(int(grid["caps"][i][grid["index"][j, i]]) for i in range(len(cands)))
        assert caps == row["caps"]
        assert grid["hit"][j].tolist() == pytest.approx(row["hit"], abs=1e-12)
        assert grid["ttft"][j] == pytest.approx(row["ttft"], rel=1e-9)
        assert grid["usd_h"][j] == pytest.approx(row["usd_h"], rel=1e-12)
        assert grid["tpot"][j] == pytest.approx(row["tpot"], rel=1e-9)
    assert (grid["tpot"] > 0).all()  # the replay decodes: every point has a TPOT
    assert len({round(float(t), 9) for t in grid["ttft"]}) > 1  # the capacities do move the estimate


def test_shared_tier_given_first_is_read_after_the_private_ones():
    base = SimConfig(workload="conversation", max_requests=60, load=0.5, gpu_kv_bytes=4 * GiB)
    first = ["layer3.5:0-40GiB:shared:points=3", "dram:0-12GiB:points=3"]
    last = first[::-1]
    grids = []
    for tiers in (first, last):
        _, cands, prices, b = _checked("conversation", SLO(1.0), tiers, None, 1, None, 1, 0, base, None)
        grids.append(analytic_grid(b, cands, prices, 1))
    a, z = grids
    rows_a = {tuple(int(a["caps"][i][a["index"][j, i]]) for i in (1, 0)): (tuple(a["hit"][j][::-1]), a["ttft"][j])
              for j in range(a["points"])}
    rows_z = {tuple(int(z["caps"][i][z["index"][j, i]]) for i in (0, 1)): (tuple(z["hit"][j]), z["ttft"][j])
              for j in range(z["points"])}
    assert rows_a == rows_z
    # dram (private, read first) serves what both hold
    assert any(h[0] > 0 and h[1] == 0 for h, _ in rows_z.values())


def test_shards_sampling_approximates_the_exact_hit_shares(monkeypatch):
    from kvmm.plan import _analytic

    base = SimConfig(workload="conversation", max_requests=4000, gpu_prefix_cache=False)
    tiers = ["dram:0-1TiB:points=3", "nvme:0-4TiB:points=3"]
    _, cands, prices, base = _checked("conversation", SLO(1.0), tiers, None, 1, None, 1, 0, base, None)
    exact = analytic_grid(base, cands, prices, 1)
    assert exact["stream"].rate == 1.0
    monkeypatch.setattr(_analytic, "SHARDS_MIN_REFS", 1000)
    monkeypatch.setattr(_analytic, "SHARDS_RATE", 0.2)
    sampled = analytic_grid(base, cands, prices, 1)
    assert sampled["stream"].rate == 0.2
    assert sampled["stream"].ids.shape[0] < 0.3 * exact["stream"].ids.shape[0]
    assert np.abs(sampled["hit"] - exact["hit"]).max() < 0.03
    assert sampled["grid_model"].total_refs == pytest.approx(exact["grid_model"].total_refs, rel=0.1)
    finite = np.isfinite(exact["ttft"])
    assert np.allclose(sampled["ttft"][finite], exact["ttft"][finite], rtol=0.25)


def test_private_levels_see_their_instance_and_shared_levels_every_request():
    # two instances, no GPU prefix cache: a private level alone serves #{d_instance < C}, a shared
    # level alone #{d_global < C} (requests dealt round-robin, as the simulator deals them)
    base = SimConfig(workload="conversation", max_requests=80, load=0.5, gpu_prefix_cache=False)
    trace = resolve_trace("conversation", 80)
    block = 512 * resolve_serving(base).kv_bytes_per_token
    offsets = trace.block_offsets.tolist()
    req = [r for r in range(80) for _ in range(offsets[r], offsets[r + 1])]
    local, glob = naive.distances(trace.block_ids.tolist(), req, 2)
    for tier, dist in (("dram:0-3GiB:points=4", local), ("layer3.5:0-3GiB:shared:points=4", glob)):
        _, cands, prices, b = _checked("conversation", SLO(1.0), [tier], None, 2, None, 1, 0, base, None)
        grid = analytic_grid(b, cands, prices, 2)
        for j in range(grid["points"]):
            cap = int(grid["caps"][0][grid["index"][j, 0]]) // block
            assert grid["hit"][j, 0] == pytest.approx(sum(d < cap for d in dist) / len(dist), abs=1e-12)
        assert grid["hit"][:, 0].max() > 0
