"""The step clock and scheduler limits stage 1 replays with, taken from the run's
:class:`~kvmm.sim.serving.Serving` (kvmm.sim.serving.resolve_serving).

A latency model with ``coefficients()`` (``Roofline``, ``ConstantRate``, ``Fitted``, or a user's
model that exports the array) is replayed with exactly that array, through the simulator's own
kernels.  A model with only ``step_seconds`` (the Protocol: a user's object) cannot be called from
the numba replay, so stage 1 fits a :class:`~kvmm.sim.latency.Fitted` stand-in to it
(:func:`~kvmm.sim.latency.fit_latency`) on step compositions sampled from the trace's shapes
(:func:`sample_steps`); stage 2 still simulates with the model itself.  ``ReplayClock.fitted``
keeps the stand-in (its ``report`` says how well it fits the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.sim.latency.fitted import fit_latency

__all__ = ["ReplayClock", "replay_clock", "fit_stand_in", "sample_steps", "FIT_STEPS"]

#: step compositions sampled to fit a stand-in for a model without coefficients()
FIT_STEPS = 400


@dataclass(frozen=True)
class ReplayClock:
    """What the replay needs of the serving setup: ``coef`` (a float64 coefficient array, layout
    kvmm/sim/latency/_kernels.py), the scheduler's ``chunked``, ``budget``
    (max_num_batched_tokens), ``max_seqs`` and ``threshold`` (long_prefill_token_threshold), and
    ``fitted``: the Fitted stand-in when the model has no ``coefficients()`` (else None)."""

    coef: np.ndarray
    chunked: bool
    budget: int
    max_seqs: int
    threshold: int
    fitted: Any = None


def replay_clock(serving: Any, trace: Any) -> ReplayClock:
    """The :class:`ReplayClock` of ``serving`` for ``trace`` (its shapes bound the sampled steps
    of a stand-in fit).  Runtime complexity: O(1) with coefficients, else :data:`FIT_STEPS`
    calls of the model's ``step_seconds`` and one least-squares fit."""
    latency = serving.latency
    fitted = None
    coefficients = getattr(latency, "coefficients", None)
    if callable(coefficients):
        coef = np.ascontiguousarray(coefficients(), dtype=np.float64)
    else:
        fitted = fit_stand_in(latency, trace, serving)
        coef = np.ascontiguousarray(fitted.coefficients(), dtype=np.float64)
    return ReplayClock(coef, bool(serving.chunked_prefill), int(serving.max_num_batched_tokens),
                       int(serving.max_num_seqs), int(serving.long_prefill_token_threshold), fitted)


def fit_stand_in(latency: Any, trace: Any, serving: Any, steps: int = FIT_STEPS) -> Any:
    """A :class:`~kvmm.sim.latency.Fitted` fitted to ``latency.step_seconds`` on
    :func:`sample_steps` (relative errors; absolute when the model returns 0 for some step).
    Raises BadInputError when the model returns something that is not a finite number >= 0."""
    rows = []
    for new, ctx, dec in sample_steps(trace, serving, steps):
        try:
            seconds = float(latency.step_seconds(new, ctx, dec))
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"{type(latency).__name__}.step_seconds failed on a sampled step ({exc}); expected "
                                "seconds for integer arrays prefill_new, prefill_context, decode_context") from None
        if not np.isfinite(seconds) or seconds < 0:
            raise BadInputError(f"{type(latency).__name__}.step_seconds returned {seconds!r}; expected a finite "
                                "number of seconds >= 0")
        rows.append({"prefill_new": new, "prefill_context": ctx, "decode_context": dec, "seconds": seconds})
    positive = all(row["seconds"] > 0 for row in rows)
    return fit_latency(rows, weighting="relative" if positive else "absolute")


def sample_steps(trace: Any, serving: Any, steps: int = FIT_STEPS) -> list:
    """``steps`` step compositions ``(prefill_new, prefill_context, decode_context)`` (int64
    arrays) of the shapes the replay meets on ``trace``: a third prefill only (one or a few
    chunks of up to the step budget, contexts up to the longest prompt), a third decode only
    (batches of 1 to ``max_num_seqs``, log-spread, contexts up to the longest prompt + output), a
    third mixed.  Deterministic (seeded).  Runtime complexity: O(steps x max_num_seqs)."""
    rng = np.random.default_rng(20240521)
    inp = np.maximum(np.asarray(trace.input_length, dtype=np.int64), 1)
    out = np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1)
    max_prompt = int(inp.max()) if inp.size else 1
    max_ctx = int((inp + out).max()) if inp.size else 2
    budget = int(serving.max_num_batched_tokens)
    max_seqs = int(serving.max_num_seqs)

    def log_int(lo: int, hi: int) -> int:
        return int(min(hi, max(lo, round(float(np.exp(rng.uniform(np.log(lo), np.log(hi + 1))))))))

    out_steps = []
    for i in range(steps):
        kind = i % 3  # 0 prefill, 1 decode, 2 mixed
        dec = np.zeros(0, dtype=np.int64)
        new = np.zeros(0, dtype=np.int64)
        if kind != 0:
            b = log_int(1, max_seqs)
            dec = rng.integers(1, max_ctx + 1, b).astype(np.int64)
        if kind != 1:
            chunks = int(rng.integers(1, 4))
            new = np.array([log_int(1, max(budget // chunks, 1)) for _ in range(chunks)], dtype=np.int64)
        ctx = rng.integers(0, max_prompt, new.shape[0]).astype(np.int64) if new.size else np.zeros(0, dtype=np.int64)
        out_steps.append((new, ctx, dec))
    return out_steps
