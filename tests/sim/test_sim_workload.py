"""Seeded workloads: Markov-modulated (bursty) arrivals and the load control."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.sim import SimConfig, Workload
from kvmm.sim.load import arrival_times, offered_seconds
from kvmm.sim.models import MODELS
from kvmm.sim.serving import resolve_serving


def _window_counts(ts_ms, window_ms=10_000):
    return np.bincount((ts_ms // window_ms).astype(np.int64))


def test_bursty_arrivals_keep_the_mean_rate_and_raise_the_variance():
    calm = Workload(num_requests=4000, arrival_rate=4.0, seed=5).trace().timestamp_ms
    bursty = Workload(num_requests=4000, arrival_rate=4.0, seed=5, burstiness=0.8).trace().timestamp_ms
    assert bursty[-1] / 1000 == pytest.approx(4000 / 4.0, rel=0.3)  # same mean rate (about 35 phases: noisy)
    c, b = _window_counts(calm), _window_counts(bursty)
    assert b.var() / b.mean() > 3 * (c.var() / c.mean())  # Poisson: index of dispersion ~1
    assert np.array_equal(bursty, Workload(num_requests=4000, arrival_rate=4.0, seed=5, burstiness=0.8).trace().timestamp_ms)


@pytest.mark.parametrize("kw", [dict(burstiness=1.0), dict(burstiness=-0.1), dict(burst_seconds=0.0)])
def test_bad_burst_parameters(kw):
    with pytest.raises(BadInputError):
        Workload(**kw)


def test_load_rescales_arrivals_to_the_offered_work():
    wl = Workload(num_requests=500, seed=2)
    trace = wl.trace()
    for model in ("llama-3.1-8b", MODELS["llama3-8b"]):  # the roofline clock, and the old constant rates
        m = resolve_serving(SimConfig(workload=wl, model=model))
        for load in (0.5, 1.0):
            t = arrival_times(trace, m, SimConfig(workload=wl, load=load, model=model))
            assert offered_seconds(trace, m) / t[-1] == pytest.approx(load)
        # two instances: the same load needs arrivals twice as dense
        t2 = arrival_times(trace, m, SimConfig(workload=wl, load=0.5, instances=2, model=model))
        assert offered_seconds(trace, m) / (2 * t2[-1]) == pytest.approx(0.5)
    raw = arrival_times(trace, m, SimConfig(workload=wl, load=None, time_scale=3.0))
    assert raw[-1] == pytest.approx(3.0 * (trace.timestamp_ms[-1] - trace.timestamp_ms[0]) / 1000)


def test_an_overloaded_run_warns_once():
    from kvmm.sim import QueueGrowthWarning, simulate

    with pytest.warns(QueueGrowthWarning, match="queue reached"):
        simulate(SimConfig(workload=Workload(num_requests=300, seed=1), load=3.0, policy="on-demand"))
