"""Fitted and fit_latency: known models are recovered from the steps they time, from a CSV or rows,
in either row format; the NNLS solver against brute force; clear errors for bad tables."""

from __future__ import annotations

import csv
import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.errors import BadInputError
from kvmm.sim.latency import FEATURES, FitReport, Fitted, Roofline, fit_latency, step_features
from kvmm.sim.latency.fitted import BETA_FEATURES, nnls

TRUE = Fitted(2e-3, {"prefill_tokens": 3e-5, "prefill_attention": 2e-10, "prefill_context": 4e-8,
                     "decode_tokens": 8e-5, "decode_context": 5e-8, "sequences": 6e-6})


def random_steps(rng, n, *, decode_only=False, prefill_only=False):
    out = []
    while len(out) < n:
        chunks = 0 if decode_only else int(rng.integers(0 if not prefill_only else 1, 4))
        new = rng.integers(1, 3000, chunks).tolist()
        ctx = rng.integers(0, 20_000, chunks).tolist()
        dec = [] if prefill_only else rng.integers(0, 30_000, int(rng.integers(0, 96))).tolist()
        if new or dec:
            out.append((new, ctx, dec))
    return out


def composition_rows(model, steps):
    return [{"prefill_new": " ".join(map(str, new)), "prefill_context": " ".join(map(str, ctx)),
             "decode_context": " ".join(map(str, dec)), "seconds": model.step_seconds(new, ctx, dec)}
            for new, ctx, dec in steps]


def test_a_known_fitted_model_is_recovered_from_a_csv(tmp_path):
    rows = composition_rows(TRUE, random_steps(np.random.default_rng(1), 80))
    path = tmp_path / "steps.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["prefill_new", "prefill_context", "decode_context", "seconds"])
        writer.writeheader()
        writer.writerows(rows)
    fitted = fit_latency(path)
    assert math.isclose(fitted.alpha, TRUE.alpha, rel_tol=1e-6)
    assert np.allclose(fitted.beta, TRUE.beta, rtol=1e-6, atol=0)
    assert isinstance(fitted.report, FitReport) and fitted.report.rows == 80
    assert fitted.report.r2 > 1 - 1e-9 and fitted.report.mape < 1e-9
    assert fitted == TRUE or np.allclose(fitted.coefficients(), TRUE.coefficients(), rtol=1e-6)


def test_aggregated_feature_rows_fit_the_same_model():
    steps = random_steps(np.random.default_rng(2), 40)
    rows = []
    for new, ctx, dec in steps:
        x = step_features(new, ctx, dec)
        row = {name: float(v) for name, v in zip(FEATURES, x)}
        if len(rows) % 2:
            del row["step"]  # optional: 1 when the step has sequences
        rows.append({**row, "seconds": TRUE.step_seconds(new, ctx, dec)})
    fitted = fit_latency(rows, weighting="absolute")
    assert np.allclose(fitted.coefficients(), TRUE.coefficients(), rtol=1e-5, atol=1e-15)


@given(st.one_of(st.just(0.0), st.floats(1e-9, 1e-2)),
       st.lists(st.one_of(st.just(0.0), st.floats(1e-10, 1e-3)), min_size=6, max_size=6), st.integers(0, 2**32 - 1))
def test_any_fitted_model_is_recovered(alpha, beta, seed):
    true = Fitted(alpha, beta)
    steps = random_steps(np.random.default_rng(seed), 30)
    rows = composition_rows(true, steps)
    fitted = fit_latency(rows, weighting="absolute")
    # absolute least squares: every step to within rounding of the table's longest one
    scale = max(row["seconds"] for row in rows)
    for new, ctx, dec in steps:
        want = true.step_seconds(new, ctx, dec)
        assert math.isclose(fitted.step_seconds(new, ctx, dec), want, rel_tol=1e-6, abs_tol=1e-9 * scale)


@pytest.mark.parametrize("model, kwargs, side", [
    (Roofline("llama-3.1-8b", "H100"), dict(prefill_only=True), "compute_s"),   # compute-bound prefill
    (Roofline("qwen2.5-32b", "H200", 2), dict(decode_only=True), "memory_s"),    # memory-bound decode
])
def test_a_roofline_in_its_linear_regime_is_recovered(model, kwargs, side):
    rng = np.random.default_rng(3)
    steps = [s for s in random_steps(rng, 200, **kwargs)
             if max(model.step_breakdown(*s)[k] for k in ("compute_s", "memory_s")) == model.step_breakdown(*s)[side]]
    steps = [(new, ctx, dec[:16]) for new, ctx, dec in steps]  # small decode batches stay memory-bound
    rows = composition_rows(model, steps)
    fitted = fit_latency(rows)
    assert fitted.report.r2 > 1 - 1e-9 and fitted.report.mape < 1e-6
    for new, ctx, dec in random_steps(np.random.default_rng(4), 20, **kwargs):
        dec = dec[:16]
        breakdown = model.step_breakdown(new, ctx, dec)
        if breakdown[side] == max(breakdown[k] for k in ("compute_s", "memory_s")):
            assert math.isclose(fitted.step_seconds(new, ctx, dec), model.step_seconds(new, ctx, dec), rel_tol=1e-6)


