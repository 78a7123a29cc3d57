"""The step replay behind the TTFT/TPOT estimate (kvmm.plan._kernels.pair_statistics, which runs
kvmm.plan._replay.replay_instance per instance) against the plain-Python reference
(kvmm/testing/models/plan.py ``replay``) on random small workloads: tiny batches, step budgets and GPU
pools so that every admission limit binds, single-token outputs, bursts, several instances; on
the old clock (ConstantRate, whole prefills) and on the roofline and fitted clocks with chunked
prefill (and a long-prefill threshold) and without.  Two hand-worked examples pin the steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.plan._replay import pair_statistics
from kvmm.sim import SimConfig
from kvmm.sim.latency import ConstantRate, Fitted, ModelArch, Roofline, hardware
from kvmm.sim.models import model as resolve_model
from kvmm.testing.models import plan as naive

BT = 16  # tokens per block of these workloads
KVB = 131072  # KV bytes per token (llama-3.1-8b, bf16)

requests = st.lists(st.tuples(st.floats(0.0, 0.5), st.integers(1, 3000), st.integers(0, 3000), st.integers(1, 40),
                              st.booleans()), min_size=1, max_size=25)

CLOCKS = {
    "constant": lambda: ConstantRate.from_spec(resolve_model("llama3-8b")),
    "roofline": lambda: Roofline(ModelArch.named("llama-3.1-8b"), hardware("H200")),
    "roofline-tp2": lambda: Roofline(ModelArch.named("qwen2.5-32b"), hardware("H100"), 2),
    "fitted": lambda: Fitted(2e-3, {"prefill_tokens": 3e-5, "prefill_attention": 2e-10, "decode_tokens": 6e-5,
                                    "decode_context": 4e-8, "sequences": 5e-6}),
}


def _stats(latency, reqs, instances, max_seqs, budget, pool_factor, chunked, threshold):
    arrival = np.cumsum([gap for gap, *_ in reqs])
    inp = np.array([i for _, i, *_ in reqs], dtype=np.float64)
    hit = np.array([min(h, i - 1) if staged else 0 for _, i, h, _, staged in reqs], dtype=np.float64)
    out = np.array([o for *_, o, _ in reqs], dtype=np.float64)
    held = np.ceil((inp + out - 1) / BT)
    pool = int(held.max()) * pool_factor // 4 + 1  # sometimes smaller than one request: it runs alone
    fast = SimConfig().fast_tier
    coef = np.ascontiguousarray(latency.coefficients(), dtype=np.float64)
    stats = pair_statistics(hit[:, None], np.zeros((len(reqs), 1)), -1, inp, out, held, arrival, instances, coef,
                            chunked, budget, max_seqs, threshold, float(pool), fast.read_bandwidth, fast.latency_s,
                            float(KVB))
    sched = {"chunked": chunked, "budget": budget, "max_seqs": max_seqs, "threshold": threshold}
    ref = naive.replay(arrival, inp.astype(int).tolist(), (inp - hit).astype(int).tolist(), (hit * KVB).tolist(),
                       out.astype(int).tolist(), held.astype(int).tolist(), instances, latency, sched, pool, fast)
    return arrival, out, [x[0, 0] for x in stats], ref


@pytest.mark.parametrize("clock", sorted(CLOCKS))
@pytest.mark.parametrize("chunked", [False, True])
@given(reqs=requests, instances=st.integers(1, 3), max_seqs=st.integers(1, 4), budget=st.integers(4, 4000),
       pool_factor=st.integers(1, 12), threshold=st.sampled_from([0, 0, 7, 500]))
@settings(max_examples=40, deadline=None)
def test_pair_statistics_replays_as_the_reference(clock, chunked, reqs, instances, max_seqs, budget, pool_factor,
                                                   threshold):
    arrival, out, (ttft95, mean_w, _, _, rho, end_s, tpot, queue), (start, first, finish) = _stats(
        CLOCKS[clock](), reqs, instances, max_seqs, budget, pool_factor, chunked, threshold)
    assert ttft95 == pytest.approx(float(np.quantile(np.array(first) - arrival, 0.95)), rel=1e-9, abs=1e-12)
    assert mean_w == pytest.approx(float(np.mean(np.array(start) - arrival)), rel=1e-9, abs=1e-12)
    assert end_s == pytest.approx(max(finish), rel=1e-9)
    per = [(f - s) / (o - 1) for s, f, o in zip(first, finish, out) if o >= 2]
    assert tpot == pytest.approx(float(np.quantile(per, 0.95)) if per else 0.0, rel=1e-9, abs=1e-12)
    assert 0.0 < rho <= 1.0 + 1e-9 and queue >= 1


# a clock simple enough to work by hand: 1 ms a step, 10 us a prefill token, 0.1 us a decode-context token
HAND = Fitted(1e-3, {"prefill_tokens": 1e-5, "decode_context": 1e-7})


def _two_requests(chunked: bool):
    # request 0 (100-token prompt) decodes 4 tokens; request 1 (16,000 tokens, one output token)
    # arrives during request 0's prefill; the step budget is 8,192 tokens
    inp, out = np.array([100.0, 16000.0]), np.array([4.0, 1.0])
    arrival = np.array([0.0, 0.0005])
    coef = np.ascontiguousarray(HAND.coefficients())
    return arrival, pair_statistics(np.zeros((2, 1)), np.zeros((2, 1)), -1, inp, out, np.array([1.0, 32.0]), arrival,
                                    1, coef, chunked, 8192, 8, 0, 1000.0, 1e12, 0.0, 1.0)


def test_chunked_prefill_step_by_step():
    arrival, stats = _two_requests(True)
    t1 = 1e-3 + 1e-5 * 100  # step 1: request 0's prompt; request 1 arrives meanwhile
    t2 = t1 + 1e-3 + 1e-5 * 8191 + 1e-7 * 100  # step 2: request 0 decodes (one token of the budget), request 1's first 8,191
    t3 = t2 + 1e-3 + 1e-5 * 7809 + 1e-7 * 101  # step 3: its last 7,809 beside request 0's next token
    t4 = t3 + 1e-3 + 1e-7 * 102  # step 4: request 0's last token, alone
    ttft95, _, _, _, _, end_s, tpot, _ = (x[0, 0] for x in stats)
    assert end_s == pytest.approx(t4, rel=1e-12)
    assert ttft95 == pytest.approx(float(np.quantile([t1, t3 - arrival[1]], 0.95)), rel=1e-12)
    assert tpot == pytest.approx((t4 - t1) / 3, rel=1e-12)
    # the long prompt never stalls request 0 for its whole prefill: no gap between its tokens is that long
    assert max(t2 - t1, t3 - t2, t4 - t3) < 1e-5 * 16000


def test_whole_prefills_step_by_step():
    arrival, stats = _two_requests(False)
    t1 = 1e-3 + 1e-5 * 100
    t2 = t1 + 1e-3 + 1e-5 * 16000 + 1e-7 * 100  # request 1's whole prompt beside request 0's first decode
    t4 = t2 + (1e-3 + 1e-7 * 101) + (1e-3 + 1e-7 * 102)  # request 0's last two tokens: one decode-only stretch
    ttft95, _, _, _, _, end_s, tpot, _ = (x[0, 0] for x in stats)
    assert end_s == pytest.approx(t4, rel=1e-12)
    assert ttft95 == pytest.approx(float(np.quantile([t1, t2 - arrival[1]], 0.95)), rel=1e-12)
    assert tpot == pytest.approx((t4 - t1) / 3, rel=1e-12)
    assert t2 - t1 > 1e-5 * 16000  # request 0's second token waited for the whole prefill


def test_a_long_prefill_stretches_the_decode_beside_it_on_the_old_clock():
    # ConstantRate, whole prefills (kvmm's scheduler before chunking): request 0 decodes 3 tokens;
    # request 1 arrives during its decode with a prompt that fills a step: request 0's next token waits
    m = resolve_model("llama3-8b")
    inp = np.array([100.0, 16000.0])
    out = np.array([4.0, 1.0])
    arrival = np.array([0.0, 0.004])
    coef = np.ascontiguousarray(ConstantRate.from_spec(m).coefficients())
    stats = pair_statistics(np.zeros((2, 1)), np.zeros((2, 1)), -1, inp, out, np.array([1.0, 32.0]), arrival, 1, coef,
                            False, m.max_prefill_tokens, m.max_batch, 0, 1000.0, 1e12, 0.0, 1.0)
    d1 = m.decode_step_seconds(1)
    t0 = 100 / m.prefill_tokens_per_s  # request 0's prefill step; request 1 has arrived by then
    assert arrival[1] < t0
    prefill_1 = 16000 / m.prefill_tokens_per_s
    finish_0 = t0 + (prefill_1 + d1) + d1 + d1  # its first decode step carries request 1's prefill
    assert stats[5][0, 0] == pytest.approx(finish_0, rel=1e-12)  # the replay's end: request 0's last token
    ttft_1 = t0 + prefill_1 + d1 - arrival[1]
    assert stats[0][0, 0] == pytest.approx(float(np.quantile([t0, ttft_1], 0.95)), rel=1e-12)
    assert stats[6][0, 0] == pytest.approx((finish_0 - t0) / 3, rel=1e-12)  # one TPOT: request 0's
