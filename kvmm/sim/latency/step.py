"""What one scheduler step costs: the :class:`LatencyModel` Protocol, the step features, and the
old constant-rate model.

A step is what vLLM's scheduler runs in one forward pass: some prefill chunks (each ``new``
tokens on top of ``context`` tokens already in the KV cache) and some decoding sequences (each
adds one token to its ``context``).  :func:`step_features` condenses a step into the seven
numbers of :data:`FEATURES`; every built-in model is a function of them, and the linear ones
(:class:`~kvmm.sim.latency.roofline.Roofline`, :class:`~kvmm.sim.latency.fitted.Fitted`) export
that function as a coefficient array (layout: :mod:`kvmm.sim.latency._kernels`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from kvmm._validate import as_index_array, as_positive_float
from kvmm.errors import BadInputError, ShapeError
from kvmm.sim.models import model as model_spec

__all__ = ["LatencyModel", "FEATURES", "COEF_LEN", "step_features", "ConstantRate", "linear_step_seconds", "linear_step_parts"]

#: The step features, in the order of :func:`step_features` and of each coefficient block:
#: ``step`` 1 for a non-empty step; ``prefill_tokens`` P = sum of the chunks' new tokens;
#: ``prefill_attention`` A = sum over chunks of ``new x context + new (new + 1) / 2`` (causal
#: query-key pairs); ``prefill_context`` Cp = sum of the chunks' contexts (KV read);
#: ``decode_tokens`` D = decoding sequences; ``decode_context`` Cd = sum of their contexts;
#: ``sequences`` S = chunks + decodes.
FEATURES: tuple[str, ...] = ("step", "prefill_tokens", "prefill_attention", "prefill_context",
                             "decode_tokens", "decode_context", "sequences")
#: Length of every coefficient array (kind 0 uses the first four entries, the rest are 0).
COEF_LEN = 25

_STEP, _P, _A, _CP, _D, _CD, _S = range(7)


@runtime_checkable
class LatencyModel(Protocol):
    """Seconds one scheduler step takes.

    ``prefill_new[i]`` new tokens of prefill chunk ``i`` on top of ``prefill_context[i]`` tokens
    already cached; ``decode_context[j]`` tokens whose KV decoding sequence ``j`` reads (it adds
    one).  Integer arrays (or lists); an empty step takes 0.0.  That is the whole contract: any
    object with this method can time the simulator's steps (docs/latency.md, "Your own model").
    """

    def step_seconds(self, prefill_new: Any, prefill_context: Any, decode_context: Any) -> float:
        ...


def step_features(prefill_new: Any, prefill_context: Any, decode_context: Any) -> np.ndarray:
    """The :data:`FEATURES` of one step, float64, length 7.  Chunks must have at least one new
    token; contexts are >= 0.  Runtime O(chunks + decodes)."""
    new, ctx, dec = _step_arrays(prefill_new, prefill_context, decode_context)
    s = new.shape[0] + dec.shape[0]
    out = np.zeros(len(FEATURES), dtype=np.float64)
    if s:
        out[_STEP] = 1.0
        out[_P] = float(new.sum())
        # integer pair counts, summed exactly before the one conversion to float
        out[_A] = float(int((new * ctx).sum()) + int((new * (new + 1) // 2).sum()))
        out[_CP] = float(ctx.sum())
        out[_D] = float(dec.shape[0])
        out[_CD] = float(dec.sum())
        out[_S] = float(s)
    return out


def linear_step_seconds(coef: np.ndarray, x: np.ndarray) -> float:
    """A kind-1 coefficient array applied to the features ``x`` (plain Python; the numba
    kernels in :mod:`kvmm.sim.latency._kernels` compute the same)."""
    if x[_S] == 0:
        return 0.0
    compute, memory, additive = linear_step_parts(coef, x)
    return max(compute, memory) + additive


def linear_step_parts(coef: np.ndarray, x: np.ndarray) -> tuple[float, float, float]:
    """``(compute, memory, additive)`` seconds of a kind-1 coefficient array on the features
    ``x``; the memory part includes the routed experts the step's tokens pick."""
    compute = float(np.dot(coef[1:8], x))
    memory = float(np.dot(coef[8:15], x))
    additive = float(np.dot(coef[15:22], x))
    per_expert, n, k = float(coef[22]), float(coef[23]), float(coef[24])
    if per_expert > 0 and n > 0:
        memory += per_expert * n * (1.0 - (1.0 - k / n) ** float(x[_P] + x[_D]))
    return compute, memory, additive


