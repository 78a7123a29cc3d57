"""The SLA-bound throughput model of the vtoken reproduction, on hand-computable configurations."""

import math

import numpy as np
import pytest

from kvmm.errors import BadInputError, DTypeError
from kvmm.reproduce.vtoken import DecodeCostModel, sla_comparison, sla_throughput


def test_sla_throughput_takes_the_smaller_of_the_memory_and_sla_batches():
    # fixed 4 ms, 0.5 ms per request, SLA 10 ms: (10 - 4) / 0.5 = 12 requests
    r = sla_throughput(0.004, 0.0005, 100, 0.010)
    assert (r["batch"], r["bound"]) == (12, "SLA")
    assert r["step_s"] == pytest.approx(0.010) and r["tokens_per_s"] == pytest.approx(1200.0)
    r = sla_throughput(0.004, 0.0005, 10, 0.010)
    assert (r["batch"], r["bound"]) == (10, "memory")
    assert r["step_s"] == pytest.approx(0.009) and r["tokens_per_s"] == pytest.approx(10 / 0.009)
    assert sla_throughput(0.004, 0.0005, 12, 0.010)["bound"] == "memory"  # a tie counts as memory bound
    r = sla_throughput(0.004, 0.0005, 100, 0.003)  # the SLA is below the fixed cost: nothing fits
    assert r["batch"] == 0 and r["tokens_per_s"] == 0.0
    assert sla_throughput(0.004, 0.0005, 0, 0.010)["batch"] == 0


@pytest.mark.parametrize("args", [(0.004, 0.0, 10, 0.01), (-1.0, 0.001, 10, 0.01), (0.004, 0.001, 10, 0.0),
                                  (0.004, 0.001, -1, 0.01)])
def test_sla_throughput_rejects_bad_input(args):
    with pytest.raises(BadInputError, match="expected per_request_s > 0"):
        sla_throughput(*args)


def tiny_model():
    # hbm preset: 4.8 TB/s, 2 us latency. Weights 4.8 GB -> 1 ms (+2 us); 4800 B/token -> 1 ns per token read
    return DecodeCostModel(weight_bytes=4.8e9, kv_bytes_per_token=4800, launch_s=1e-3, per_seq_s=1e-5)


def test_decode_cost_model_by_hand():
    m = tiny_model()
    assert m.fixed_s == pytest.approx(1e-3 + 2e-6 + 1e-3)
    assert m.per_request_s(1000) == pytest.approx(1e-5 + 1e-6)
    assert m.per_request_s(1000, repack_s=5e-7) == pytest.approx(1.15e-5)
    # 1000 moved tokens = 4.8 MB: read 2 us + 1 us, write 2 us + 1 us; a commit with no move costs nothing
    assert m.copy_seconds([0, 1000]) == pytest.approx(6e-6)
    assert m.blocks_in(1e6, 16) == 13  # 1e6 // (16 * 4800)
    default = DecodeCostModel()
    assert default.kv_bytes_per_token == 128 * 1024 and default.fixed_s == pytest.approx(1e-3 + 2e-6 + 16e9 / 4.8e12)


@pytest.mark.parametrize("kwargs, error", [
    (dict(kv_bytes_per_token=0), BadInputError), (dict(kv_bytes_per_token=1.5), BadInputError),
    (dict(per_seq_s=-1.0), BadInputError), (dict(launch_s=math.nan), BadInputError),
    (dict(weight_bytes="x"), DTypeError), (dict(tier="tape"), BadInputError)])
def test_decode_cost_model_validates(kwargs, error):
    with pytest.raises(error):
        DecodeCostModel(**kwargs)


def hand_stats():
    """Two requests, 10 table steps (20 request-steps each); vToken repacked twice (1000 and 0 moves)."""
    return {
        "requests": 2, "table_steps": 10, "call_overhead_s": 1e-4, "live_steps": 20 * 400,
        "naive": {"steps": 20, "peak_total": 20, "read_steps": 20 * 2000},  # 10 blocks/request, 2000 slots read
        "vtoken": {"steps": 20, "peak_total": 8, "read_steps": 20 * 500,  # 4 blocks/request, 500 slots read
                   "plan_s": 1.5e-4, "commit_s": 0.7e-4, "commit_moves": [1000, 0]},
    }


