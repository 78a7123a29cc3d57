"""The instance's clock: a :class:`~kvmm.sim.latency.LatencyModel` asked once per scheduler step.

The event loop describes a step by its features (``kvmm.sim.latency.FEATURES``: prefill tokens
``P``, causal query-key pairs ``A``, prefill context read ``Cp``, decodes ``D``, decode context
read ``Cd``, sequences ``S``) and gets back the step's seconds split into a prefill and a decode
part (the cost account bills input and output tokens by them).

Three clocks, picked once per run from the model:

* :class:`ConstantClock` (``ConstantRate``, coefficient kind 0): today's constant-rate model,
  computed in Python with exactly the old float operations, so configs that use it keep their
  pinned results bit for bit;
* :class:`CoefficientClock` (``Roofline``, ``Fitted``: any model with ``coefficients()`` of
  kind 1): one numba call per step, and a decode-only stretch of ``k`` steps as a closed-form
  sum (``decode_stretch``), however long;
* :class:`ProtocolClock` (any other object with ``step_seconds``): the per-request arrays built
  for every step, a stretch summed step by step.  Correct for any model, slower.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvmm.errors import BadInputError

__all__ = ["make_clock", "ConstantClock", "CoefficientClock", "ProtocolClock"]


def make_clock(latency: Any) -> Any:
    """The clock of a latency model (see the module docstring)."""
    coefficients = getattr(latency, "coefficients", None)
    if callable(coefficients):
        coef = np.ascontiguousarray(coefficients(), dtype=np.float64)
        if coef[0] == 0:
            return ConstantClock(latency, coef)
        return CoefficientClock(latency, coef)
    return ProtocolClock(latency)


def causal_pairs(new: int, context: int) -> int:
    """Query-key pairs of a prefill chunk of ``new`` tokens after ``context`` cached ones: token
    ``i`` attends to ``context + i + 1`` keys."""
    return new * context + new * (new + 1) // 2


class ConstantClock:
    """Constant prefill rate; a decode step of ``b`` sequences takes ``(1 + c (b - 1)) / rate``."""

    needs_arrays = False

    def __init__(self, latency: Any, coef: np.ndarray) -> None:
        self.latency = latency
        self.prefill_rate = float(coef[1])
        self.decode_rate = float(coef[2])
        self.batch_cost = float(coef[3])

    def step(self, P: int, A: int, Cp: int, D: int, Cd: int, S: int) -> tuple[float, float]:
        decode = (1.0 + self.batch_cost * (D - 1)) / self.decode_rate if D else 0.0
        return P / self.prefill_rate, decode

    def stretch(self, b: int, Cd: int, k: int, until: float) -> tuple[int, float]:
        """``k`` decode-only steps of ``b`` sequences, fewer when the cumulative time reaches
        ``until`` first (the step that spans ``until`` included, at least one)."""
        step_s = (1.0 + self.batch_cost * (b - 1)) / self.decode_rate
        if until != math.inf:
            k = max(1, min(k, math.ceil(until / step_s - 1e-12)))
        return k, k * step_s

    def prefill_seconds(self, tokens: int, context: int = 0) -> float:
        return tokens / self.prefill_rate

    def prefill_rate_guess(self, budget: int) -> float:
        return self.prefill_rate


class CoefficientClock:
    """Roofline / fitted step times from the model's coefficient array (numba kernels)."""

    needs_arrays = False

    def __init__(self, latency: Any, coef: np.ndarray) -> None:
        # the step kernels load numba: here, when a run builds its clock, so that kvmm.sim.load
        # (offered_seconds, arrival times: the constant clock) compiles nothing
        from kvmm.sim.latency._kernels import decode_stretch, step_split

        self.latency = latency
        self.coef = coef
        self._split = step_split
        self._stretch = decode_stretch

    def step(self, P: int, A: int, Cp: int, D: int, Cd: int, S: int) -> tuple[float, float]:
        return self._split(self.coef, float(P), float(A), float(Cp), float(D), float(Cd), float(S))

    def stretch(self, b: int, Cd: int, k: int, until: float) -> tuple[int, float]:
        k, seconds = self._stretch(self.coef, b, float(Cd), k, until)
        return int(k), float(seconds)

    def prefill_seconds(self, tokens: int, context: int = 0) -> float:
        p, _ = self.step(tokens, causal_pairs(tokens, context), context, 0, 0, 1)
        return p

    def prefill_rate_guess(self, budget: int) -> float:
        return budget / self.prefill_seconds(budget)


class ProtocolClock:
    """Any ``step_seconds(prefill_new, prefill_context, decode_context)`` model.

    The loop passes the step's arrays (``needs_arrays``); the split between prefill and decode
    is each part's share of the two parts timed alone."""

    needs_arrays = True

    def __init__(self, latency: Any) -> None:
        self.latency = latency

    def seconds(self, prefill_new, prefill_context, decode_context) -> float:
        s = float(self.latency.step_seconds(np.asarray(prefill_new, dtype=np.int64),
                                            np.asarray(prefill_context, dtype=np.int64),
                                            np.asarray(decode_context, dtype=np.int64)))
        if not math.isfinite(s) or s < 0:
            raise BadInputError(f"{type(self.latency).__name__}.step_seconds returned {s!r}; expected a finite "
                                "number of seconds >= 0")
        return s

    def step_arrays(self, prefill_new, prefill_context, decode_context) -> tuple[float, float]:
        total = self.seconds(prefill_new, prefill_context, decode_context)
        if not len(decode_context):
            return total, 0.0
        if not len(prefill_new):
            return 0.0, total
        tp = self.seconds(prefill_new, prefill_context, ())
        td = self.seconds((), (), decode_context)
        share = tp / (tp + td) if tp + td > 0 else 0.5
        return total * share, total - total * share

    def stretch_arrays(self, contexts: np.ndarray, k: int, until: float) -> tuple[int, float]:
        """Step by step: every context grows by one per step."""
        total = 0.0
        steps = 0
        while steps < k:
            total += self.seconds((), (), contexts + steps)
            steps += 1
            if total >= until:
                break
        return steps, total

    def prefill_seconds(self, tokens: int, context: int = 0) -> float:
        return self.seconds([tokens], [context], ())

    def prefill_rate_guess(self, budget: int) -> float:
        s = self.prefill_seconds(budget)
        return budget / s if s > 0 else 1e12
