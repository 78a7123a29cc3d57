"""Serving simulator: hand-derived timings, policy orderings, conservation, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.sim.simulator import GiB, SimConfig, simulate
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import preset
from tests.sim.sim_helpers import TOY_FAST, TOY_MODEL, toy_config, trace

STAGE_S = 0.01 + 1_024_000 / 1e6  # latency + bytes / bandwidth of r2's hit
LOAD_S = 1_024_000 / 1e7  # fast tier -> GPU
R1_END = 5.0 + 4096 / 1000  # r1's prefill step
R2_COMPUTE = LOAD_S + 512 / 1000  # r2's step: load the hit, prefill the 512 new tokens


def ttft_of_r2(res_cfg):
    from tests.sim.sim_helpers import run_engine

    res, eng = run_engine(res_cfg)
    return res, eng.table.first_token - eng.table.arrival


def test_on_demand_puts_staging_on_the_critical_path():
    # without the recompute fallback (here recomputing r2's 1024 tokens, 1.024 s, would beat
    # staging them, 1.034 s: see test_sim_recompute.py)
    res, ttft = ttft_of_r2(toy_config("on-demand", recompute_fallback=False))
    assert ttft[0] == pytest.approx(1.024)
    assert ttft[1] == pytest.approx(4.096)
    # r2 is needed when r1's step ends, staged then, read, prefilled
    assert ttft[2] == pytest.approx(R1_END + STAGE_S + R2_COMPUTE - 5.001)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (STAGE_S + LOAD_S))
    assert (res.claims, res.ready_in_time, res.ready_late) == (1, 0, 1)


def test_immediate_stages_at_arrival_and_holds_through_the_queue():
    res, ttft = ttft_of_r2(toy_config("immediate"))
    assert ttft[2] == pytest.approx(R1_END + R2_COMPUTE - 5.001)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (R1_END + LOAD_S - 5.001))
    assert (res.ready_in_time, res.ready_late) == (1, 0)


def test_timely_keeps_the_ttft_of_immediate_with_a_fraction_of_the_holding():
    res, ttft = ttft_of_r2(toy_config("timely"))
    imm, _ = ttft_of_r2(toy_config("immediate"))
    assert ttft[2] == pytest.approx(R1_END + R2_COMPUTE - 5.001)  # ready in time
    assert (res.ready_in_time, res.ready_late) == (1, 0)
    # committed shortly before the ideal moment R1_END - STAGE_S: holds a little over
    # STAGE_S + LOAD_S (about 1.13 s) instead of 4.2 s
    held = res.protected_byte_seconds / 1_024_000
    assert STAGE_S + LOAD_S <= held < STAGE_S + LOAD_S + 0.1
    assert res.protected_byte_seconds < 0.3 * imm.protected_byte_seconds


def test_no_slow_tier_hits_means_no_claims_and_identical_policies():
    t = trace([(0, 1024, 3, [0, 1]), (10, 2048, 2, [5, 6, 7, 8])])
    results = [simulate(toy_config(p, workload=t)) for p in ("on-demand", "immediate", "timely")]
    assert all(r.claims == 0 and r.protected_byte_seconds == 0.0 for r in results)
    assert len({(r.ttft_p50, r.ttft_p99, r.duration_s) for r in results}) == 1
    # r0: 1.024 s prefill; r1 (arrives at 10 ms) waits for that step, then prefills 2048 tokens
    # in a step that also decodes r0 (10 ms): TTFTs 1.024 and 1.024 + 2.058 - 0.01
    assert results[0].ttft_p50 == pytest.approx((1.024 + 3.072) / 2)


def test_gpu_cache_hits_need_no_staging():
    res = simulate(toy_config("on-demand", workload=trace([(0, 1024, 1, [0, 1]), (5000, 1536, 1, [0, 1, 2])]),
                              gpu_prefix_cache=True))
    assert res.claims == 0 and res.gpu_hit_token_share == pytest.approx(1024 / 2560)
    assert res.ttft_mean == pytest.approx((1.024 + 0.512) / 2)  # r1 prefills its 512 new tokens only


@pytest.mark.parametrize("policy", ["on-demand", "immediate", "timely"])
def test_workload_run_is_conserving_and_deterministic(policy):
    # a 16 GiB GPU pool (the default pool from an H200's memory holds this whole workload, and
    # nothing would be staged)
    cfg = SimConfig(workload=Workload(num_requests=150, arrival_rate=4.0, seed=3), policy=policy,
                    fast_tier=preset("cxl", 4 * GiB), gpu_kv_bytes=16 * GiB)
    a, b = simulate(cfg), simulate(cfg)
    assert a == b
    assert a.requests == 150
    assert a.peak_protected_bytes <= 4 * GiB
    # every claim is consumed (judged in time or late) or cancelled at scheduling
    assert a.ready_in_time + a.ready_late + a.claims_cancelled + a.claims_recomputed == a.claims > 0
    assert 0 < a.ttft_p50 <= a.ttft_p95 <= a.ttft_p99
    assert 0 < a.slow_hit_token_share < 1


def test_policy_ordering_on_a_loaded_workload():
    wl = Workload(num_requests=300, arrival_rate=4.0, seed=1)
    r = {p: simulate(SimConfig(workload=wl, policy=p, load=1.1, gpu_kv_bytes=16 * GiB))
         for p in ("on-demand", "immediate", "timely")}
    # immediate holds longest; on-demand is late every time; timely is mostly in time
    assert r["immediate"].protected_byte_seconds > 2 * r["timely"].protected_byte_seconds
    assert r["on-demand"].ready_in_time == 0
    assert r["timely"].ready_late < r["timely"].ready_in_time


def test_progress_callback_counts_every_request():
    seen = []
    simulate(toy_config("timely"), progress=seen.append)
    assert sum(seen) == 3


def test_plain_python_ledger_gives_the_same_result():
    from kvmm.testing.models.ledger import LedgerModel as NaiveLedger

    cfg = SimConfig(workload=Workload(num_requests=120, arrival_rate=4.0, seed=2), policy="timely", load=1.1,
                    gpu_prefix_cache=False)
    fast, ref = simulate(cfg), simulate(cfg, ledger_factory=NaiveLedger)
    assert (fast.ttft_p50, fast.ttft_p99, fast.claims, fast.ready_in_time, fast.ready_late) == \
        (ref.ttft_p50, ref.ttft_p99, ref.claims, ref.ready_in_time, ref.ready_late)
    assert fast.ready_in_time + fast.ready_late > 0  # the comparison covers claims that were used
    assert fast.protected_byte_seconds == pytest.approx(ref.protected_byte_seconds)


def test_max_requests_and_time_scale():
    cfg = toy_config("timely", load=None, time_scale=2.0, max_requests=2)
    res = simulate(cfg)
    assert res.requests == 2 and res.claims == 0  # r1 arrives at 10 s; r2 (the hit) is cut off


@pytest.mark.parametrize("kwargs", [
    dict(policy="eager"), dict(time_scale=0.0), dict(time_scale=-1.0), dict(max_requests=0),
    dict(stage_efficiency=float("nan")), dict(gpu_kv_bytes=-1), dict(load=0.0), dict(load=0.5, time_scale=2.0),
    dict(model="gpt-9"),
    dict(fast_tier="cxl"), dict(workload=3.5), dict(poll_interval_s=0.0), dict(margin_s=-1.0),
    dict(recompute_fallback="yes"), dict(high_priority_share=1.5), dict(priority_seed=-1),
])
def test_bad_configs(kwargs):
    with pytest.raises(BadInputError):
        SimConfig(**kwargs)


def test_bad_workloads():
    with pytest.raises(BadInputError):
        simulate("not a config")
    with pytest.raises(BadInputError):
        simulate(SimConfig(workload="no-such-trace-name"))
    with pytest.raises(BadInputError):
        Workload(prefix_ratio=1.5)
    with pytest.raises(BadInputError):
        Workload(arrival_rate=-2.0)


def test_workload_generator_is_seeded_and_hits_its_ratio():
    kw = dict(num_requests=400, prefix_ratio=0.75, num_prefixes=10)
    a, b = Workload(**kw, seed=5).trace(), Workload(**kw, seed=5).trace()
    assert np.array_equal(a.block_ids, b.block_ids) and np.array_equal(a.timestamp_ms, b.timestamp_ms)
    c = Workload(**kw, seed=6).trace()
    assert not np.array_equal(a.block_ids, c.block_ids)
    # blocks per request match the prompt length (Mooncake convention)
    nblocks = np.diff(a.block_offsets)
    assert np.array_equal(nblocks, -(-a.input_length // 512))
    # share of prompt blocks that repeat an earlier request's prefix is near the ratio
    # (10 contexts: only 10 of 400 requests miss their context)
    seen, reused, total = set(), 0, 0
    for r in range(a.num_requests):
        for blk in a.blocks_of(r).tolist():
            reused += blk in seen
            seen.add(blk)
        total += len(a.blocks_of(r))
    assert 0.65 < reused / total < 0.78


def test_admission_stays_work_conserving_when_the_window_waits_for_held_capacity():
    from tests.sim.sim_helpers import TOY_FAST, TOY_MODEL, make_engine

    t = trace([(0, 1024, 1, [0, 1]), (0, 1024, 1, [5, 6]), (1000, 1536, 1, [0, 1, 2]), (1000, 1536, 1, [5, 6, 7])])
    cfg = toy_config("on-demand", workload=t, model=TOY_MODEL.with_(max_batch=1),
                     fast_tier=TOY_FAST.with_capacity(1_500_000), recompute_fallback=False)
    eng = make_engine(cfg)
    for b in (0, 1, 5, 6):
        eng.hier.tiers[0].put_size(b, eng.block_bytes)
    waiting = eng.waiting
    eng.arrive(2)
    eng.arrive(3)
    # r3's hit is staged and ready, holding 1,024,000 of 1,500,000 bytes; r2 (first in line)
    # cannot be granted, and the batch window (max_batch 1) holds only r2
    c3 = int(eng.table.claim_id[3])
    eng.ledger.request([c3], now=1.0)
    assert eng.ledger.poll(1.0, timely=False).tolist() == [c3]
    eng.ledger.mark_ready([c3], now=1.0)
    admitted = eng.scheduler.schedule(waiting, eng.prefilling, 0, 1.0).admitted
    assert admitted == [3] and waiting == [2]  # without the fallback nothing could ever run
    # and a whole run of this trace finishes
    assert simulate(cfg).requests == 4


def test_immediate_holds_capacity_from_arrival_and_the_next_claim_waits_for_it():
    """Fast tier of 1.5 MB, two queued 1,024,000-byte hits: immediate staging commits r3's at its
    arrival and holds it through the queue; r4's claim (FIFO behind it) is granted only at the
    first controller poll after r3's step has read its data."""
    t = trace([
        (0, 1024, 1, [0, 1]), (0, 1024, 1, [2, 3]),  # cache two contexts (one 2.048 s step)
        (5000, 4096, 1, list(range(10, 18))),  # occupies the engine from 5.0 to 9.096 s
        (5001, 1536, 1, [0, 1, 4]), (5002, 1536, 1, [2, 3, 5]),  # two queued slow-tier hits
    ])
    res, ttft = ttft_of_r2(toy_config("immediate", workload=t, fast_tier=TOY_FAST.with_capacity(1_500_000),
                                      recompute_fallback=False))
    # r4's claim (5.002, nothing else ungranted) starts the controller's 5 ms timer: polls at
    # 5.007 + 0.005 k; r3's capacity is released at 9.1984, so r4 is committed at 9.202
    r4_commit = 5.007 + 839 * 0.005
    assert R1_END + LOAD_S == pytest.approx(9.1984) and r4_commit == pytest.approx(9.202)
    r4_ready = r4_commit + STAGE_S
    assert ttft[3] == pytest.approx(R1_END + R2_COMPUTE - 5.001)  # r3 staged long before use
    assert ttft[4] == pytest.approx(r4_ready + R2_COMPUTE - 5.002)  # r4 waited for the capacity
    held = (R1_END + LOAD_S - 5.001) + (r4_ready + LOAD_S - r4_commit)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * held)
    assert res.peak_protected_bytes == 1_024_000 and (res.ready_in_time, res.ready_late) == (1, 1)


