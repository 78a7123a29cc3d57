"""The latency model's numba kernels: the contract between a LatencyModel's ``coefficients()`` and
the simulator's event loop.

Coefficient layout (float64, length 25, ``COEF_LEN``):

* ``coef[0]`` = kind.
* Kind 0, constant rate (:class:`~kvmm.sim.latency.step.ConstantRate`): ``coef[1]``
  prefill_tokens_per_s, ``coef[2]`` decode_tokens_per_s, ``coef[3]`` decode_batch_cost; the rest 0.
* Kind 1, linear roofline (:class:`~kvmm.sim.latency.roofline.Roofline`,
  :class:`~kvmm.sim.latency.fitted.Fitted`): over the step features
  ``x = (step, P, A, Cp, D, Cd, S)`` (:data:`~kvmm.sim.latency.step.FEATURES`), ``coef[1:8]``
  compute seconds per unit of each feature ``c``, ``coef[8:15]`` memory seconds ``m``,
  ``coef[15:22]`` additive seconds ``a``, ``coef[22]`` seconds to read one routed expert's
  weights across all MoE layers (per GPU) ``e``, ``coef[23]`` routed experts ``N``, ``coef[24]``
  experts per token ``k`` (``0, 0, 0`` for a dense model).  A step takes
  ``max(c.x, m.x + e N (1 - (1 - k/N)^(P + D))) + a.x``, and 0 when empty (``S = 0``).
  Fitted models use only the additive block.

Arguments: ``coef`` float64; the features ``P, A, Cp, D, Cd, S`` and ``Cd``, ``until_s`` are
float64; ``b``, ``k``, ``k_max`` int64 (>= 1).  Every kernel is compared with a plain-Python
reference in ``tests/sim/latency/test_sim_latency_kernels.py``.
"""

from __future__ import annotations

import math

from numba import njit

__all__ = ["step_split", "decode_stretch", "decode_stretch_seconds"]

# kind 0 reproduces kvmm.sim.engine's decode-stretch rounding: ceil(until / step - 1e-12)
_CEIL_SLACK = 1e-12


@njit(cache=True, nogil=True)
def step_split(coef, P, A, Cp, D, Cd, S):
    """``(prefill_s, decode_s)`` of one step.  Kind 0: ``(P / rate, decode part)`` exactly as
    ConstantRate computes them.  Kind 1: the step's total ``T`` split as ``T x Tp / (Tp + Td)``
    and the rest, where ``Tp`` is the step without its decodes (``D = Cd = 0``, ``S - D``
    sequences) and ``Td`` the step without its prefill chunks (``P = A = Cp = 0``, ``D``
    sequences).  Runtime O(1)."""
    if coef[0] == 0.0:
        prefill_s = P / coef[1]
        decode_s = 0.0
        if D > 0:
            decode_s = (1.0 + coef[3] * (D - 1.0)) / coef[2]
        return prefill_s, decode_s
    total = _linear_total(coef, P, A, Cp, D, Cd, S)
    tp = _linear_total(coef, P, A, Cp, 0.0, 0.0, S - D)
    td = _linear_total(coef, 0.0, 0.0, 0.0, D, Cd, D)
    if td == 0.0:
        return total, 0.0
    if tp == 0.0:
        return 0.0, total
    prefill_s = total * (tp / (tp + td))
    return prefill_s, total - prefill_s


@njit(cache=True, nogil=True)
def decode_stretch_seconds(coef, b, Cd, k):
    """Seconds of ``k`` decode-only steps of ``b`` sequences whose contexts sum to ``Cd`` at the
    first step and grow by ``b`` a step.  Kind 0: ``k x step_s``; kind 1: closed form (the step
    time is ``max`` of two linear functions of the step index plus a linear one), O(1)."""
    if coef[0] == 0.0:
        return k * _constant_decode_step(coef, b)
    if k <= 0 or b <= 0:
        return 0.0
    c0, c1, m0, m1, a0, a1 = _decode_lines(coef, b, Cd)
    return _stretch_sum(c0, c1, m0, m1, a0, a1, k)


@njit(cache=True, nogil=True)
def decode_stretch(coef, b, Cd, k_max, until_s):
    """``(k, seconds)``: run decode-only steps (as :func:`decode_stretch_seconds`) up to ``k_max``,
    stopping at the first ``k >= 1`` whose cumulative time reaches ``until_s`` (``inf``: run
    ``k_max``); ``seconds`` is the time of those ``k`` steps.  Kind 0 is the engine's
    ``k = max(1, min(k_max, ceil(until_s / step_s - 1e-12)))``, ``seconds = k x step_s``; kind 1
    binary-searches the closed form with the same relative slack (a step ending within
    ``1e-12`` of its own duration before ``until_s`` counts as reaching it).  O(log k_max)."""
    if coef[0] == 0.0:
        step_s = _constant_decode_step(coef, b)
        k = k_max
        if until_s != math.inf:
            # max(1, min(k_max, ceil(r))), comparing before the ceil so a huge r never becomes an int
            r = until_s / step_s - _CEIL_SLACK
            if r <= 1.0:
                k = 1
            elif r < k_max:
                k = int(math.ceil(r))
        return k, k * step_s
    if b <= 0:
        return k_max, 0.0
    c0, c1, m0, m1, a0, a1 = _decode_lines(coef, b, Cd)
    if until_s == math.inf or not _reaches(c0, c1, m0, m1, a0, a1, k_max, until_s):
        return k_max, _stretch_sum(c0, c1, m0, m1, a0, a1, k_max)
    lo, hi = 1, k_max
    while lo < hi:
        mid = (lo + hi) // 2
        if _reaches(c0, c1, m0, m1, a0, a1, mid, until_s):
            hi = mid
        else:
            lo = mid + 1
    return lo, _stretch_sum(c0, c1, m0, m1, a0, a1, lo)


