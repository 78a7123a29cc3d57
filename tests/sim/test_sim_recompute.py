"""Serving simulator: the recompute fallback and the prefill budget of requests waiting for KV.

Toy numbers (tests/sim/sim_helpers.py): 1000 prefill tokens/s, 1000 bytes per token, slow tier
1e6 B/s + 10 ms, fast tier 1e7 B/s.  r2's 1024-token hit stages in 1.034 s and recomputes in 1.024 s.
"""

from __future__ import annotations

import pytest

from kvmm.policies.staging.ledger import STAGING
from tests.sim.sim_helpers import TOY_FAST, TOY_MODEL, finish, make_engine, run_engine, toy_config, trace

STAGE_S = 0.01 + 1_024_000 / 1e6
LOAD_S = 1_024_000 / 1e7


def run(cfg):
    res, eng = run_engine(cfg)
    return res, eng.table.first_token - eng.table.arrival


def test_on_demand_recomputes_when_staging_is_slower():
    res, ttft = run(toy_config("on-demand"))
    r1_end = 5.0 + 4.096
    # at 9.096 the copy would be ready at 9.096 + 1.034, recomputing takes 1.024 s: r2
    # releases the claim and prefills 512 + 1024 tokens
    assert ttft[2] == pytest.approx(r1_end + 1.536 - 5.001)
    # a claim released without being consumed is neither in time nor late
    assert (res.claims, res.claims_recomputed, res.ready_in_time, res.ready_late) == (1, 1, 0, 0)
    assert res.protected_byte_seconds == pytest.approx(0.0)  # granted and released at 9.096
    assert res.slow_hit_token_share == pytest.approx(0.0)


def test_on_demand_waits_when_staging_is_faster():
    slow_model = TOY_MODEL.with_(prefill_tokens_per_s=500.0)  # recomputing 1024 tokens: 2.048 s > 1.034 s
    res, ttft = run(toy_config("on-demand", model=slow_model))
    r1_end = 5.0 + 4096 / 500
    assert ttft[2] == pytest.approx(r1_end + STAGE_S + LOAD_S + 512 / 500 - 5.001)
    assert (res.claims_recomputed, res.ready_late) == (0, 1)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (STAGE_S + LOAD_S))


def test_fallback_off_keeps_staging():
    res, ttft = run(toy_config("on-demand", recompute_fallback=False))
    assert ttft[2] == pytest.approx(5.0 + 4.096 + STAGE_S + LOAD_S + 0.512 - 5.001)
    assert res.claims_recomputed == 0


def test_immediate_claim_blocked_by_held_capacity_is_recomputed():
    """1.5 MB fast tier: r3's copy (committed at arrival) holds 1,024,000 bytes; at 9.096 r4's
    claim (FIFO behind it) cannot be granted: it would be ready when r3's step has read its
    data (predicted: at once, r3 is consumed) + 1.034 s of staging > 1.024 s of recomputing, so
    r4 recomputes in the same step as r3."""
    t = trace([
        (0, 1024, 1, [0, 1]), (0, 1024, 1, [2, 3]),
        (5000, 4096, 1, list(range(10, 18))),
        (5001, 1536, 1, [0, 1, 4]), (5002, 1536, 1, [2, 3, 5]),
    ])
    res, ttft = run(toy_config("immediate", workload=t, fast_tier=TOY_FAST.with_capacity(1_500_000)))
    step_end = 9.096 + LOAD_S + (512 + 1536) / 1000  # r3 loads its hit; both prefill
    assert ttft[3] == pytest.approx(step_end - 5.001)
    assert ttft[4] == pytest.approx(step_end - 5.002)
    assert (res.claims, res.claims_recomputed, res.ready_in_time, res.ready_late) == (2, 1, 1, 0)
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (9.096 + LOAD_S - 5.001))


def test_a_request_waiting_for_its_kv_takes_no_prefill_budget():
    # budget 1024 tokens: r2 (512 new tokens, hit being staged) waits; r3 (1024 tokens, no
    # hit) behind it runs in this step.  Before, r2 reserved 512 of the 1024.
    t = trace([(0, 1024, 1, [0, 1]), (0, 1024, 1, [7, 8]), (1000, 1536, 1, [0, 1, 2]), (1000, 1024, 1, [30, 31])])
    cfg = toy_config("on-demand", workload=t, model=TOY_MODEL.with_(max_prefill_tokens=1024), recompute_fallback=False)
    eng = make_engine(cfg)
    for b in (0, 1):
        eng.hier.tiers[0].put_size(b, eng.block_bytes)
    waiting = eng.waiting
    eng.arrive(2)
    eng.arrive(3)
    admitted = eng.scheduler.schedule(waiting, eng.prefilling, 0, 1.0).admitted
    assert admitted == [3] and waiting == [2]
    assert int(eng.ledger.state_of([int(eng.table.claim_id[2])])[0]) == STAGING  # escalated and granted