class ConstantRate:
    """The simulator's original model: prefill at a fixed token rate, decode at a per-step cost.

    ``step_seconds`` = ``sum(prefill_new) / prefill_tokens_per_s`` plus, when ``b`` sequences
    decode, ``(1 + decode_batch_cost x (b - 1)) / decode_tokens_per_s`` -- the same float
    operations as :class:`kvmm.sim.models.ModelSpec` and the engine, so old results stay
    bit for bit.  Contexts do not matter to it.
    """

    __slots__ = ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_batch_cost")

    def __init__(self, prefill_tokens_per_s: float, decode_tokens_per_s: float, decode_batch_cost: float = 0.0) -> None:
        self.prefill_tokens_per_s = as_positive_float(prefill_tokens_per_s, "prefill_tokens_per_s")
        self.decode_tokens_per_s = as_positive_float(decode_tokens_per_s, "decode_tokens_per_s")
        self.decode_batch_cost = as_positive_float(decode_batch_cost, "decode_batch_cost", allow_zero=True)

    @classmethod
    def from_spec(cls, spec: Any) -> ConstantRate:
        """The rates of a :class:`kvmm.sim.models.ModelSpec` (or a name from ``kvmm.sim.models.MODELS``)."""
        spec = model_spec(spec)
        return cls(spec.prefill_tokens_per_s, spec.decode_tokens_per_s, spec.decode_batch_cost)

    def step_seconds(self, prefill_new: Any, prefill_context: Any = (), decode_context: Any = ()) -> float:
        new, _, dec = _step_arrays(prefill_new, prefill_context, decode_context, contexts_optional=True)
        seconds = int(new.sum()) / self.prefill_tokens_per_s
        b = dec.shape[0]
        if b:
            seconds += (1.0 + self.decode_batch_cost * (b - 1)) / self.decode_tokens_per_s
        return seconds

    def coefficients(self) -> np.ndarray:
        """Kind 0: ``[0, prefill_tokens_per_s, decode_tokens_per_s, decode_batch_cost, 0, ...]``."""
        coef = np.zeros(COEF_LEN, dtype=np.float64)
        coef[1:4] = (self.prefill_tokens_per_s, self.decode_tokens_per_s, self.decode_batch_cost)
        return coef

    def __repr__(self) -> str:
        return (f"ConstantRate(prefill_tokens_per_s={self.prefill_tokens_per_s:g}, decode_tokens_per_s="
                f"{self.decode_tokens_per_s:g}, decode_batch_cost={self.decode_batch_cost:g})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstantRate) and self.coefficients().tolist() == other.coefficients().tolist()

    __hash__ = None  # mutable-looking value object: compare, do not hash


def _step_arrays(prefill_new: Any, prefill_context: Any, decode_context: Any, *,
                 contexts_optional: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated int64 copies of a step's three arrays."""
    new = as_index_array(prefill_new, "prefill_new")
    dec = as_index_array(decode_context, "decode_context")
    if contexts_optional and _is_empty(prefill_context):
        ctx = np.zeros_like(new)
    else:
        ctx = as_index_array(prefill_context, "prefill_context")
    if ctx.shape != new.shape:
        raise ShapeError(f"prefill_context has {ctx.shape[0]} entries but prefill_new has {new.shape[0]}; "
                         "expected one context per prefill chunk")
    if new.size and new.min() < 1:
        raise BadInputError(f"prefill_new holds {int(new.min())}; expected at least one new token per chunk")
    for arr, name in ((ctx, "prefill_context"), (dec, "decode_context")):
        if arr.size and arr.min() < 0:
            raise BadInputError(f"{name} holds {int(arr.min())}; expected token counts >= 0")
    return new, ctx, dec


def _is_empty(x: Any) -> bool:
    try:
        return len(x) == 0
    except TypeError:
        return False
