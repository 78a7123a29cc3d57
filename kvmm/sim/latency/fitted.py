"""A step-time model fitted to measured steps: ``seconds = alpha + beta . features`` (non-negative).

``fit_latency(table)`` calibrates it from a CSV (or rows) of steps timed on a real GPU: either
each step's composition (``prefill_new``, ``prefill_context``, ``decode_context`` as
space-separated integers, and ``seconds``) or its aggregated :data:`FEATURES` and ``seconds``.
The solver is Lawson-Hanson non-negative least squares (a coefficient below zero would make a
step faster when work is added to it).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_positive_float
from kvmm.errors import BadInputError
from kvmm.sim.latency.step import COEF_LEN, FEATURES, linear_step_seconds, step_features

__all__ = ["Fitted", "FitReport", "fit_latency", "nnls"]

#: The features ``beta`` weighs (``step`` is ``alpha``'s).
BETA_FEATURES: tuple[str, ...] = FEATURES[1:]
_COMPOSITION = ("prefill_new", "prefill_context", "decode_context")
_ADD = 15  # the additive block of a kind-1 coefficient array


@dataclass(frozen=True)
class FitReport:
    """How well a fit reproduces its table: ``rows``, ``r2`` (of seconds), ``mape`` (mean
    absolute percentage error over rows with seconds > 0, as a fraction), ``max_abs_error_s``."""

    rows: int
    r2: float
    mape: float
    max_abs_error_s: float


class Fitted:
    """``seconds = alpha + beta . x`` for a non-empty step, 0 for an empty one.

    ``beta`` weighs the features after ``step`` (:data:`BETA_FEATURES`: prefill_tokens,
    prefill_attention, prefill_context, decode_tokens, decode_context, sequences): a mapping
    ``name -> coefficient`` (missing names are 0) or a sequence in that order.  All coefficients
    are >= 0.  ``report`` is set by :func:`fit_latency`.
    """

    __slots__ = ("alpha", "beta", "report")

    def __init__(self, alpha: float, beta: Mapping[str, float] | Sequence[float] = (), *,
                 report: FitReport | None = None) -> None:
        self.alpha = as_positive_float(alpha, "alpha", allow_zero=True)
        self.beta = _beta_array(beta)
        self.beta.setflags(write=False)
        self.report = report

    @property
    def beta_by_name(self) -> dict[str, float]:
        return dict(zip(BETA_FEATURES, self.beta.tolist()))

    def step_seconds(self, prefill_new: Any, prefill_context: Any, decode_context: Any) -> float:
        return linear_step_seconds(self._coef(), step_features(prefill_new, prefill_context, decode_context))

    def coefficients(self) -> np.ndarray:
        """Kind 1 with only the additive block: ``coef[15] = alpha``, ``coef[16:22] = beta``."""
        return self._coef()

    def _coef(self) -> np.ndarray:
        coef = np.zeros(COEF_LEN, dtype=np.float64)
        coef[0] = 1.0
        coef[_ADD] = self.alpha
        coef[_ADD + 1:_ADD + len(FEATURES)] = self.beta
        return coef

    def __repr__(self) -> str:
        terms = ", ".join(f"{name}={value:.4g}" for name, value in self.beta_by_name.items() if value)
        fit = f", r2={self.report.r2:.4f}" if self.report else ""
        return f"Fitted(alpha={self.alpha:.4g}{', ' + terms if terms else ''}{fit})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fitted) and self.alpha == other.alpha and self.beta.tolist() == other.beta.tolist()

    __hash__ = None


def fit_latency(table: str | Path | Iterable[Mapping[str, Any]], *, weighting: str = "relative") -> Fitted:
    """Fit :class:`Fitted` to measured steps by non-negative least squares.

    ``table``: a CSV path or an iterable of rows (mappings).  A row holds ``seconds`` and either
    the composition columns ``prefill_new``, ``prefill_context``, ``decode_context`` (space-
    separated integers or lists; empty for none) or every name of :data:`BETA_FEATURES` (``step``
    optional: 1 when ``sequences > 0``).  ``weighting="relative"`` (default) minimises relative
    errors, so a 5 ms decode step counts as much as a 2 s prefill (every ``seconds`` must then be
    > 0); ``"absolute"`` minimises squared seconds.  Needs at least as many rows as the 7
    coefficients.  The returned model's ``report`` says how well it fits.  Runtime
    O(rows x 7^2) plus the steps' lengths.
    """
    if weighting not in ("relative", "absolute"):
        raise BadInputError(f"weighting must be 'relative' or 'absolute', got {weighting!r}")
    features, seconds = _read_table(table)
    if features.shape[0] < len(FEATURES):
        raise BadInputError(f"fit_latency needs at least {len(FEATURES)} rows (one per coefficient), got {features.shape[0]}")
    if weighting == "relative":
        bad = np.flatnonzero(seconds <= 0)
        if bad.size:
            raise BadInputError(f"row {int(bad[0])} has seconds={seconds[bad[0]]!r}; relative weighting needs seconds > 0 "
                                "(or use weighting='absolute')")
        scale = 1.0 / seconds
    else:
        scale = np.ones_like(seconds)
    coef = nnls(features * scale[:, None], seconds * scale)
    model = Fitted(float(coef[0]), coef[1:].tolist())
    predicted = features @ coef
    residual = seconds - predicted
    spread = float(np.sum((seconds - seconds.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual ** 2)) / spread if spread > 0 else (1.0 if not residual.any() else 0.0)
    positive = seconds > 0
    mape = float(np.mean(np.abs(residual[positive]) / seconds[positive])) if positive.any() else math.nan
    model.report = FitReport(rows=int(seconds.shape[0]), r2=r2, mape=mape, max_abs_error_s=float(np.max(np.abs(residual))))
    return model


def nnls(a: np.ndarray, b: np.ndarray, *, max_iter: int | None = None) -> np.ndarray:
    """Lawson-Hanson non-negative least squares: ``argmin ||a x - b||`` over ``x >= 0``.

    Columns are scaled to unit norm first (step features span ten orders of magnitude), and the
    solution scaled back.  Runtime O(iterations x rows x cols^2), iterations at most 3 cols by
    default."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.shape != (a.shape[0],):
        raise BadInputError(f"nnls needs a 2-D matrix and a vector of its rows, got shapes {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise BadInputError("nnls input holds NaN or infinity; expected finite numbers")
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    scaled = a / norms
    n = scaled.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    # gradients and solutions scale with b: so does the tolerance (0 when b is 0)
    tol = 10 * np.finfo(float).eps * max(scaled.shape) * max(1.0, float(np.abs(scaled).sum(axis=0).max())) \
        * float(np.linalg.norm(b))
    gradient = scaled.T @ (b - scaled @ x)
    for _ in range(max_iter if max_iter is not None else 3 * n):
        candidates = np.where(~passive, gradient, -np.inf)
        j = int(np.argmax(candidates))
        if passive.all() or candidates[j] <= tol:
            break
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(scaled[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > tol):
                break
            # step back toward the last feasible x until a passive coefficient hits zero
            blocking = passive & (z <= tol)
            gap = x[blocking] - z[blocking]
            step = float(np.min(np.where(gap > 0, x[blocking] / np.where(gap > 0, gap, 1.0), 0.0)))
            x = x + step * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
        gradient = scaled.T @ (b - scaled @ x)
    return np.maximum(x, 0.0) / norms


def _beta_array(beta: Mapping[str, float] | Sequence[float]) -> np.ndarray:
    if isinstance(beta, Mapping):
        unknown = set(beta) - set(BETA_FEATURES)
        if unknown:
            hint = " (the step constant is alpha)" if "step" in unknown else ""
            raise BadInputError(f"beta names unknown features {sorted(unknown)}{hint}; expected names from {list(BETA_FEATURES)}")
        values = [beta.get(name, 0.0) for name in BETA_FEATURES]
    else:
        values = list(beta)
        if not values:
            values = [0.0] * len(BETA_FEATURES)
        if len(values) != len(BETA_FEATURES):
            raise BadInputError(f"beta has {len(values)} coefficients; expected {len(BETA_FEATURES)} in the order "
                                f"{list(BETA_FEATURES)} (or a mapping by name)")
    return np.array([as_positive_float(v, f"beta[{name!r}]", allow_zero=True) for v, name in zip(values, BETA_FEATURES)],
                    dtype=np.float64)


def _read_table(table: str | Path | Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(features (n, 7), seconds (n,)) of a CSV path or an iterable of rows."""
    if isinstance(table, (str, Path)):
        try:
            with open(table, newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as exc:
            raise BadInputError(f"cannot read the step table {str(table)!r} ({exc}); expected a CSV file") from None
    else:
        try:
            rows = list(table)
        except TypeError:
            raise BadInputError(f"table must be a CSV path or an iterable of rows, got {type(table).__name__}") from None
    features = np.zeros((len(rows), len(FEATURES)), dtype=np.float64)
    seconds = np.zeros(len(rows), dtype=np.float64)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise BadInputError(f"row {i} is a {type(row).__name__}; expected a mapping of column names to values")
        seconds[i] = _number(row, "seconds", i)
        if all(name in row for name in _COMPOSITION):
            features[i] = step_features(*(_int_list(row[name], name, i) for name in _COMPOSITION))
        elif all(name in row for name in BETA_FEATURES):
            features[i, 1:] = [_number(row, name, i) for name in BETA_FEATURES]
            features[i, 0] = _number(row, "step", i) if row.get("step") not in (None, "") else float(features[i, -1] > 0)
        else:
            have = sorted(str(k) for k in row)
            raise BadInputError(f"row {i} has columns {have}; expected 'seconds' and either {list(_COMPOSITION)} "
                                f"or {list(BETA_FEATURES)}")
    return features, seconds


def _number(row: Mapping[str, Any], name: str, i: int) -> float:
    if name not in row:
        raise BadInputError(f"row {i} lacks the column {name!r}")
    value = row[name]
    try:
        out = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise BadInputError(f"row {i}, column {name!r}: {value!r} is not a number") from None
    if not math.isfinite(out) or out < 0:
        raise BadInputError(f"row {i}, column {name!r}: {value!r}; expected a finite number >= 0")
    return out


def _int_list(value: Any, name: str, i: int) -> list[int]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return [int(tok) for tok in value.split()]
        except ValueError:
            raise BadInputError(f"row {i}, column {name!r}: {value!r} is not a space-separated list of integers") from None
    if isinstance(value, (bool, float)) or not hasattr(value, "__iter__"):
        raise BadInputError(f"row {i}, column {name!r}: {value!r}; expected a list of integers")
    return list(value)
