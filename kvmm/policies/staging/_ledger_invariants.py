"""Invariants of :class:`~kvmm.policies.staging.ledger.CommitmentLedger`: the body of ``check()``.

``CommitmentLedger.check()`` asserts every invariant of the slots, the capacity accounting and
the estimators after each step of the stateful tests.  It is expensive and changes nothing, so
its body lives here, apart from the ledger's per-event code.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from kvmm.policies.staging._ledger_checks import MAX_CAPACITY_BYTES, MAX_SECONDS, MAX_WORK, RATE_BOUNDS, RATIO_BOUNDS
from kvmm.policies.staging._ledger_state import CLAIMED, CONSUMED, FREE, HOLDING, PENDING, READY, STAGING

if TYPE_CHECKING:
    from kvmm.policies.staging.ledger import CommitmentLedger


def check_invariants(ledger: CommitmentLedger) -> None:
    """Assert every invariant of ``ledger`` (the body of :meth:`CommitmentLedger.check`)."""
    s = ledger.n_slots
    st = ledger.state[:s]
    # states are valid codes; slots past the high-water mark were never used
    assert np.all((st >= FREE) & (st <= CONSUMED)), "invalid state code"
    assert np.all(ledger.state[s:] == FREE), "slot beyond high-water mark in use"
    holding = np.isin(st, HOLDING)
    # every protected byte belongs to exactly one committed claim
    assert int(ledger.nbytes[:s][holding].sum()) == ledger.protected_bytes, "protected bytes not accounted for"
    # protected capacity is never exceeded
    assert 0 <= ledger.protected_bytes <= ledger._capacity <= MAX_CAPACITY_BYTES, "protected bytes over capacity"
    assert ledger.peak_protected_bytes >= ledger.protected_bytes, "peak below current"
    assert ledger.peak_protected_bytes <= ledger._capacity, "peak over capacity"
    # the staging queue of each source is exactly its STAGING claims' bytes
    staging = st == STAGING
    q = np.zeros_like(ledger.queue_bytes)
    np.add.at(q, ledger.source[:s][staging], ledger.nbytes[:s][staging])
    assert np.array_equal(q, ledger.queue_bytes), "staging queue bytes mismatch"
    # live claims are counted; the free stack holds exactly the released (free) used slots
    live = int(np.count_nonzero(st != FREE))
    assert live == ledger.open_claims, "open claim count mismatch"
    free_slots = ledger.free_stack[: ledger.free_top]
    assert free_slots.shape[0] == s - live, "free stack size mismatch"
    assert np.unique(free_slots).shape[0] == free_slots.shape[0], "slot twice on the free stack"
    assert np.all(st[free_slots] == FREE), "free stack holds a live slot"
    # every claim ever made is open or released; every consumed claim was judged once
    assert ledger.claims_total == ledger.open_claims + ledger.released_total, "claims not accounted for"
    assert ledger.consumed_in_time + ledger.consumed_late <= ledger.commits_total, "more consumptions than commits"
    # live claims carry sane sizes, sources and timestamps
    lv = st != FREE
    assert np.all(ledger.work_ahead[:s][lv] >= 0) and np.all(ledger.delay_s[:s][lv] >= 0), "negative time until use"
    assert np.all(ledger.nbytes[:s][lv] >= 1) and np.all(ledger.nbytes[:s][lv] <= ledger._capacity), "bad claim size"
    assert np.all((ledger.source[:s][lv] >= 0) & (ledger.source[:s][lv] < ledger.num_sources)), "bad source"
    assert np.all(ledger.claimed_at[:s][lv] <= ledger.clock), "claim from the future"
    assert np.all(ledger.committed_at[:s][holding] >= ledger.claimed_at[:s][holding]), "commit before claim"
    rd = np.isin(st, (READY, CONSUMED))
    assert np.all(ledger.ready_at[:s][rd] >= ledger.committed_at[:s][rd]), "ready before commit"
    assert np.all(np.isnan(ledger.committed_at[:s][np.isin(st, (CLAIMED, PENDING))])), "uncommitted claim with a commit time"
    # keys are stored only for live slots
    assert all(ledger.state[k] != FREE for k in ledger._keys), "keys kept for a released claim"
    # estimators stay positive and finite
    assert RATE_BOUNDS[0] <= ledger.rate <= RATE_BOUNDS[1], "progress rate outside its bounds"
    assert ledger.poll_gap >= 0.0 and math.isfinite(ledger.poll_gap), "bad poll gap"
    assert 0.0 <= ledger.use_slack <= 1.0, "use slack is a share of the time until use"
    lo, hi = RATIO_BOUNDS
    assert np.all((ledger.source_ratio >= lo) & (ledger.source_ratio <= hi)), "staging ratio outside its bounds"
    # times stay within their bounds (finite arithmetic)
    assert 0.0 <= ledger.clock <= MAX_SECONDS, "clock out of bounds"
    assert np.all(ledger.work_ahead[:s][lv] <= MAX_WORK), "work ahead out of bounds"
    assert np.all(ledger.delay_s[:s][lv] <= MAX_SECONDS), "time until use out of bounds"
    # committed claims know their bandwidth-model staging time; READY claims their lease start
    assert np.all(ledger.model_stage_s[:s][holding] > 0.0), "committed claim without a model staging time"
    assert np.all(ledger.lease_from[:s][st == READY] >= ledger.ready_at[:s][st == READY]), "lease before ready"
    # expired claims were released
    assert 0 <= ledger.expired_total <= ledger.released_total, "more expired than released claims"
    assert ledger.released_byte_seconds >= 0.0, "negative byte-seconds"
    # per-request byte-seconds add up to the released total
    assert math.isclose(sum(ledger._request_byte_seconds.values()), ledger.released_byte_seconds,
                        rel_tol=1e-9, abs_tol=1e-6), "per-request byte-seconds do not add up"
