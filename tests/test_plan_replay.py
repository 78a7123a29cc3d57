"""The step replay behind the TTFT/TPOT estimate (kvmm.plan._kernels.pair_statistics) against the
plain-Python reference (tests/naive/plan.py ``replay``) on random small workloads: tiny batches,
prefill budgets and GPU pools so that every admission limit binds, single-token outputs, bursts,
several instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvmm.plan._kernels import pair_statistics
from kvmm.sim import SimConfig
from kvmm.sim.models import model as resolve_model
from tests.naive import plan as naive

BT = 16  # tokens per block of these workloads

requests = st.lists(st.tuples(st.floats(0.0, 0.5), st.integers(1, 3000), st.integers(0, 3000), st.integers(1, 40),
                              st.booleans()), min_size=1, max_size=25)


@given(requests, st.integers(1, 3), st.integers(1, 4), st.integers(500, 4000), st.integers(1, 12))
@settings(max_examples=120, deadline=None)
def test_pair_statistics_replays_as_the_reference(reqs, instances, max_batch, budget, pool_factor):
    m = resolve_model("llama3-8b").with_(max_batch=max_batch, max_prefill_tokens=budget)
    arrival = np.cumsum([gap for gap, *_ in reqs])
    inp = np.array([i for _, i, *_ in reqs], dtype=np.float64)
    hit = np.array([min(h, i - 1) if staged else 0 for _, i, h, _, staged in reqs], dtype=np.float64)
    out = np.array([o for *_, o, _ in reqs], dtype=np.float64)
    held = np.ceil((inp + out - 1) / BT)
    pool = int(held.max()) * pool_factor // 4 + 1  # sometimes smaller than one request: it runs alone
    block_bytes = BT * m.kv_bytes_per_token
    base = SimConfig(gpu_kv_bytes=pool * block_bytes)
    fast = base.fast_tier
    stats = pair_statistics(hit[:, None], np.zeros((len(reqs), 1)), -1, inp, out, held, arrival, instances,
                            m.prefill_tokens_per_s, fast.read_bandwidth, fast.latency_s, float(m.kv_bytes_per_token),
                            1.0 / m.decode_tokens_per_s, m.decode_batch_cost, max_batch, budget, float(pool))
    ttft95, mean_w, _, _, _, end_s, tpot = (x[0, 0] for x in stats)
    pre = (inp - hit).tolist()
    staged = (hit * m.kv_bytes_per_token).tolist()
    start, first, finish = naive.replay(arrival, pre, staged, out.astype(int).tolist(), held.astype(int).tolist(),
                                        instances, m, base, block_bytes)
    assert ttft95 == pytest.approx(float(np.quantile(np.array(first) - arrival, 0.95)), rel=1e-9, abs=1e-12)
    assert mean_w == pytest.approx(float(np.mean(np.array(start) - arrival)), rel=1e-9, abs=1e-12)
    assert end_s == pytest.approx(max(finish), rel=1e-9)
    per = [(f - s) / (o - 1) for s, f, o in zip(first, finish, out) if o >= 2]
    assert tpot == pytest.approx(float(np.quantile(per, 0.95)) if per else 0.0, rel=1e-9, abs=1e-12)


def test_a_long_prefill_stretches_the_decode_beside_it():
    # one instance: request 0 decodes 3 tokens; request 1 arrives during its decode with a prompt
    # that fills a step: request 0's next token waits for that prefill
    m = resolve_model("llama3-8b")
    inp = np.array([100.0, 16000.0])
    out = np.array([4.0, 1.0])
    arrival = np.array([0.0, 0.004])
    base = SimConfig()
    stats = pair_statistics(np.zeros((2, 1)), np.zeros((2, 1)), -1, inp, out, np.array([1.0, 32.0]), arrival, 1,
                            m.prefill_tokens_per_s, base.fast_tier.read_bandwidth, 0.0, 1.0, 1.0 / m.decode_tokens_per_s,
                            m.decode_batch_cost, m.max_batch, m.max_prefill_tokens, 1000.0)
    d1 = m.decode_step_seconds(1)
    t0 = 100 / m.prefill_tokens_per_s  # request 0's prefill step; request 1 has arrived by then
    assert arrival[1] < t0
    prefill_1 = 16000 / m.prefill_tokens_per_s
    finish_0 = t0 + (prefill_1 + d1) + d1 + d1  # its first decode step carries request 1's prefill
    assert stats[5][0, 0] == pytest.approx(finish_0, rel=1e-12)  # the replay's end: request 0's last token
    ttft_1 = t0 + prefill_1 + d1 - arrival[1]
    assert stats[0][0, 0] == pytest.approx(float(np.quantile([t0, ttft_1], 0.95)), rel=1e-12)
    assert stats[6][0, 0] == pytest.approx((finish_0 - t0) / 3, rel=1e-12)  # one TPOT: request 0's
