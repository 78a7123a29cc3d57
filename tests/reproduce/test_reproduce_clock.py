"""What the report sections share about the clock (kvmm/reproduce/_clock.py) and the vtoken
section's roofline decode cost (kvmm/reproduce/_vtoken_cost.py RooflineDecodeCost)."""

from __future__ import annotations

import math

import pytest

from kvmm.errors import BadInputError
from kvmm.reproduce._clock import clock_text, moved_row, old_clock, old_clock_text
from kvmm.reproduce._vtoken_cost import RooflineDecodeCost, sla_throughput
from kvmm.sim.config import SimConfig
from kvmm.sim.latency import Roofline
from kvmm.sim.serving import resolve_serving

GiB = 1 << 30


def test_old_clock_is_the_constant_rate_clock_with_its_pool():
    new = SimConfig(workload="conversation", model="llama-3.1-8b", max_num_seqs=7)
    s = resolve_serving(old_clock(new))
    assert s.latency_name == "constant" and not s.chunked_prefill and s.gpu_kv_bytes == 96 * GiB
    assert s.max_num_seqs == 7  # a limit the section set itself is kept
    assert resolve_serving(old_clock(new.with_(gpu_kv_bytes=128 * GiB), keep_pool=True)).gpu_kv_bytes == 128 * GiB
    assert resolve_serving(new).latency_name == "roofline"


def test_clock_text_states_the_physical_assumptions():
    text = clock_text(SimConfig(workload="conversation"))
    for fact in ("Roofline step times of llama-3.1-8b on 1 x H200", "MFU 0.45 prefill / 0.3 decode", "4.8 TB/s HBM",
                 "quadratic in the context", "chunked prefill, 8,192 tokens and 1,024 sequences",
                 "GPU KV pool from memory", "106.3 GiB"):
        assert fact in text, fact
    assert "20,000 tokens/s" in old_clock_text() and "a 96 GiB pool" in old_clock_text()
    assert "at most 7 sequences, a 128 GiB pool" in old_clock_text("qwen2.5-32b", pool_gib=128, max_seqs=7)


def test_moved_row():
    assert moved_row("s", "m", 2.0, 3.0) == ("s", "m", "2.000", "3.000", "+50 %")
    row = moved_row("s", "m", [0.5, 0.7], [0.4, 0.4], ".0f", scale=100, difference="pp")
    assert row[2] == "60 ± 14" and row[3] == "40 ± 0" and row[4] == "-20 pp"
    assert moved_row("s", "m", math.nan, 1.0)[2:] == ("-", "1.000", "-")


def test_roofline_decode_cost_is_the_roofline_plus_repacking():
    m = RooflineDecodeCost()
    r = Roofline("llama-3.1-8b", "H200")
    assert m.kv_bytes_per_token == 131072
    assert m.step_seconds(32, 500) == pytest.approx(r.step_seconds([], [], [500] * 32), rel=1e-12)
    assert m.step_seconds(32, 500, 1e-3, 2e-6) == pytest.approx(r.step_seconds([], [], [500] * 32) + 1e-3 + 64e-6)
    assert m.step_seconds(0, 500) == 0.0
    # fewer slots read: a shorter step while memory-bound, the same once compute-bound
    assert m.step_seconds(8, 200) < m.step_seconds(8, 800)
    big = m.step_seconds(2000, 200), m.step_seconds(2000, 220)
    assert big[1] / big[0] - 1 < 0.01


@pytest.mark.parametrize("read, memory_batch, sla", [(256, 10_000, 0.02), (256, 100, 0.02), (4096, 10_000, 0.05),
                                                     (64, 3, 0.001), (64, 0, 0.02)])
def test_roofline_sla_batch_is_the_largest_that_fits(read, memory_batch, sla):
    m = RooflineDecodeCost()
    out = m.sla(read, 1e-4, 1e-6, memory_batch, sla)
    b = out["batch"]
    assert b <= memory_batch
    assert b == 0 or m.step_seconds(b, read, 1e-4, 1e-6) <= sla
    if b < memory_batch:  # one more request would break the SLA
        assert out["bound"] == "SLA" and m.step_seconds(b + 1, read, 1e-4, 1e-6) > sla
    else:
        assert out["bound"] == "memory"
    assert out["tokens_per_s"] == (b / out["step_s"] if b else 0.0)


def test_the_old_model_keeps_its_closed_form():
    from kvmm.reproduce._vtoken_cost import DecodeCostModel

    m = DecodeCostModel()
    assert m.sla(300, 1e-5, 2e-6, 500, 0.02) == sla_throughput(m.fixed_s + 1e-5, m.per_request_s(300, 2e-6), 500, 0.02)


def test_roofline_decode_cost_refuses_what_it_cannot_model():
    with pytest.raises(BadInputError):
        RooflineDecodeCost(model="qwen3-30b-a3b")  # MoE: the step is not linear in the batch
    with pytest.raises(BadInputError):
        RooflineDecodeCost(tier="tape")
    with pytest.raises(BadInputError):
        RooflineDecodeCost().sla(100, 0.0, 0.0, 10, 0.0)