def test_sla_comparison_by_hand_memory_bound():
    m = tiny_model()
    fixed = 2.002e-3
    # 40 blocks of 16 tokens x 4800 B: naive fits 40 // 10 = 4 requests, vToken 40 // 4 = 10
    c = sla_comparison(hand_stats(), 16, m, 40 * 16 * 4800, sla_s=2.5e-3)
    # vToken: 2 repacks x 0.1 ms fixed over 10 steps = 20 us per step; CPU (0.22 - 0.2) ms / 20 = 1 us and
    # copies 6 us / 20 = 0.3 us per request-step
    assert c["repack_fixed_s"] == pytest.approx(2e-5)
    assert c["repack_cpu_s"] == pytest.approx(1e-6) and c["repack_copy_s"] == pytest.approx(3e-7)
    naive_req = 1e-5 + 2000e-9
    vt_req = 1e-5 + 500e-9 + 1e-6 + 3e-7
    assert (c["naive"]["batch"], c["naive"]["bound"]) == (4, "memory")
    assert (c["vtoken"]["batch"], c["vtoken"]["bound"]) == (10, "memory")
    assert c["naive"]["step_s"] == pytest.approx(fixed + 4 * naive_req)
    assert c["vtoken"]["step_s"] == pytest.approx(fixed + 2e-5 + 10 * vt_req)
    naive_tps, vt_tps = 4 / (fixed + 4 * naive_req), 10 / (fixed + 2e-5 + 10 * vt_req)
    assert c["ratio_reads_dead"] == pytest.approx(vt_tps / naive_tps)
    assert c["ratio_reads_dead"] == pytest.approx(2.3949, abs=1e-4)
    masked_tps = 4 / (fixed + 4 * (1e-5 + 400e-9))  # naive with a kernel that reads only live tokens
    assert c["ratio"] == pytest.approx(vt_tps / masked_tps)  # the main baseline: kernel skips dead slots


def test_sla_comparison_by_hand_sla_bound():
    m = tiny_model()
    fixed = 2.002e-3
    naive_req, vt_req = 1.2e-5, 1.18e-5
    sla = fixed + 12 * naive_req  # naive: exactly 12 requests; vToken: (sla - fixed - 20 us) / vt_req = 10.5
    c = sla_comparison(hand_stats(), 16, m, 400 * 16 * 4800, sla_s=sla)
    assert (c["naive"]["batch"], c["naive"]["bound"]) == (12, "SLA")
    assert (c["vtoken"]["batch"], c["vtoken"]["bound"]) == (10, "SLA")
    # at this tiny scale vToken's fixed repack cost outweighs its cheaper reads: the ratio is below 1
    assert c["ratio_reads_dead"] == pytest.approx((10 / (fixed + 2e-5 + 10 * vt_req)) / (12 / sla))
    assert c["ratio_reads_dead"] < 1


def test_sla_ratios_one_value_per_timing_repetition():
    from kvmm.reproduce.vtoken import sla_ratios

    st = hand_stats()
    # five timings of the same repacks: the third one twice as slow
    st["vtoken"] = dict(st["vtoken"], plan_s=np.array([1.5e-4] * 5), commit_s=np.array([0.7e-4, 0.7e-4, 2.9e-4, 0.7e-4, 0.7e-4]))
    st["call_overhead_s"] = np.full(5, 1e-4)
    m = tiny_model()
    r = sla_ratios(st, 16, m, 40 * 16 * 4800, sla_s=2.5e-3)
    assert r["ratio"].shape == (5,) and r["ratio_reads_dead"].shape == (5,)
    single = sla_comparison(hand_stats(), 16, m, 40 * 16 * 4800, sla_s=2.5e-3)
    for i in (0, 1, 3, 4):  # the same timings as hand_stats: the same ratios
        assert r["ratio"][i] == pytest.approx(single["ratio"])
        assert r["ratio_reads_dead"][i] == pytest.approx(single["ratio_reads_dead"])
    assert r["ratio"][2] < r["ratio"][0]  # a slower repack costs vToken throughput
    assert r["runs"][2]["repack_cpu_s"] == pytest.approx((1.5e-4 + 2.9e-4 - 2e-4) / 20)