@njit(cache=True, nogil=True)
def _linear_total(coef, P, A, Cp, D, Cd, S):
    """Kind-1 seconds of a step with these features (0 when S == 0)."""
    if S == 0.0:
        return 0.0
    compute = coef[1] + coef[2] * P + coef[3] * A + coef[4] * Cp + coef[5] * D + coef[6] * Cd + coef[7] * S
    memory = coef[8] + coef[9] * P + coef[10] * A + coef[11] * Cp + coef[12] * D + coef[13] * Cd + coef[14] * S
    additive = coef[15] + coef[16] * P + coef[17] * A + coef[18] * Cp + coef[19] * D + coef[20] * Cd + coef[21] * S
    memory += _expert_seconds(coef, P + D)
    return max(compute, memory) + additive


@njit(cache=True, nogil=True)
def _expert_seconds(coef, tokens):
    """Reading the expected distinct routed experts ``tokens`` tokens pick: ``e N (1 - (1 - k/N)^B)``."""
    e, n, k = coef[22], coef[23], coef[24]
    if e <= 0.0 or n <= 0.0:
        return 0.0
    return e * n * (1.0 - (1.0 - k / n) ** tokens)


@njit(cache=True, nogil=True)
def _constant_decode_step(coef, b):
    return (1.0 + coef[3] * (b - 1)) / coef[2]


@njit(cache=True, nogil=True)
def _decode_lines(coef, b, Cd):
    """Intercepts and slopes (per step index j) of the compute, memory and additive seconds of
    decode step j: features (1, 0, 0, 0, b, Cd + j b, b)."""
    fb = float(b)
    c0 = coef[1] + coef[5] * fb + coef[6] * Cd + coef[7] * fb
    m0 = coef[8] + coef[12] * fb + coef[13] * Cd + coef[14] * fb + _expert_seconds(coef, fb)
    a0 = coef[15] + coef[19] * fb + coef[20] * Cd + coef[21] * fb
    return c0, coef[6] * fb, m0, coef[13] * fb, a0, coef[20] * fb


@njit(cache=True, nogil=True)
def _line_sum(l0, l1, lo, hi):
    """Sum of ``l0 + l1 j`` for integer j in [lo, hi)."""
    n = hi - lo
    if n <= 0:
        return 0.0
    return l0 * n + l1 * (float(lo + hi - 1) * n / 2.0)


@njit(cache=True, nogil=True)
def _stretch_sum(c0, c1, m0, m1, a0, a1, k):
    """Sum over j in [0, k) of ``max(c0 + c1 j, m0 + m1 j) + a0 + a1 j``, splitting the max at
    the first index where the other line takes over."""
    # j in [0, split) belongs to the line that leads at j = 0, the rest to the other one
    compute_first = c0 >= m0
    split = _first_index_where_other_leads(c0, c1, m0, m1, k, compute_first)
    if compute_first:
        head = _line_sum(c0, c1, 0, split) + _line_sum(m0, m1, split, k)
    else:
        head = _line_sum(m0, m1, 0, split) + _line_sum(c0, c1, split, k)
    return head + _line_sum(a0, a1, 0, k)


@njit(cache=True, nogil=True)
def _first_index_where_other_leads(c0, c1, m0, m1, k, compute_first):
    """Smallest j in [0, k] where the line that did not lead at j = 0 is strictly above the
    other (k if none)."""
    if compute_first:
        lead0, lead1, other0, other1 = c0, c1, m0, m1
    else:
        lead0, lead1, other0, other1 = m0, m1, c0, c1
    if other1 <= lead1:
        return k  # never catches up
    crossing = (lead0 - other0) / (other1 - lead1)
    if crossing >= k:
        return k
    j = int(math.floor(crossing)) if crossing > 0.0 else 0
    # the float crossing can be off by one either way: settle on the exact integer comparisons
    while j > 0 and other0 + other1 * (j - 1) > lead0 + lead1 * (j - 1):
        j -= 1
    while j < k and not other0 + other1 * j > lead0 + lead1 * j:
        j += 1
    return j


@njit(cache=True, nogil=True)
def _reaches(c0, c1, m0, m1, a0, a1, k, until_s):
    """Whether k steps reach ``until_s``, with kind 0's slack of 1e-12 of the last step."""
    last = max(c0 + c1 * (k - 1), m0 + m1 * (k - 1)) + a0 + a1 * (k - 1)
    return _stretch_sum(c0, c1, m0, m1, a0, a1, k) + _CEIL_SLACK * last >= until_s
