"""The latency kernels against their plain-Python references (kvmm/testing/models/latency.py), and kind 0
against the engine's own arithmetic, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.sim.latency import (
    COEF_LEN,
    ConstantRate,
    Fitted,
    Roofline,
    decode_stretch,
    decode_stretch_seconds,
    step_features,
    step_split,
)
from kvmm.sim.models import MODELS
from kvmm.testing.models import latency as naive

REL = 1e-9


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


coefficient = st.one_of(st.just(0.0), st.floats(1e-12, 1e-2))


@st.composite
def linear_coefs(draw):
    """Random kind-1 arrays: compute, memory and additive blocks, optionally MoE experts."""
    coef = np.zeros(COEF_LEN)
    coef[0] = 1.0
    coef[1:22] = draw(st.lists(coefficient, min_size=21, max_size=21))
    if draw(st.booleans()):
        n = draw(st.integers(2, 256))
        coef[22:25] = draw(st.floats(1e-6, 1e-3)), n, draw(st.integers(1, n))
    return coef


@st.composite
def features(draw):
    chunks = draw(st.lists(st.tuples(st.integers(1, 4000), st.integers(0, 50_000)), max_size=4))
    decodes = draw(st.lists(st.integers(0, 100_000), max_size=64))
    return step_features([n for n, _ in chunks], [c for _, c in chunks], decodes)


@given(linear_coefs(), features())
def test_step_split_kind1_matches_the_reference(coef, x):
    got = step_split(coef, *x[1:])
    want = naive.step_split(coef.tolist(), *x[1:].tolist())
    total = naive.linear_total(coef.tolist(), x.tolist())
    assert close(sum(got), total)
    # each part to within rounding of the total (a small part is the difference of two large ones)
    assert all(math.isclose(g, w, rel_tol=REL, abs_tol=REL * total) for g, w in zip(got, want))


@given(st.floats(1.0, 1e6), st.floats(1e-3, 1e4), st.floats(0.0, 1.0), features())
def test_step_split_kind0_is_constant_rate_bit_for_bit(prefill_rate, decode_rate, cost, x):
    model = ConstantRate(prefill_rate, decode_rate, cost)
    got = step_split(model.coefficients(), *x[1:])
    prefill_s = int(x[1]) / prefill_rate
    decode_s = (1.0 + cost * (int(x[4]) - 1)) / decode_rate if x[4] else 0.0
    assert got == (prefill_s, decode_s)
    assert got == naive.step_split(model.coefficients().tolist(), *x[1:].tolist())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_kind0_reproduces_the_engines_prefill_and_decode_arithmetic(name):
    spec = MODELS[name]
    coef = ConstantRate.from_spec(spec).coefficients()
    for prefill, batch in ((0, 1), (1000, 0), (16384, 63), (7, 128)):
        prefill_s, decode_s = step_split(coef, float(prefill), 0.0, 0.0, float(batch), 0.0, float(batch + 1))
        assert prefill_s == prefill / spec.prefill_tokens_per_s  # engine: load_s + prefill / rate, load_s = 0.0
        assert decode_s == (spec.decode_step_seconds(batch) if batch else 0.0)


@given(st.integers(1, 512), st.integers(1, 5000), st.one_of(st.just(math.inf), st.floats(-1.0, 100.0)))
def test_kind0_decode_stretch_is_the_engines_formula(batch, k_max, until_s):
    spec = MODELS["llama3-8b"]
    coef = ConstantRate.from_spec(spec).coefficients()
    k, seconds = decode_stretch(coef, batch, 0.0, k_max, until_s)
    step_s = spec.decode_step_seconds(batch)
    want_k = k_max if until_s == math.inf else max(1, min(k_max, math.ceil(until_s / step_s - 1e-12)))
    assert (k, seconds) == (want_k, want_k * step_s)
    assert decode_stretch_seconds(coef, batch, 0.0, k) == seconds


@given(linear_coefs(), st.integers(1, 64), st.integers(0, 200_000), st.integers(1, 300), st.floats(0.0, 2.0))
def test_decode_stretch_kind1_matches_stepping(coef, batch, context, k_max, fraction):
    full = naive.decode_stretch(coef.tolist(), batch, float(context), k_max, math.inf)[1]
    until_s = fraction * full  # sometimes inside the stretch, sometimes beyond it
    k, seconds = decode_stretch(coef, batch, float(context), k_max, until_s)
    want_k, want_seconds = naive.decode_stretch(coef.tolist(), batch, float(context), k_max, until_s)
    if k != want_k:  # only a cumulative time within rounding of until_s may flip the stop
        boundary = naive.decode_stretch(coef.tolist(), batch, float(context), min(k, want_k), math.inf)[1]
        assert abs(k - want_k) == 1 and close(boundary, until_s, 1e-9), (k, want_k)
    else:
        assert close(seconds, want_seconds)
    assert close(decode_stretch_seconds(coef, batch, float(context), k), seconds)
    assert close(decode_stretch(coef, batch, float(context), k_max, math.inf)[1], full)


@pytest.mark.parametrize("model, batch, k_max", [
    (Roofline("llama-3.1-8b", "H100"), 512, 3000),       # compute-bound first, KV reads take over
    (Roofline("llama-3.1-8b", "H100"), 8, 2000),          # memory-bound throughout
    (Roofline("qwen3-30b-a3b", "H100"), 128, 2000),       # MoE experts in the memory term
    (Roofline("deepseek-v3", "H200", 8, weight_dtype="fp8"), 64, 1500),  # MLA, tp communication
    (Roofline("qwen2.5-32b", "L40S", 2, mfu_decode=0.01), 256, 1500),  # compute-bound throughout
    (Fitted(1e-3, {"decode_tokens": 1e-5, "decode_context": 2e-9, "sequences": 3e-6}), 32, 1000),
])
def test_decode_stretch_of_real_models_including_crossovers(model, batch, k_max):
    coef = model.coefficients()
    context = float(batch * 100)
    stepped = [sum(step_split(coef, 0.0, 0.0, 0.0, float(batch), context + j * batch, float(batch))) for j in range(k_max)]
    cumulative = np.cumsum(stepped)
    assert close(decode_stretch_seconds(coef, batch, context, k_max), cumulative[-1])
    # until_s half way through step i: the stretch stops after step i (k = i + 1)
    for i in (0, 1, k_max // 3, k_max - 1):
        k, seconds = decode_stretch(coef, batch, context, k_max, cumulative[i] - stepped[i] / 2)
        assert k == i + 1 and close(seconds, cumulative[i])
    assert decode_stretch(coef, batch, context, k_max, 2 * cumulative[-1])[0] == k_max
    # each step time is what step_seconds says for that step
    x0 = [context / batch] * batch
    assert close(stepped[0], model.step_seconds([], [], [int(c) for c in x0]))


def test_the_llama_stretch_really_crosses_from_compute_to_memory():
    model = Roofline("llama-3.1-8b", "H100")
    first = model.step_breakdown([], [], [100] * 512)
    last = model.step_breakdown([], [], [100 + 2999] * 512)
    assert first["compute_s"] > first["memory_s"] and last["memory_s"] > last["compute_s"]


def test_empty_and_degenerate_stretches():
    coef = Roofline("llama-3.1-8b", "H100").coefficients()
    assert step_split(coef, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0) == (0.0, 0.0)
    assert decode_stretch_seconds(coef, 4, 0.0, 0) == 0.0
    assert decode_stretch(coef, 4, 0.0, 10, 0.0)[0] == 1  # at least one step
    assert decode_stretch(coef, 4, 0.0, 10, -5.0)[0] == 1
    k, seconds = decode_stretch(Fitted(0.0).coefficients(), 4, 0.0, 10, 1.0)  # steps that take no time
    assert (k, seconds) == (10, 0.0)