def test_a_waiting_request_still_takes_a_batch_slot():
    t = trace([(0, 1024, 1, [0, 1]), (1000, 1536, 1, [0, 1, 2]), (1000, 1024, 1, [30, 31])])
    cfg = toy_config("on-demand", workload=t, model=TOY_MODEL.with_(max_batch=1), recompute_fallback=False)
    eng = make_engine(cfg)
    for b in (0, 1):
        eng.hier.tiers[0].put_size(b, eng.block_bytes)
    waiting = eng.waiting
    eng.arrive(1)
    eng.arrive(2)
    # the copy is in flight, so the work-conserving escape does not apply: nothing runs
    assert eng.scheduler.schedule(waiting, eng.prefilling, 0, 1.0).admitted == [] and waiting == [1, 2]


def test_recomputed_claims_are_accounted_on_a_workload():
    from kvmm.sim.simulator import GiB, SimConfig, simulate
    from kvmm.sim.workload import Workload
    from kvmm.tiers.spec import preset

    w = Workload(num_requests=150, arrival_rate=3.0, prefix_ratio=0.7, seed=4)
    for policy in ("on-demand", "immediate", "timely"):
        r = simulate(SimConfig(workload=w, policy=policy, fast_tier=preset("cxl", 2 * GiB), gpu_prefix_cache=False))
        assert r.ready_in_time + r.ready_late + r.claims_cancelled + r.claims_recomputed == r.claims > 0
        assert 0 < r.slow_hit_token_share < 1


# ---------------------------------------------------------------------- priority classes
def _priority_engine(policy, rows, classes, **kw):
    cfg = toy_config(policy, workload=trace(rows), model=TOY_MODEL.with_(max_batch=1), **kw)
    eng = make_engine(cfg)
    eng.table.priority_class[:] = classes  # 0 = high priority
    return eng


def test_a_high_priority_request_jumps_the_queue():
    rows = [(0, 1024, 1, [0, 1]), (5000, 4096, 1, list(range(10, 18))),
            (5001, 1024, 1, [40, 41]), (5002, 1024, 1, [50, 51])]
    eng = _priority_engine("timely", rows, [1, 1, 1, 0])
    eng.run()
    ttft = eng.table.first_token - eng.table.arrival
    # one request per step: r1 until 9.096, then r3 (high) until 10.12, then r2 until 11.144
    assert ttft[3] == pytest.approx(10.12 - 5.002)
    assert ttft[2] == pytest.approx(11.144 - 5.001)


PRIORITY_ROWS = [
    (0, 1024, 1, [0, 1]), (0, 1024, 1, [2, 3]),  # contexts [0, 1] and [2, 3] reach the slow tier
    (5000, 4096, 1, list(range(10, 18))),  # r2 occupies the engine from 5.0 to 9.096 s
    (5001, 1536, 1, [0, 1, 4]),  # r3, normal priority, hit [0, 1]
    (5002, 1536, 1, [2, 3, 5]),  # r4, high priority, hit [2, 3]: runs before r3
]


def test_immediate_capacity_held_for_a_request_pushed_back_forces_a_recompute():
    # 1.5 MB fast tier: immediate staging commits r3's 1,024,000 bytes at 5.001; r4 (used first)
    # cannot get capacity until r3 runs, so at 9.096 it recomputes (1.536 s), then r3 runs
    eng = _priority_engine("immediate", PRIORITY_ROWS, [1, 1, 1, 1, 0], fast_tier=TOY_FAST.with_capacity(1_500_000))
    res = finish(eng)
    ttft = eng.table.first_token - eng.table.arrival
    assert ttft[4] == pytest.approx(9.096 + 1.536 - 5.002)
    assert ttft[3] == pytest.approx(9.096 + 1.536 + LOAD_S + 0.512 - 5.001)
    assert (res.claims_recomputed, res.ready_in_time) == (1, 1)
    assert res.high_priority_requests == 1 and res.ttft_p95_high_priority == pytest.approx(ttft[4])
    assert res.protected_byte_seconds == pytest.approx(1_024_000 * (9.096 + 1.536 + LOAD_S - 5.001))


def test_timely_stages_the_request_used_first():
    # timely staging learns r3 was pushed back (its work ahead grows by r4's 512 tokens), commits
    # r4's claim first (ready by 9.096), and r3's once r4's step has read its data
    eng = _priority_engine("timely", PRIORITY_ROWS, [1, 1, 1, 1, 0], fast_tier=TOY_FAST.with_capacity(1_500_000))
    res = finish(eng)
    ttft = eng.table.first_token - eng.table.arrival
    assert ttft[4] == pytest.approx(9.096 + LOAD_S + 0.512 - 5.002)  # ready in time
    released = 9.096 + LOAD_S
    # r3 is granted at the first controller poll after 9.1984 (5 ms grid), staged in 1.034 s,
    # then read and prefilled
    assert released + STAGE_S + LOAD_S + 0.512 - 5.001 <= ttft[3] <= released + 0.005 + STAGE_S + LOAD_S + 0.512 - 5.001 + 1e-9
    assert res.claims_recomputed == 0 and res.ready_in_time >= 1
