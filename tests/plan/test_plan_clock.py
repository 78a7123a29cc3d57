"""The clock stage 1 replays with (kvmm.plan._clock): a latency model's own coefficients, or, for a
model with only ``step_seconds``, a Fitted stand-in fitted to it on sampled steps."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.plan import SLO
from kvmm.plan._clock import replay_clock, sample_steps
from kvmm.plan._planner import _checked, analytic_grid
from kvmm.sim import GiB, SimConfig
from kvmm.sim.latency import Fitted
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace

TRUTH = Fitted(2e-3, {"prefill_tokens": 1 / 15_000, "decode_tokens": 1e-4, "decode_context": 3e-8})


class PrefillPlusBatch:
    """docs/latency.md's own model: no coefficients(), only step_seconds (the same function as TRUTH)."""

    def step_seconds(self, prefill_new, prefill_context, decode_context):
        if not len(prefill_new) and not len(decode_context):
            return 0.0
        return 2e-3 + sum(prefill_new) / 15_000 + 1e-4 * len(decode_context) + 3e-8 * sum(decode_context)


class Broken:
    def step_seconds(self, prefill_new, prefill_context, decode_context):
        return float("nan")


def _grid(latency):
    base = SimConfig(workload="conversation", max_requests=80, load=0.6, gpu_kv_bytes=8 * GiB, latency=latency)
    _, cands, prices, base = _checked("conversation", SLO(1.0), ["nvme:0-100GiB:points=3"], None, 1, None, 1, 0, base, None)
    return analytic_grid(base, cands, prices, 1)


def test_a_model_with_coefficients_is_replayed_with_them():
    cfg = SimConfig(workload="conversation", max_requests=20)
    serving = resolve_serving(cfg)
    clock = replay_clock(serving, resolve_trace("conversation", 20))
    assert clock.fitted is None
    assert clock.coef.tolist() == serving.latency.coefficients().tolist()
    assert (clock.chunked, clock.budget, clock.max_seqs, clock.threshold) == (
        serving.chunked_prefill, serving.max_num_batched_tokens, serving.max_num_seqs,
        serving.long_prefill_token_threshold)


def test_a_step_seconds_only_model_gets_a_fitted_stand_in():
    mine = _grid(PrefillPlusBatch())
    fitted = mine["clock"].fitted
    assert fitted is not None and fitted.report.r2 > 0.999999
    assert fitted.coefficients() == pytest.approx(TRUTH.coefficients(), rel=1e-6, abs=1e-15)
    same = _grid(TRUTH)  # the model it stands for, with its own coefficients
    assert same["clock"].fitted is None
    assert mine["ttft"] == pytest.approx(same["ttft"], rel=1e-6)
    assert mine["tpot"] == pytest.approx(same["tpot"], rel=1e-6)


def test_a_model_returning_nan_is_refused():
    with pytest.raises(BadInputError, match="Broken.step_seconds returned nan"):
        _grid(Broken())


def test_sampled_steps_fit_the_scheduler_limits():
    cfg = SimConfig(workload="conversation", max_requests=50, max_num_batched_tokens=2048, max_num_seqs=64)
    serving = resolve_serving(cfg)
    trace = resolve_trace("conversation", 50)
    steps = sample_steps(trace, serving, 90)
    assert len(steps) == 90
    longest = int(np.max(trace.input_length + trace.output_length))
    for new, ctx, dec in steps:
        assert new.sum() <= 2048 and len(dec) <= 64 and len(new) + len(dec) >= 1
        assert (ctx >= 0).all() and (dec >= 1).all() and (dec <= longest).all()
    assert any(len(n) and len(d) for n, _, d in steps)  # mixed steps too
    assert sample_steps(trace, serving, 90)[5][2].tolist() == steps[5][2].tolist()  # deterministic
