"""Argument checks of :class:`~kvmm.policies.staging.ledger.CommitmentLedger`: bounds and validators.

Every ledger call validates all of its input before it changes anything (a call that raises
leaves the ledger as it was).  The sane bounds of times, work and rates, the claim-id check
(one numba pass over the ids) and the number / array / tier validators live here, apart from
the ledger's state changes; :mod:`kvmm.policies.staging.ledger` re-exports the public bounds.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from kvmm._validate import as_array, as_count, as_index_array, as_positive_float
from kvmm.errors import BadInputError, DoubleFreeError, DTypeError, LedgerStateError, ShapeError, UnknownKeyError
from kvmm.policies.staging._ledger_kernels import check_claims_kernel
from kvmm.policies.staging._ledger_state import SLOT_BITS, SLOT_MASK, STATE_NAMES

if TYPE_CHECKING:
    from kvmm.policies.staging.ledger import CommitmentLedger

# Sane bounds: every int64 sum of byte counts (protected bytes, a source's queue + one claim)
# stays below 2**63, and every time computed from the inputs stays finite.
MAX_CAPACITY_BYTES = 1 << 62
RATE_BOUNDS = (1e-6, 1e12)  # learned progress rate, tokens/s (an observation above the top is refused)
RATIO_BOUNDS = (1e-3, 1e3)  # learned observed/predicted staging-time ratio (each observation clipped)
MAX_SECONDS = 1e12  # now, delays, deadlines, leases (about 31,700 years)
MAX_WORK = 1e15  # tokens of work ahead of a claim, or per progress observation
ALL_STATES = (1 << 8) - 1  # check_claims_kernel's state mask that lets every state through


def live_slots(ledger: CommitmentLedger, claim_ids: Any, *, unique: bool = False, allowed: tuple = (), verb: str = "",
               hint: str = "", double_free: bool = False) -> np.ndarray:
    """Slots of the open claims ``claim_ids`` (``unique``: each id at most once, else
    :class:`BadInputError`; ``allowed``: states the claims must be in, else
    :class:`LedgerStateError`).  ``double_free`` (release): an id already released, checked
    first, or an id named twice is a :class:`DoubleFreeError`.

    One numba pass (``check_claims_kernel``) checks everything; the error is raised here.
    """
    ids = as_index_array(claim_ids, "claim_ids")
    mask = ALL_STATES if not allowed else sum(1 << a for a in allowed)
    code, value, slots = check_claims_kernel(ids, ledger.state, ledger.generation, ledger.n_slots, unique, mask)
    if code and double_free:  # a released id is not open, so this scan runs only when something is wrong
        for cid in ids.tolist():
            if is_released(ledger, cid):
                what = "was already released (or its ready lease expired)" if ledger.ready_lease_s else "was already released"
                raise DoubleFreeError(f"claim {cid} {what}; release each claim once")
    if code == 1:
        cid = int(value)
        what = "was released" if is_released(ledger, cid) else "was never issued"
        raise UnknownKeyError(f"claim {cid} {what}; expected the id of an open claim")
    if code == 2 and double_free:
        raise DoubleFreeError(f"claim_ids {ids.tolist()[:8]} name a claim twice; release each claim once")
    if code == 2:
        raise BadInputError(f"claim_ids name claim {int(value)} more than once; "
                            "expected each claim at most once per call")
    if code == 3:
        s = int(value)
        raise LedgerStateError(f"cannot {verb} the claim in slot {s}: it is {STATE_NAMES[ledger.state[s]]}; {hint}")
    return slots


def is_released(ledger: CommitmentLedger, cid: int) -> bool:
    if cid < 0:
        return False
    slot, gen = cid & SLOT_MASK, cid >> SLOT_BITS
    if slot >= ledger.n_slots:
        return False
    return gen < int(ledger.generation[slot])


def check_source(ledger: CommitmentLedger, source: Any) -> int:
    source = as_count(source, "source")
    if source >= ledger.num_sources:
        raise BadInputError(f"source must be in [0, {ledger.num_sources}), got {source}")
    return source


def check_now(ledger: CommitmentLedger, now: Any) -> float:
    if type(now) is float and ledger.clock <= now <= MAX_SECONDS:  # fast path (hot in simulations)
        return now
    t = bounded_float(now, "now", 0.0, MAX_SECONDS)
    if t < ledger.clock:
        raise BadInputError(f"now={t} is earlier than the ledger clock {ledger.clock}; time must not go backwards")
    return t


def spec_of(source: Any, i: int):
    spec = getattr(source, "spec", source)
    for attr in ("read_bandwidth", "latency_s"):
        if not hasattr(spec, attr):
            raise BadInputError(f"sources[{i}] must be a TierSpec (or have a .spec TierSpec), got {type(source).__name__}")
    as_positive_float(spec.read_bandwidth, f"sources[{i}].read_bandwidth")
    as_positive_float(spec.latency_s, f"sources[{i}].latency_s", allow_zero=True)
    return spec


def as_float_array(x: Any, name: str, k: int, *, maximum: float, allow_inf: bool = False) -> np.ndarray:
    """``x`` (a number or ``k`` numbers) as a new float64 array of values in ``[0, maximum]`` (or inf)."""
    if type(x) is float and 0.0 <= x <= maximum:  # fast paths (hot in simulations)
        return np.full(k, x)
    if type(x) is np.ndarray and x.dtype == np.float64 and x.shape == (k,) and k:
        lo, hi = x.min(), x.max()  # NaN fails both comparisons and takes the general path
        if lo >= 0.0 and hi <= maximum:
            return x.copy()
    arr = as_array(x, name)
    if arr.ndim == 0:
        arr = np.full(k, arr)
    if arr.dtype.kind not in "iuf":
        raise DTypeError(f"{name} must be numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=True)
    if arr.shape != (k,):
        raise ShapeError(f"{name} has shape {arr.shape}; expected ({k},)")
    bad = np.isnan(arr) | (arr < 0) | ((arr > maximum) & ~(np.isinf(arr) & allow_inf))
    if bad.any():
        what = f"numbers in [0, {maximum:.0e}]" + (" or inf" if allow_inf else "")
        raise BadInputError(f"{name} must be {what}, got {arr[bad][0]!r}")
    return arr


def time_bound(x: Any, name: str) -> float:
    """``x`` as a float bound on time: a number ``>= 0`` or ``inf`` (no bound); NaN, text and
    bools are refused (``float(x)`` would raise ValueError / TypeError, or let NaN through)."""
    if isinstance(x, (float, np.floating)) and x == math.inf:
        return math.inf
    return bounded_float(x, name, 0.0, math.inf)


def bounded_float(x: Any, name: str, lo: float, hi: float) -> float:
    """``x`` as a float in ``[lo, hi]`` (``lo >= 0``); rejects bools, text and other non-numbers
    (:class:`DTypeError`, from ``as_positive_float``), NaN, inf and values out of range."""
    v = as_positive_float(x, name, allow_zero=True)
    if not lo <= v <= hi:
        raise BadInputError(f"{name} must be in [{lo:g}, {hi:g}], got {x!r}")
    return v
