"""Claim slots of :class:`~kvmm.policies.staging.ledger.CommitmentLedger`: codes, ids and the slot arrays.

A claim lives in a *slot* of a structure of arrays; its id packs the slot's generation and the
slot (``generation << 32 | slot``).  The state codes, the id layout, allocating and growing the
arrays, taking slots (released ones first) and writing / freeing claim records are the ledger's
storage, apart from its estimators and policy; :mod:`kvmm.policies.staging.ledger` re-exports the
public state codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kvmm._arrays import grown

if TYPE_CHECKING:
    from kvmm.policies.staging.ledger import CommitmentLedger

FREE, CLAIMED, PENDING, STAGING, READY, CONSUMED = 0, 1, 2, 3, 4, 5
STATE_NAMES = ("free", "claimed", "pending", "staging", "ready", "consumed")
HOLDING = (STAGING, READY, CONSUMED)  # states that hold protected capacity
SLOT_BITS = 32
SLOT_MASK = (1 << SLOT_BITS) - 1
MAX_SLOTS = 1 << 28  # a slot index must fit the id's 32 low bits; 2**28 open claims is plenty
# every slot array: name -> (dtype, value of a free slot); fresh and grown arrays take these values
SLOT_ARRAYS = {
    "state": (np.int8, FREE),
    "generation": (np.int64, 0),
    "claim_request": (np.int64, 0),
    "nbytes": (np.int64, 0),
    "source": (np.int32, 0),
    "seq": (np.int64, 0),
    "work_ahead": (np.float64, 0.0),
    "delay_s": (np.float64, 0.0),
    "updated_at": (np.float64, 0.0),
    "deadline": (np.float64, np.inf),
    "claimed_at": (np.float64, np.nan),
    "committed_at": (np.float64, np.nan),
    "predicted_stage_s": (np.float64, np.nan),
    "model_stage_s": (np.float64, np.nan),  # bandwidth-model staging time, no ratio
    "lease_from": (np.float64, np.nan),  # READY: when the lease (re)started
    "ready_at": (np.float64, np.nan),
    "needed_at": (np.float64, np.nan),
    "free_stack": (np.int64, 0),
    "poll_out": (np.int64, 0),  # scratch: slots granted by one poll
}


def alloc_slots(ledger: CommitmentLedger, n: int) -> None:
    """Fresh slot arrays (``SLOT_ARRAYS``) of ``n`` slots, every slot free."""
    for name, (dtype, fill) in SLOT_ARRAYS.items():
        setattr(ledger, name, np.full(n, fill, dtype=dtype))


def take_slots(ledger: CommitmentLedger, k: int) -> np.ndarray:
    """Pop ``k`` slots: released ones first (LIFO), then never-used ones in order."""
    reuse = min(k, ledger.free_top)
    out = np.empty(k, dtype=np.int64)
    out[:reuse] = ledger.free_stack[ledger.free_top - reuse : ledger.free_top][::-1]
    ledger.free_top -= reuse
    fresh = k - reuse
    if ledger.n_slots + fresh > ledger.state.shape[0]:
        _grow(ledger, ledger.n_slots + fresh)
    out[reuse:] = np.arange(ledger.n_slots, ledger.n_slots + fresh)
    ledger.n_slots += fresh
    return out


def _grow(ledger: CommitmentLedger, need: int) -> None:
    """Double the slot arrays until they hold ``need`` slots; new slots are free."""
    n = ledger.state.shape[0]
    while n < need:
        n *= 2
    for name, (_, fill) in SLOT_ARRAYS.items():
        setattr(ledger, name, grown(getattr(ledger, name), n, fill))


def write_claims(ledger: CommitmentLedger, slots: Any, request: Any, nbytes: Any, source: Any, work_ahead: Any, delay_s: Any,
                 now: float, seq: Any, k: int) -> None:
    """New CLAIMED records in ``slots`` (one slot and scalars, or ``k`` slots and arrays)."""
    ledger.state[slots] = CLAIMED
    ledger.claim_request[slots] = request
    ledger.nbytes[slots] = nbytes
    ledger.source[slots] = source
    ledger.work_ahead[slots] = work_ahead
    ledger.delay_s[slots] = delay_s
    ledger.updated_at[slots] = now
    ledger.deadline[slots] = np.inf
    ledger.claimed_at[slots] = now
    for name in ("committed_at", "predicted_stage_s", "model_stage_s", "ready_at", "lease_from", "needed_at"):
        getattr(ledger, name)[slots] = np.nan
    ledger.seq[slots] = seq
    ledger.next_seq += k
    ledger.open_claims += k
    ledger.claims_total += k


def release_slots(ledger: CommitmentLedger, slots: np.ndarray, now: float) -> np.ndarray:
    """Free validated, distinct live ``slots`` at ``now``; return their byte-seconds."""
    out = np.zeros(slots.shape[0], dtype=np.float64)
    for i, s in enumerate(slots.tolist()):
        st = ledger.state[s]
        if st in HOLDING:
            out[i] = float(ledger.nbytes[s]) * (now - float(ledger.committed_at[s]))
            ledger.protected_bytes -= int(ledger.nbytes[s])
            if st == STAGING:
                ledger.queue_bytes[ledger.source[s]] -= ledger.nbytes[s]
        req = int(ledger.claim_request[s])
        ledger._request_byte_seconds[req] = ledger._request_byte_seconds.get(req, 0.0) + float(out[i])
        ledger.state[s] = FREE
        ledger.generation[s] += 1
        ledger.free_stack[ledger.free_top] = s
        ledger.free_top += 1
        ledger._keys.pop(s, None)
    ledger.open_claims -= slots.shape[0]
    ledger.released_total += slots.shape[0]
    ledger.released_byte_seconds += float(out.sum())
    return out