def _shared_context_in_queue(policy, **kw):
    """r2 and r3 queue behind r1 (5.0-9.096 s) and both hit context [0, 1] in the slow tier only
    (r1's 8 blocks took the whole 8-block GPU pool).  One request per step: r2 runs at 9.096 and puts the
    context on the GPU, so at r3's scheduling (9.7104) its claim is not needed any more."""
    t = trace([
        (0, 1024, 1, [0, 1]),  # 0-1.024 s: context [0, 1] in both caches
        (2000, 2048, 1, [20, 21, 22, 23]),  # evicts it from the 3-block GPU cache
        (5000, 4096, 1, list(range(10, 18))),  # r1
        (5001, 1536, 1, [0, 1, 2]), (5002, 1536, 1, [0, 1, 3]),  # r2, r3
    ])
    cfg = toy_config(policy, workload=t, model=TOY_MODEL.with_(max_batch=1), gpu_prefix_cache=True,
                     gpu_kv_bytes=8 * 512 * 1000, **kw)
    return ttft_of_r2(cfg)


def test_a_claim_whose_prefix_reached_the_gpu_by_scheduling_is_cancelled():
    res, ttft = _shared_context_in_queue("immediate")
    r2_step_end = R1_END + R2_COMPUTE
    assert r2_step_end == pytest.approx(9.7104)
    assert ttft[3] == pytest.approx(r2_step_end - 5.001)
    # r3 is scheduled at 9.7104, finds [0, 1] on the GPU: claim released, 512 tokens prefilled
    assert ttft[4] == pytest.approx(r2_step_end + 0.512 - 5.002)
    assert (res.claims, res.claims_cancelled, res.ready_in_time, res.ready_late) == (2, 1, 1, 0)
    # immediate staging held r3's copy from its arrival to the cancellation, for nothing
    held = (R1_END + LOAD_S - 5.001) + (r2_step_end - 5.002)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * held)
    assert res.gpu_hit_token_share == pytest.approx(1024 / (1024 + 2048 + 4096 + 2 * 1536))


