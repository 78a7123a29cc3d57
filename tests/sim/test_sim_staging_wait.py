"""The staging-wait metric (SimResult.staging_wait_s_*) and advance notice (SimConfig.notice_s),
on toy traces with waits derived by hand (tests/sim/sim_helpers.py: 1000 prefill tokens/s, a slow
tier of 1 MB/s with 10 ms latency, a fast tier of 10 MB/s)."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.sim.config import PDConfig
from kvmm.sim.simulator import simulate, staging_wait_metrics
from tests.sim.sim_helpers import run_engine, toy_config, trace

STAGE_S = 0.01 + 1_024_000 / 1e6  # latency + bytes / bandwidth of the 1024-token hit
LOAD_S = 1_024_000 / 1e7  # fast tier -> GPU
R1_END = 5.0 + 4096 / 1000  # QUEUED_HIT: r1's prefill step ends, r2 is scheduled

#: r0 computes blocks 0,1 (written to the slow tier after its prefill); r1 arrives at 5 s with an
#: empty engine and hits them in the slow tier: nothing queues in front of it.
IDLE_HIT = trace([(0, 1024, 1, [0, 1]), (5000, 1536, 1, [0, 1, 2])])


def test_on_demand_waits_the_whole_copy_after_it_is_needed():
    res, eng = run_engine(toy_config("on-demand", recompute_fallback=False))
    # r2 is needed at R1_END (r1's step ends), its copy starts then: ready STAGE_S later
    assert eng.table.need_at[2] == pytest.approx(R1_END)
    assert eng.table.kv_ready_at[2] == pytest.approx(R1_END + STAGE_S)
    assert np.isnan(eng.table.need_at[:2]).all()  # r0, r1 have no claims
    assert (res.staging_wait_s_mean, res.staging_wait_s_p95, res.staging_wait_s_total) == pytest.approx((STAGE_S,) * 3)


@pytest.mark.parametrize("policy", ["immediate", "immediate-edf", "timely"])
def test_early_staging_is_ready_before_the_queue_reaches_it(policy):
    res, eng = run_engine(toy_config(policy, recompute_fallback=False))
    assert eng.table.need_at[2] == pytest.approx(R1_END)
    assert eng.table.kv_ready_at[2] <= R1_END
    assert (res.staging_wait_s_mean, res.staging_wait_s_p95, res.staging_wait_s_total) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("policy", ["on-demand", "immediate", "timely"])
def test_without_notice_an_idle_engine_waits_the_copy_under_every_policy(policy):
    # the hit is found at arrival, the engine is idle: every policy starts the copy at 5.0 s
    res, eng = run_engine(toy_config(policy, workload=IDLE_HIT, recompute_fallback=False))
    assert res.staging_wait_s_total == pytest.approx(STAGE_S)
    assert eng.table.first_token[1] - eng.table.arrival[1] == pytest.approx(STAGE_S + LOAD_S + 0.512)


def test_notice_lets_early_staging_hide_the_copy_and_on_demand_still_pays_it():
    res = {p: run_engine(toy_config(p, workload=IDLE_HIT, recompute_fallback=False, notice_s=2.0))
           for p in ("on-demand", "immediate", "timely")}
    ttft = {p: e.table.first_token[1] - e.table.arrival[1] for p, (_, e) in res.items()}
    # on-demand stages when r1 is scheduled, at its arrival: the copy is on its critical path
    assert res["on-demand"][0].staging_wait_s_total == pytest.approx(STAGE_S)
    assert ttft["on-demand"] == pytest.approx(STAGE_S + LOAD_S + 0.512)
    # immediate claims and copies at the announcement (3.0 s): ready at 4.034, held until read
    assert res["immediate"][1].table.kv_ready_at[1] == pytest.approx(3.0 + STAGE_S)
    assert res["immediate"][0].staging_wait_s_total == 0.0
    assert ttft["immediate"] == pytest.approx(LOAD_S + 0.512)
    assert res["immediate"][0].protected_byte_seconds == pytest.approx(1_024_000 * (2.0 + LOAD_S))
    # timely triggers near 5.0 - STAGE_S: ready by the arrival, held about STAGE_S + LOAD_S
    assert res["timely"][0].staging_wait_s_total == 0.0
    assert ttft["timely"] == pytest.approx(LOAD_S + 0.512)
    held = res["timely"][0].protected_byte_seconds / 1_024_000
    assert STAGE_S + LOAD_S <= held < STAGE_S + LOAD_S + 0.1


def test_notice_longer_than_the_trace_start_is_clipped_to_time_zero():
    res, eng = run_engine(toy_config("immediate", workload=IDLE_HIT, recompute_fallback=False, notice_s=60.0))
    # announced at 0 s, before r0 wrote blocks 0,1: nothing to claim then, looked up again at arrival
    assert res.claims == 1 and res.staging_wait_s_total == pytest.approx(STAGE_S)


def test_a_request_without_a_claim_has_no_staging_wait():
    res = simulate(toy_config("on-demand", workload=trace([(0, 1024, 3, [0, 1]), (10, 2048, 2, [5, 6, 7, 8])])))
    assert (res.claims, res.staging_wait_s_mean, res.staging_wait_s_p95, res.staging_wait_s_total) == (0, 0.0, 0.0, 0.0)


def test_staging_wait_metrics_skip_requests_that_never_waited_on_a_claim():
    got = staging_wait_metrics(np.array([np.nan, 0.0, 1.0, 3.0, np.nan]))
    assert got == {"staging_wait_s_mean": pytest.approx(4 / 3), "staging_wait_s_p95": pytest.approx(2.8),
                   "staging_wait_s_total": 4.0}
    assert staging_wait_metrics(np.array([np.nan])) == {}


@pytest.mark.parametrize("kw, word", [({"notice_s": -1.0}, "notice_s"), ({"notice_s": float("inf")}, "notice_s"),
                                      ({"notice_s": 1.0, "pd": PDConfig(1, 1)}, "one engine")])
def test_bad_notice_is_refused(kw, word):
    with pytest.raises(BadInputError, match=word):
        toy_config("timely", **kw)


@pytest.mark.parametrize("policy", ["timely", "immediate"])
def test_plain_python_ledger_gives_the_same_result_with_notice(policy):
    from dataclasses import replace

    from kvmm.sim.simulator import GiB, SimConfig
    from kvmm.testing.models.ledger import LedgerModel as NaiveLedger
    from kvmm.traces import agent_trace

    cfg = SimConfig(workload=agent_trace(num_agents=24, tasks=12, max_context_tokens=32_768), load=None, time_scale=1.5,
                    gpu_kv_bytes=16 * GiB, notice_s=2.0, policy=policy)
    fast, ref = simulate(cfg), simulate(cfg, ledger_factory=NaiveLedger)
    assert fast.claims > 20 and fast.staging_wait_s_total > 0
    assert replace(fast, load=0.0) == replace(ref, load=0.0)  # load is nan (trace timestamps): nan != nan
