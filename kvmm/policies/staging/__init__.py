"""TempoKV's staging: the commitment ledger (:class:`CommitmentLedger`: metadata-only claims on
slow-tier hits, committed to protected fast-tier capacity just in time; its numba kernels, checks,
invariants and state codes in the ``_ledger_*`` modules) and the staging policies that drive it
(:mod:`kvmm.policies.staging.staging`: on-demand, immediate, immediate-EDF, timely; the
:class:`~kvmm.protocols.StagingPolicy` Protocol).  docs/tempokv.md.

This package replaced the module ``kvmm.policies.staging``; every name that module exported is
exported here, so ``from kvmm.policies.staging import TimelyStaging`` works unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_STAGING = "kvmm.policies.staging.staging"
_LAZY = {
    "CommitmentLedger": "kvmm.policies.staging.ledger",
    "StagingPolicy": _STAGING,
    "OnDemandStaging": _STAGING,
    "ImmediateStaging": _STAGING,
    "ImmediateEDFStaging": _STAGING,
    "TimelyStaging": _STAGING,
    "STAGING_POLICIES": _STAGING,
    "make_staging_policy": _STAGING,
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.policies.staging.ledger import CommitmentLedger
    from kvmm.policies.staging.staging import (
        STAGING_POLICIES,
        ImmediateEDFStaging,
        ImmediateStaging,
        OnDemandStaging,
        StagingPolicy,
        TimelyStaging,
        make_staging_policy,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