def test_on_demand_never_stages_a_claim_cancelled_at_scheduling():
    res, ttft = _shared_context_in_queue("on-demand", recompute_fallback=False)
    # r2 is needed at 9.096 and staged then (on the critical path); r3's claim was never committed
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (STAGE_S + LOAD_S))
    assert (res.claims, res.claims_cancelled, res.ready_in_time, res.ready_late) == (2, 1, 0, 1)
    assert ttft[4] == pytest.approx(R1_END + STAGE_S + R2_COMPUTE + 0.512 - 5.002)


def test_unknown_workload_path_is_a_clear_error(tmp_path):
    from kvmm.errors import BadInputError
    from kvmm.sim import SimConfig, simulate

    with pytest.raises(BadInputError, match="neither a file nor a bundled trace name"):
        simulate(SimConfig(workload=str(tmp_path / "missing.jsonl")))


def test_the_trace_block_size_sets_the_pool_block_size():
    """A format with 16-token blocks (Qwen-Bailian, vLLM) replays with 16-token GPU blocks."""
    import dataclasses

    from tests.sim.sim_helpers import run_engine

    t = dataclasses.replace(trace([(0, 32, 1, [0, 1]), (5000, 48, 1, [0, 1, 2])]), block_tokens=16)
    res, eng = run_engine(toy_config("on-demand", workload=t, gpu_prefix_cache=True))
    assert eng.hier.pool.block_size == 16 and eng.block_bytes == 16 * 1000
    assert res.gpu_hit_token_share == pytest.approx(32 / 80)
    assert (eng.table.first_token - eng.table.arrival)[1] == pytest.approx(16 / 1000)  # only the third block is computed


def test_a_trace_file_is_parsed_once_per_process_and_read_only(tmp_path):
    from kvmm.sim.simulator import resolve_trace
    from kvmm.traces import load_trace, save_trace

    path = tmp_path / "t.jsonl"
    save_trace(load_trace("conversation").head(30), path, "mooncake")
    first = resolve_trace(str(path), None)
    assert resolve_trace(str(path), None) is first  # the cached parse
    with pytest.raises(ValueError):  # no run can change what the next one reads
        first.block_ids[0] = 7
    save_trace(load_trace("conversation").head(40), path, "mooncake")  # the file changed: parsed again
    again = resolve_trace(str(path), None)
    assert again is not first and again.num_requests == 40
    assert resolve_trace(str(path), 10).num_requests == 10  # a prefix of the cached trace