def test_noisy_measurements_report_their_error():
    rng = np.random.default_rng(5)
    steps = random_steps(rng, 100)
    rows = composition_rows(TRUE, steps)
    for row in rows:
        row["seconds"] *= 1 + rng.normal(0, 0.05)
    fitted = fit_latency(rows)
    assert 0.01 < fitted.report.mape < 0.1 and 0.8 < fitted.report.r2 < 1.0
    assert (fitted.coefficients() >= 0).all()


@given(st.integers(3, 12), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_nnls_matches_brute_force_over_active_sets(rows, cols, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(rows, cols)) * 10.0 ** rng.integers(-6, 6, cols)
    b = rng.normal(size=rows)
    x = nnls(a, b)
    assert (x >= 0).all()
    best = math.inf
    for k in range(cols + 1):
        for subset in itertools.combinations(range(cols), k):
            z = np.zeros(cols)
            if subset:
                z[list(subset)] = np.linalg.lstsq(a[:, subset], b, rcond=None)[0]
            if (z >= 0).all():
                best = min(best, float(np.linalg.norm(a @ z - b)))
    assert float(np.linalg.norm(a @ x - b)) <= best * (1 + 1e-7) + 1e-12


def test_fitted_validates_its_coefficients():
    assert Fitted(1e-3, [0.0] * 6) == Fitted(1e-3)
    assert Fitted(1e-3, {"decode_tokens": 2e-5}).beta_by_name["decode_tokens"] == 2e-5
    assert list(Fitted(0.0).beta_by_name) == list(BETA_FEATURES) == list(FEATURES[1:])
    with pytest.raises(BadInputError, match="alpha"):
        Fitted(-1.0)
    with pytest.raises(BadInputError, match="beta"):
        Fitted(0.0, {"decode_tokens": -1e-5})
    with pytest.raises(BadInputError, match="step constant is alpha"):
        Fitted(0.0, {"step": 1.0})
    with pytest.raises(BadInputError, match="expected 6"):
        Fitted(0.0, [1.0, 2.0])
    model = Fitted(1e-3, {"sequences": 1e-5})
    assert model.step_seconds([], [], []) == 0.0
    assert model.step_seconds([10], [0], [1, 2]) == 1e-3 + 3 * 1e-5
    coef = model.coefficients()
    assert coef[0] == 1.0 and coef[15] == 1e-3 and coef[21] == 1e-5 and not coef[1:15].any() and not coef[22:].any()
    assert repr(model) == "Fitted(alpha=0.001, sequences=1e-05)"


@pytest.mark.parametrize("table, match", [
    ([{"prefill_new": "1", "prefill_context": "0", "seconds": 1.0}] * 8, "expected 'seconds' and either"),
    ([{"prefill_new": "1", "prefill_context": "0", "decode_context": ""}] * 8, "lacks the column 'seconds'"),
    ([{"prefill_new": "1 x", "prefill_context": "0 0", "decode_context": "", "seconds": 1.0}] * 8, "space-separated"),
    ([{"prefill_new": "1", "prefill_context": "0", "decode_context": "", "seconds": "fast"}] * 8, "not a number"),
    ([{"prefill_new": "1", "prefill_context": "0", "decode_context": "", "seconds": 1.0}] * 6, "at least 7 rows"),
    ([{"prefill_new": "1", "prefill_context": "0", "decode_context": "", "seconds": 0.0}] * 8, "seconds > 0"),
    ([{"prefill_new": "1 2", "prefill_context": "0", "decode_context": "", "seconds": 1.0}] * 8, "one context per"),
    ([[1, 2, 3]] * 8, "expected a mapping"),
    (42, "CSV path or an iterable"),
    ("/nonexistent/steps.csv", "cannot read"),
])
def test_bad_tables_raise_saying_what_was_expected(table, match):
    with pytest.raises(BadInputError, match=match):
        fit_latency(table)
    with pytest.raises(BadInputError, match="weighting"):
        fit_latency([], weighting="robust")
