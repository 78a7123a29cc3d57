"""The simulator on the physical clock: decode reads its KV, prefill attention grows with the
context, the KV pool comes from memory, tensor parallelism is billed, and a decode stretch in
closed form schedules exactly what single steps do."""

from __future__ import annotations

import pytest

from kvmm.sim import SimConfig, simulate
from kvmm.sim.engine.instance import Instance
from kvmm.sim.latency import Roofline, kv_pool_bytes
from tests.sim.sim_helpers import trace


def isolated(prompt: int, output: int = 129, **kw) -> SimConfig:
    """One request alone (no cache, no lower tier) on the default clock."""
    blocks = list(range(-(-prompt // 512)))
    return SimConfig(workload=trace([(0, prompt, output, blocks)]), load=None, tiers=(), gpu_prefix_cache=False, **kw)


def test_an_isolated_request_takes_exactly_the_roofline_steps():
    """TTFT = the prefill chunks' step times (8192-token budget on an H200); TPOT = the mean of
    the decode steps at contexts 4096, 4097, ... (closed-form stretch)."""
    res = simulate(isolated(12_000, 65, hardware="H200"))
    model = Roofline("llama-3.1-8b", "H200")
    ttft = model.step_seconds([8192], [0], []) + model.step_seconds([12_000 - 8192], [8192], [])
    decode = sum(model.step_seconds([], [], [12_000 + j]) for j in range(64))
    assert res.ttft_p50 == pytest.approx(ttft, rel=1e-12)
    assert res.tpot_p50 == pytest.approx(decode / 64, rel=1e-12)
    assert res.steps == 2 + 64


def test_decode_slows_with_context_and_prefill_grows_faster_than_the_prompt():
    short, long = simulate(isolated(1024)), simulate(isolated(32_768))
    assert long.tpot_p50 > 1.2 * short.tpot_p50  # the KV it reads: ~4 GB more per step at 32K
    assert long.ttft_p50 > 32 * short.ttft_p50  # attention over the context: more than linear
    old = dict(model="llama3-8b", latency="constant")
    assert simulate(isolated(32_768, **old)).tpot_p50 == pytest.approx(simulate(isolated(1024, **old)).tpot_p50, rel=1e-12)


def test_the_pool_comes_from_memory_unless_given():
    res = simulate(isolated(1024, hardware="H100"))
    want = kv_pool_bytes("llama-3.1-8b", "H100")
    assert res.serving["gpu_kv_bytes"] == want and res.serving["gpu_kv_from_memory"]
    assert res.gpu_pool_blocks == want // (512 * 131072)
    given = simulate(isolated(1024, hardware="H100", gpu_kv_bytes=8 << 30))
    assert given.gpu_pool_blocks == (8 << 30) // (512 * 131072) and not given.serving["gpu_kv_from_memory"]


def test_tensor_parallel_instances_bill_every_gpu():
    one = simulate(isolated(1024, model="llama-3.1-70b", hardware="H100", tp=4))
    assert one.serving["tp"] == 4 and one.cost.gpus == 4
    assert one.gpu_hours == pytest.approx(4 * one.duration_s / 3600)
    # the staging tier is the instance's host memory: one per instance, not per GPU
    assert one.cost.tier_counts == (1,)


@pytest.mark.parametrize("config", [
    SimConfig(max_requests=800),
    SimConfig(max_requests=800, policy="on-demand", gpu_kv_bytes=16 << 30),
    SimConfig(max_requests=500, model="qwen3-30b-a3b", hardware="H100", tp=2, policy="immediate", load=0.9),
], ids=["default", "on-demand-small-pool", "moe-tp2"])
def test_closed_form_stretches_schedule_what_single_steps_do(config, monkeypatch):
    jumped = simulate(config).as_dict()
    monkeypatch.setattr(Instance, "jump_decode_stretches", False)
    stepped = simulate(config).as_dict()
    assert stepped["steps"] == jumped["steps"] and stepped["requests_per_instance"] == jumped["requests_per_instance"]
    for name, value in jumped.items():
        if isinstance(value, float):
            assert stepped[name] == pytest.approx(value, rel=1e-9, nan_ok=True), name
        elif name not in ("gpu_lookup_hits", "gpu_lookup_queries", "cost", "tier_gib_hours", "busy_seconds"):
            # the pool's lookup counters count the per-step "is the hit on the GPU yet" checks
            assert stepped[name] == value, name
