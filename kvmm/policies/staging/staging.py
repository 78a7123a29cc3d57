"""Staging policies: *when* a claimed slow-tier hit is copied into the protected fast tier.

All of them speak :class:`kvmm.protocols.StagingPolicy` and drive the same
:class:`~kvmm.policies.staging.ledger.CommitmentLedger`, so their protected byte-time is measured with
the same accounting:

* :class:`OnDemandStaging` stages at first use (the caller's ``ledger.need``, i.e. when the
  request is scheduled): no early holding, the slow tier's latency lands on the critical path;
  needed claims are granted in the order the scheduler needed them (deadline = need time);
* :class:`ImmediateStaging` asks for a commitment the moment the hit is claimed and takes
  capacity in claim (arrival) order, FIFO, as it frees up: the data is ready early but holds
  protected capacity for the whole queueing time, and when capacity is short, the claims found
  first hold it, however far their use is;
* :class:`ImmediateEDFStaging` asks at claim time too but grants earliest-deadline-first (the
  fair variant of immediate staging: same grant order as timely, only the trigger differs);
* :class:`TimelyStaging` (TempoKV) lets the ledger ask when the predicted time until use falls
  to the predicted time to make the data ready (plus the ledger's margin), and grants the
  requests earliest-deadline-first.

The loop a caller runs (one scheduler step)::

    cid = ledger.claim(request, keys, nbytes, now=t, work_ahead=tokens_ahead)
    policy.on_claim(cid, t)
    ...
    for granted in policy.due(t):     # commitments granted now: start their transfers
        start_transfer(granted)       # ... later: ledger.mark_ready([granted], now=done)
    # at use: ledger.need(ids, now=t) -> ready mask; consume; release

A new policy is a small dataclass (on ``_LedgerDriven``: the ``ledger`` field and its check)
with ``name``, ``on_claim`` and ``due``; add it to :data:`STAGING_POLICIES` and the contract
suite (tests/policies/staging/test_staging_contract.py) covers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.policies.staging.ledger import CommitmentLedger
from kvmm.protocols import StagingPolicy

__all__ = ["StagingPolicy", "OnDemandStaging", "ImmediateStaging", "ImmediateEDFStaging", "TimelyStaging", "STAGING_POLICIES",
           "make_staging_policy"]


@dataclass
class _LedgerDriven:
    """What every staging policy here holds: the ledger it drives (checked on construction)."""

    ledger: CommitmentLedger

    def __post_init__(self) -> None:
        for attr in ("poll", "request", "need"):
            if not callable(getattr(self.ledger, attr, None)):
                raise BadInputError(f"a staging policy needs a CommitmentLedger (with .{attr}), "
                                    f"got {type(self.ledger).__name__}")


@dataclass
class OnDemandStaging(_LedgerDriven):
    """Stage at first use only: ``due`` grants just the requests ``ledger.need`` escalated."""

    name: str = "on-demand"

    def on_claim(self, claim_id: int, now: float) -> None:
        """Nothing to do: knowing about the hit costs nothing until it is needed."""

    def due(self, now: float) -> np.ndarray:
        """Grant pending (needed) requests by need time within capacity.  Runtime complexity: one poll."""
        return self.ledger.poll(now, timely=False)


@dataclass
class ImmediateStaging(_LedgerDriven):
    """Ask for a commitment at claim time; grant in claim order (FIFO) within capacity."""

    name: str = "immediate"

    def on_claim(self, claim_id: int, now: float) -> None:
        """Request the commitment now.  Runtime complexity: O(1)."""
        self.ledger.request([claim_id], now=now)

    def due(self, now: float) -> np.ndarray:
        """Grant requests in claim order within capacity (FIFO: the order the hits were found).
        Runtime complexity: one poll."""
        return self.ledger.poll(now, timely=False, fifo=True)


@dataclass
class ImmediateEDFStaging(ImmediateStaging):
    """Ask for a commitment at claim time (:meth:`ImmediateStaging.on_claim`), but grant
    earliest-deadline-first (by predicted use time) within capacity: the strongest immediate
    baseline when the order of use differs from the order of arrival."""

    name: str = "immediate-edf"

    def due(self, now: float) -> np.ndarray:
        """Grant requests by deadline within capacity.  Runtime complexity: one poll."""
        return self.ledger.poll(now, timely=False)


@dataclass
class TimelyStaging(_LedgerDriven):
    """TempoKV: the ledger requests a commitment when time-until-use falls to time-to-ready."""

    name: str = "timely"

    def on_claim(self, claim_id: int, now: float) -> None:
        """Nothing yet: the claim is metadata-only until the ledger's trigger fires."""

    def due(self, now: float) -> np.ndarray:
        """Trigger due claims and grant EDF within capacity.  Runtime complexity: one poll."""
        return self.ledger.poll(now, timely=True)


#: name -> policy class (each takes the ledger as its only required argument).
STAGING_POLICIES: dict[str, type] = {
    "on-demand": OnDemandStaging,
    "immediate": ImmediateStaging,
    "immediate-edf": ImmediateEDFStaging,
    "timely": TimelyStaging,
}


def make_staging_policy(name: str, ledger: CommitmentLedger) -> Any:
    """Build a staging policy by name (see :data:`STAGING_POLICIES`)."""
    if name not in STAGING_POLICIES:
        raise BadInputError(f"unknown staging policy {name!r}; expected one of {sorted(STAGING_POLICIES)}")
    return STAGING_POLICIES[name](ledger)
